"""Every installed mmdet config's ResNet / ResNetV1d / ResNeXt backbone keeps
its state-dict keys and output shapes when its type becomes ours.

The issue's target (mmact issue 51): a detection researcher changes
``type='ResNet'`` to ``type='ActResNet'`` in any mmdet 3.3 config. The
backbone dicts of the wheel's configs are collected once (``init_cfg`` and
``pretrained`` dropped: they load weights and do not shape the network;
identical dicts once) and each is built both ways with
``act_cfg=dict(type='ReLU')``. Built on the meta device (no weights to
initialise; the forward computes shapes only); DCN has no meta kernel, so
DCN backbones run one zero-filled CPU forward.
"""
import copy
import json
import os
import warnings
from glob import glob

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope

import mmact  # noqa: F401

STOCK = ('ResNet', 'ResNetV1d', 'ResNeXt')
NOT_STRUCTURAL = ('init_cfg', 'pretrained')
# the sweep in parts, each well under a minute on two cores
PARTS = 8


def _configs_root() -> str:
    import mmdet
    return os.path.join(os.path.dirname(mmdet.__file__), '.mim', 'configs')


def _backbones(node, found):
    """Every dict under a ``backbone`` key, at any depth (detectors inside
    trackers too)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == 'backbone' and isinstance(value, dict):
                found.append(value)
            _backbones(value, found)
    elif isinstance(node, (list, tuple)):
        for value in node:
            _backbones(value, found)


@pytest.fixture(scope='module')
def stock_backbones():
    """``(configs with a stock ResNet-family backbone, unique backbone
    dicts, configs that do not load)``."""
    files = sorted(
        f for f in glob(
            os.path.join(_configs_root(), '**', '*.py'), recursive=True)
        if '_base_' not in f.split(os.sep))
    using, unique, broken = [], {}, []
    for path in files:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                cfg = Config.fromfile(path)
        except FileNotFoundError:  # a few tracking configs name missing bases
            broken.append(path)
            continue
        found = []
        _backbones(cfg.to_dict(), found)
        mine = [b for b in found if str(b.get('type')).split('.')[-1] in STOCK
                and not str(b.get('type')).startswith('mmpretrain.')]
        if mine:
            using.append(path)
        for backbone in mine:
            backbone = {
                k: v
                for k, v in backbone.items() if k not in NOT_STRUCTURAL
            }
            backbone['type'] = backbone['type'].split('.')[-1]
            unique.setdefault(
                json.dumps(backbone, sort_keys=True, default=str), backbone)
    return using, list(unique.values()), broken


def test_the_sweep_covers_the_installed_configs(stock_backbones):
    using, unique, broken = stock_backbones
    # mmdet 3.3.0: 823 configs outside _base_, 547 of them with a stock
    # ResNet / ResNeXt backbone (none names ResNetV1d), 4 tracking configs
    # whose _base_ files the wheel lacks.
    assert len(using) >= 500, len(using)
    assert len(broken) <= 4, broken
    types = {b['type'] for b in unique}
    assert types <= set(STOCK) and {'ResNet', 'ResNeXt'} <= types
    assert any(b.get('dcn') for b in unique)
    assert any(b.get('plugins') for b in unique)


def _signature(model):
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _output_shapes(model, cfg):
    model.eval()
    shape = (1, cfg.get('in_channels', 3), 128, 128)
    dcn = cfg.get('dcn') is not None
    if dcn:
        # mmcv's deformable convolution has no meta kernel: real memory,
        # zeros (shapes are what is compared; DCN needs 128 px at stage 4)
        model.to_empty(device='cpu')
        with torch.no_grad():
            for tensor in model.state_dict().values():
                tensor.zero_()
        x = torch.zeros(shape)
    else:
        x = torch.zeros(shape, device='meta')
    with torch.no_grad():
        return [tuple(out.shape) for out in model(x)]


@pytest.mark.slow
@pytest.mark.parametrize('part', range(PARTS))
def test_changing_the_type_keeps_keys_and_output_shapes(stock_backbones, part):
    from mmdet.registry import MODELS
    _, unique, _ = stock_backbones
    failures = []
    with DefaultScope.overwrite_default_scope('mmdet'), \
            warnings.catch_warnings():
        warnings.simplefilter('ignore')
        for stock_cfg in unique[part::PARTS]:
            ours_cfg = dict(
                copy.deepcopy(stock_cfg),
                type='Act' + stock_cfg['type'],
                act_cfg=dict(type='ReLU'))
            with torch.device('meta'):
                stock = MODELS.build(copy.deepcopy(stock_cfg))
                ours = MODELS.build(ours_cfg)
            if _signature(ours) != _signature(stock):
                failures.append((stock_cfg, 'state dict'))
            elif _output_shapes(ours, stock_cfg) != _output_shapes(
                    stock, stock_cfg):
                failures.append((stock_cfg, 'output shapes'))
    assert not failures, failures
