"""Each registry's ActResNet / ActResNetV1d / ActResNeXt keeps that
registry's upstream contract, held against the installed classes.

For mmdet 3.3's and mmpretrain 1.2's ``ResNet``, ``ResNetV1d`` and
``ResNeXt`` (looked up in their registries, as a config does): every
constructor argument and default, every argument given a non-default value
(same state-dict keys and shapes, same modules where the activation is the
same, same outputs once the stock weights are loaded strictly, same frozen
parameters and norm modes), and every error, raised with an exception of
upstream's type.
"""
import copy
import inspect
import warnings

import pytest
import torch
import torch.nn as nn
from mmengine.registry import DefaultScope

import mmact  # noqa: F401

RELU = dict(type='ReLU')
OURS_ONLY = {'act_cfg', 'attention_cfg', 'recompute_act'}
# (registry scope, stock name); ours is 'Act' + name in the same registry.
FACES = [(scope, name) for scope in ('mmdet', 'mmpretrain')
         for name in ('ResNet', 'ResNetV1d', 'ResNeXt')]
# What a V1d sets itself: passing it is a TypeError upstream.
FIXED = {'ResNetV1d': {'deep_stem', 'avg_down'}}


def _registry(scope):
    if scope == 'mmdet':
        from mmdet.registry import MODELS
    else:
        from mmpretrain.registry import MODELS
    return MODELS


def _classes(scope, name):
    registry = _registry(scope)
    return registry.get(name), registry.get('Act' + name)


def _stock_arguments(cls, fixed):
    """Argument -> default over the ``__init__`` chain of a stock class."""
    found = {}
    for klass in cls.__mro__:
        if '__init__' not in vars(klass) or klass in (nn.Module, object):
            continue
        for name, param in inspect.signature(
                klass.__init__).parameters.items():
            if name != 'self' and name not in fixed and param.kind not in (
                    param.VAR_POSITIONAL, param.VAR_KEYWORD):
                found.setdefault(name, param.default)
    return found


@pytest.mark.parametrize('scope,name', FACES)
def test_arguments_and_defaults_are_upstreams(scope, name):
    stock, ours = _classes(scope, name)
    expected = _stock_arguments(stock, FIXED.get(name, ()))
    params = inspect.signature(ours).parameters
    assert set(params) - OURS_ONLY == set(expected)
    for arg, default in expected.items():
        assert params[arg].default == default, arg
    # the signature is what the constructor accepts: the fixed ones are not
    for arg in FIXED.get(name, ()):
        with pytest.raises(TypeError):
            ours(depth=50, **{arg: True})


# A non-default value for every argument upstream has (a new upstream
# argument fails test_every_argument_has_a_case).
GC = dict(type='ContextBlock', ratio=1. / 4)
CASES = {
    'depth': 'other',  # BasicBlock for ResNets, ResNeXt-101
    'in_channels': dict(in_channels=1),
    'stem_channels': dict(stem_channels=32),
    'base_channels': dict(base_channels=8),
    'expansion': dict(expansion=2),
    'num_stages': dict(
        num_stages=3, strides=(1, 2, 2), dilations=(1, 1, 1),
        out_indices=(0, 2), stage_with_dcn=(False, ) * 3),
    'strides': dict(strides=(1, 2, 2, 1)),
    'dilations': dict(strides=(1, 2, 1, 1), dilations=(1, 1, 2, 4)),
    'out_indices': dict(out_indices=(1, 3)),
    'style': dict(style='caffe'),
    'deep_stem': dict(deep_stem=True),
    'avg_down': dict(avg_down=True),
    'frozen_stages': dict(frozen_stages=2),
    'conv_cfg': dict(conv_cfg=dict(type='ConvWS')),
    'norm_cfg': dict(norm_cfg=dict(type='GN', num_groups=8)),
    'norm_eval': 'flip',
    'dcn': dict(
        dcn=dict(type='DCNv2', deform_groups=1, fallback_on_stride=False),
        stage_with_dcn=(False, True, False, True)),
    'stage_with_dcn': dict(
        dcn=dict(type='DCN', deform_groups=1, fallback_on_stride=False),
        stage_with_dcn=(False, False, True, False)),
    'plugins': dict(plugins=[
        dict(cfg=GC, stages=(False, True, True, True),
             position='after_conv3'),
        dict(
            cfg=dict(type='GeneralizedAttention', kv_stride=2,
                     attention_type='0010'),
            stages=(False, False, True, False),
            position='after_conv2'),
    ]),
    'with_cp': dict(with_cp=True),
    'zero_init_residual': dict(zero_init_residual=False),
    'pretrained': dict(pretrained='torchvision://resnet50'),
    'init_cfg': dict(init_cfg=dict(type='Pretrained', checkpoint='x.pth')),
    'drop_path_rate': dict(drop_path_rate=0.1),
    'groups': dict(groups=32),
    'base_width': dict(groups=32, base_width=8),
    'width_per_group': dict(groups=16, width_per_group=8),
}


def test_every_argument_has_a_case():
    for scope, name in FACES:
        stock, _ = _classes(scope, name)
        assert set(_stock_arguments(stock, FIXED.get(name, ()))) <= set(CASES)


def _cases():
    for scope, name in FACES:
        stock, _ = _classes(scope, name)
        for arg in sorted(_stock_arguments(stock, FIXED.get(name, ()))):
            yield pytest.param(scope, name, arg, id=f'{scope}-{name}-{arg}')


def _modules(model):
    """Name -> type, the blocks' activations left out (upstream: one shared
    ``relu``; ours: ``act1`` ... ``act3``, checked below)."""
    block_acts = ('.relu', '.act1', '.act2', '.act3')
    return {
        name: type(module)
        for name, module in model.named_modules()
        if not (name.startswith('layer') and name.endswith(block_acts))
    }


def _build_pair(scope, name, kwargs):
    stock_cls, ours_cls = _classes(scope, name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        torch.manual_seed(0)
        stock = stock_cls(**copy.deepcopy(kwargs))
        stock_warnings = [str(w.message) for w in caught]
        del caught[:]
        torch.manual_seed(0)
        ours = ours_cls(act_cfg=RELU, **copy.deepcopy(kwargs))
        ours_warnings = [str(w.message) for w in caught]
    assert ours_warnings == stock_warnings  # e.g. mmdet's `pretrained`
    return stock, ours


@pytest.mark.parametrize('scope,name,arg', list(_cases()))
def test_every_argument_builds_what_upstream_builds(scope, name, arg):
    stock_cls, _ = _classes(scope, name)
    defaults = _stock_arguments(stock_cls, FIXED.get(name, ()))
    # narrow (16 base channels) to stay quick on two cores
    kwargs = dict(depth=50, base_channels=16)
    if name == 'ResNeXt' and scope == 'mmdet':
        kwargs.update(groups=32, base_width=4)
    case = CASES[arg]
    if case == 'flip':
        case = {arg: not defaults[arg]}
    elif case == 'other':
        case = dict(depth=101 if name == 'ResNeXt' else 18)
    kwargs.update({k: v for k, v in case.items() if k in defaults})
    stock, ours = _build_pair(scope, name, kwargs)

    stock_state, ours_state = stock.state_dict(), ours.state_dict()
    assert {k: v.shape for k, v in ours_state.items()} == \
        {k: v.shape for k, v in stock_state.items()}
    # the same modules, ours of upstream's class or a subclass of it
    ours_modules, stock_modules = _modules(ours), _modules(stock)
    assert ours_modules.keys() == stock_modules.keys()
    for key, stock_type in stock_modules.items():
        assert issubclass(ours_modules[key], stock_type), key
    for block in (m for m in ours.modules() if hasattr(m, 'num_positions')):
        assert all(
            type(getattr(block, f'act{i}')) is nn.ReLU
            for i in range(1, block.num_positions + 1))
    # every setting upstream keeps, ours keeps with the same value
    for key, value in vars(stock).items():
        if key == 'block':
            assert issubclass(ours.block, value)
        elif not key.startswith('_') and not isinstance(value, nn.Module):
            assert getattr(ours, key) == value, key
    ours.load_state_dict(stock_state, strict=True)
    stock.train()
    ours.train()
    assert [p.requires_grad for p in ours.parameters()] == \
        [p.requires_grad for p in stock.parameters()]
    assert [m.training for m in _modules_list(ours)] == \
        [m.training for m in _modules_list(stock)]
    size = 128 if "dcn" in kwargs else 32  # DCN needs 128 px at stage 4
    x = torch.rand(2, kwargs.get('in_channels', 3), size, size)
    # train mode with autograd: ours takes its memory-lean path
    for mode, grad in (('train', True), ('eval', False)):
        getattr(stock, mode)()
        getattr(ours, mode)()
        with torch.set_grad_enabled(grad):
            torch.manual_seed(1)  # drop path
            expected = stock(x)
            torch.manual_seed(1)
            got = ours(x)
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            # equal_nan: mmcv's ConvWS gives NaN in deep stages upstream too
            torch.testing.assert_close(a, b, equal_nan=True)


def _modules_list(model):
    """Modules whose train / eval mode upstream sets; ours also sets the
    stem activation's with ``frozen_stages`` (a learnable one must not
    train in a frozen stem)."""
    return [
        m for name, m in model.named_modules()
        if name != 'relu' and not (name.startswith('layer') and name.endswith(
            ('.relu', '.act1', '.act2', '.act3')))
    ]


@pytest.mark.parametrize('scope,name', FACES)
def test_default_init_is_upstreams(scope, name):
    """Same weights after ``init_weights`` (mmdet zero-initialises the last
    norm of its ResNet's blocks, not of its ResNeXt's)."""
    stock, ours = _build_pair(scope, name, dict(depth=50))
    torch.manual_seed(0)
    stock.init_weights()
    torch.manual_seed(0)
    ours.init_weights()
    ours_state = ours.state_dict()
    for key, value in stock.state_dict().items():
        assert torch.equal(ours_state[key], value), key


# (kwargs, stock exception type); ours raises a subclass of it.
ERRORS = [
    (dict(depth=20), KeyError),
    (dict(depth=50, num_stages=5), AssertionError),
    (dict(depth=50, num_stages=0), AssertionError),
    (dict(depth=50, out_indices=(0, 4)), AssertionError),
    (dict(depth=50, strides=(1, 2, 2)), AssertionError),
    (dict(depth=50, dilations=(1, 1)), AssertionError),
    (dict(depth=50, frozen_stages=5), AttributeError),
    (dict(depth=50, style='tf'), AssertionError),
]
DET_ERRORS = [
    (dict(depth=50, pretrained='a.pth', init_cfg=dict(type='Pretrained')),
     AssertionError),
    (dict(depth=50, pretrained=1), TypeError),
    (dict(depth=50, dcn=dict(type='DCN'), stage_with_dcn=(True, )),
     AssertionError),
    (dict(depth=50, plugins=[dict(cfg=GC, position='after_conv4')]),
     AssertionError),
    (dict(depth=18, dcn=dict(type='DCN'), stage_with_dcn=(False, True) * 2),
     AssertionError),
]


def _error_cases():
    for scope, name in FACES:
        cases = ERRORS + (DET_ERRORS if scope == 'mmdet' else [])
        for i, (kwargs, error) in enumerate(cases):
            if name == 'ResNeXt' and kwargs['depth'] == 18:
                continue
            yield pytest.param(
                scope, name, kwargs, error, id=f'{scope}-{name}-{i}')


@pytest.mark.parametrize('scope,name,kwargs,error', list(_error_cases()))
def test_errors_carry_upstreams_type(scope, name, kwargs, error):
    stock, ours = _classes(scope, name)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        with pytest.raises(error):
            stock(**copy.deepcopy(kwargs))
        with pytest.raises(error):
            ours(**copy.deepcopy(kwargs))


def test_errors_keep_a_clear_message():
    from mmact.models.backbones import (FrozenStagesError, StageArgumentError,
                                        UnsupportedDepthError)
    _, ours = _classes('mmdet', 'ResNet')
    with pytest.raises(UnsupportedDepthError) as info:
        ours(depth=20)
    assert isinstance(info.value, ValueError) and isinstance(
        info.value, KeyError)
    # not KeyError's quoted form
    assert str(info.value) == ('DetActResNet: unsupported depth 20; choose '
                               'one of [18, 34, 50, 101, 152]')
    with pytest.raises(StageArgumentError, match=r'num_stages=5 .*\[1, 4\]'):
        ours(depth=50, num_stages=5)
    with pytest.raises(StageArgumentError, match=r'strides=\(1, 2\) needs'):
        ours(depth=50, strides=(1, 2))
    with pytest.raises(FrozenStagesError, match=r'frozen_stages=5'):
        ours(depth=50, frozen_stages=5)


def test_mmdet_resnetv1d_checkpoint_loads_strictly(tmp_path):
    """mmdet's V1d stem is one flat Sequential of nine modules and its
    ``avg_down`` pools in the stride-1 first stage too: ours has its keys."""
    stock, ours = _build_pair('mmdet', 'ResNetV1d', dict(depth=50))
    assert [type(m) for m in ours.stem] == [type(m) for m in stock.stem]
    assert len(ours.stem) == 9
    assert isinstance(ours.layer1[0].downsample[0], nn.AvgPool2d)
    path = tmp_path / 'v1d.pth'
    torch.save({'state_dict': stock.state_dict()}, path)
    state = torch.load(path)['state_dict']
    ours.load_state_dict(state, strict=True)
    with DefaultScope.overwrite_default_scope('mmdet'):
        learnable = _registry('mmdet').build(
            dict(type='ActResNetV1d', depth=50, act_cfg=dict(type='PReLU')))
    missing, unexpected = learnable.load_state_dict(state, strict=False)
    # a learnable activation adds only its own parameters
    assert not unexpected
    assert missing and all('.act' in k or k.startswith(('relu', 'stem.'))
                           for k in missing)
    assert all(isinstance(learnable.stem[i], nn.PReLU) for i in (2, 5, 8))
