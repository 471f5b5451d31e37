from pathlib import Path

import pytest
from mmengine.registry import MODELS, Registry

import mmact  # noqa: F401
from mmact.utils.preflight import (closest_registered, load_config,
                                   unknown_type_hint)

# config files and registries only
pytestmark = pytest.mark.stack_independent
REPO = Path(__file__).resolve().parents[3]
TOY_COCO = str(REPO / 'configs/toy/mask-rcnn_r50_fpn_toy-coco.py')


def test_config_typo_names_close_match():
    with pytest.raises(FileNotFoundError) as error:
        load_config(TOY_COCO.replace('coco.py', 'cocoo.py'))
    assert 'mask-rcnn_r50_fpn_toy-coco.py' in str(error.value)


def test_config_in_missing_folder():
    with pytest.raises(FileNotFoundError, match='No such folder'):
        load_config('configs/nowhere/x.py')


def test_cfg_options_are_merged():
    cfg = load_config(TOY_COCO, {'train_cfg.max_epochs': 1})
    assert cfg.train_cfg.max_epochs == 1


def test_closest_registered_searches_parents_and_other_scopes():
    root = Registry('thing')
    child = Registry('thing', parent=root, scope='lib_a')
    other = Registry('thing', parent=root, scope='lib_b')
    root.register_module(name='AGLU', module=object)
    child.register_module(name='ResNet', module=object)
    other.register_module(name='ResNeSt', module=object)
    assert closest_registered('ResNett', child) == ['ResNet', 'lib_b.ResNeSt']
    assert closest_registered('AGLUU', child) == ['AGLU']
    assert closest_registered('Zzzzzz', child) == []


def test_hint_for_mmengine_build_error():
    with pytest.raises(KeyError) as error:
        with MODELS.switch_scope_and_registry('mmdet') as registry:
            registry.build(dict(type='ResNett'))
    hint = unknown_type_hint(error.value)
    assert hint.startswith('Did you mean: ResNet')


def test_hint_for_activation_typo():
    # mmact's backbones check act_cfg before building dozens of blocks.
    with pytest.raises(KeyError) as error:
        with MODELS.switch_scope_and_registry('mmdet') as registry:
            registry.build(
                dict(type='ActResNet', depth=18, act_cfg=dict(type='AGLUU')))
    assert 'AGLU' in unknown_type_hint(error.value, 'mmdet')


def test_hint_for_other_errors():
    assert unknown_type_hint(KeyError('some key')) is None
    error = KeyError('Qqqqqqqqq is not in the mmdet::model registry.')
    assert unknown_type_hint(error).startswith('No registered name is close')
