"""ActivationOptimWrapperConstructor: zero decay from the activation
protocol, composed with mmengine's paramwise rules, and the same param
groups as the custom_keys blocks the configs used before."""
import copy
from pathlib import Path

import pytest
import torch.nn as nn
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import MODELS, init_default_scope

import mmact  # noqa: F401
from mmact.engine.optimizers import ActivationOptimWrapperConstructor
from mmact.models.activations import (AGLU, APA, IGLU, AReLU, FleS,
                                      IGLUApprox)

REPO = Path(__file__).resolve().parents[3]
CONSTRUCTOR = 'ActivationOptimWrapperConstructor'


class Net(nn.Module):

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.act = AGLU(num_parameters=8)
        self.gate = APA()
        self.arelu = AReLU()
        self.iglu = IGLU(learnable_sigma=True)
        self.iglu_fixed = IGLUApprox()  # sigma is a buffer
        self.fles = FleS(channels=8, reduction=4)
        # look-alike names that must keep their weight decay
        self.head = nn.Linear(8, 2)
        self.head.alpha = nn.Parameter(self.head.weight.new_ones(1))
        self.sigma = nn.Parameter(self.head.weight.new_ones(2))


NO_DECAY = {
    'act.kappa_param', 'act.lambda_param', 'gate.kappa_param',
    'gate.lambda_param', 'arelu.alpha', 'arelu.beta', 'iglu.sigma',
    'fles.fc1_bias', 'fles.fc2_bias'
}


def groups_by_name(wrapper, model):
    """Parameter name -> (lr, weight_decay) as the optimizer uses them."""
    names = {id(p): n for n, p in model.named_parameters()}
    out = {}
    for group in wrapper.optimizer.param_groups:
        for p in group['params']:
            out[names[id(p)]] = (group['lr'], group['weight_decay'])
    return out


def build(model, paramwise_cfg=None, optimizer=None):
    cfg = dict(
        constructor=CONSTRUCTOR,
        optimizer=optimizer
        or dict(type='SGD', lr=0.1, momentum=0.9, weight_decay=1e-4))
    if paramwise_cfg is not None:
        cfg['paramwise_cfg'] = paramwise_cfg
    return groups_by_name(build_optim_wrapper(model, cfg), model)


def test_declared_parameters_get_no_decay():
    model = Net()
    groups = build(model)
    assert set(groups) == {n for n, _ in model.named_parameters()}
    for name, (lr, wd) in groups.items():
        assert lr == 0.1
        assert wd == (0.0 if name in NO_DECAY else 1e-4), name
    # the MLP weights of FleS are decayed like any linear weight
    assert groups['fles.fc1_weight'][1] == 1e-4


def test_composes_with_paramwise_cfg():
    model = Net()
    groups = build(
        model,
        dict(
            custom_keys={'arelu': dict(lr_mult=0.1)},
            bias_decay_mult=0.0,
            norm_decay_mult=0.5))
    # custom_keys lr_mult kept, decay still zero
    assert groups['arelu.alpha'] == pytest.approx((0.01, 0.0))
    assert groups['conv.bias'] == (0.1, 0.0)
    assert groups['bn.weight'] == (0.1, 5e-5)
    assert groups['conv.weight'] == (0.1, 1e-4)
    assert groups['act.kappa_param'] == (0.1, 0.0)
    # a non-zero multiplier scales whatever decay the rules gave
    groups = build(model, dict(activation_decay_mult=0.5))
    assert groups['act.kappa_param'] == (0.1, 5e-5)
    assert groups['conv.weight'] == (0.1, 1e-4)


def test_without_base_weight_decay():
    # AdamW decays by 0.01 when no weight_decay is configured: the
    # activation parameters must still get none
    model = Net()
    groups = build(model, optimizer=dict(type='AdamW', lr=1e-3))
    assert groups['act.kappa_param'][1] == 0.0
    assert groups['conv.weight'][1] == 0.01


def test_frozen_and_wrapped_models():
    model = Net()
    model.act.kappa_param.requires_grad_(False)
    wrapper = nn.Module()
    wrapper.module = model  # DDP-like: the constructor unwraps .module
    groups = groups_by_name(
        build_optim_wrapper(
            wrapper,
            dict(
                constructor=CONSTRUCTOR,
                optimizer=dict(type='SGD', lr=0.1, weight_decay=1e-4))),
        model)
    assert 'act.kappa_param' not in groups
    assert groups['act.lambda_param'][1] == 0.0


def test_builds_from_every_scope_and_checks_its_option():
    from mmdet.registry import OPTIM_WRAPPER_CONSTRUCTORS as DET
    from mmpretrain.registry import OPTIM_WRAPPER_CONSTRUCTORS as CLS
    for registry in (DET, CLS):
        assert registry.get(CONSTRUCTOR) is ActivationOptimWrapperConstructor
    optim = dict(optimizer=dict(type='SGD', lr=0.1, weight_decay=1e-4))
    for bad in (-1.0, 'zero', True):
        with pytest.raises(ValueError, match='activation_decay_mult'):
            ActivationOptimWrapperConstructor(
                optim, dict(activation_decay_mult=bad))


# The custom_keys blocks the configs carried before the constructor.
APA_KEYS = ('.kappa_param', '.lambda_param')
FLES_KEYS = ('.fc1_bias', '.fc2_bias', '.ind_gamma', '.ind_beta')


def old_style(optim_wrapper: dict, keys) -> dict:
    cfg = copy.deepcopy(optim_wrapper)
    assert cfg.pop('constructor') == CONSTRUCTOR
    paramwise = dict(cfg.get('paramwise_cfg') or {})
    paramwise['custom_keys'] = dict(
        paramwise.get('custom_keys') or {},
        **{key: dict(decay_mult=0.0)
           for key in keys})
    cfg['paramwise_cfg'] = paramwise
    return cfg


@pytest.mark.parametrize('config, keys', [
    ('configs/imagenet/apase-aglu-r50_8xb32-coslr-100e_in1k.py', APA_KEYS),
    # with bias_decay_mult and norm_decay_mult
    ('configs/lvis/apa_mrcnn_r50.py', APA_KEYS),
    ('projects/fles/configs/poolformer-s12_fles_8xb128_in1k.py', FLES_KEYS),
])
def test_same_param_groups_as_the_old_custom_keys(config, keys):
    cfg = Config.fromfile(str(REPO / config))
    init_default_scope(cfg.default_scope)
    model = MODELS.build(cfg.model)
    optim_wrapper = cfg.optim_wrapper.to_dict()
    new = groups_by_name(build_optim_wrapper(model, optim_wrapper), model)
    old = groups_by_name(
        build_optim_wrapper(model, old_style(optim_wrapper, keys)), model)
    assert new == old
    assert sum(wd == 0 for _, wd in new.values()) > 0
