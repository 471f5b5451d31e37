"""Tests of mmact.utils.activation_paramwise_cfg with a real optimizer."""
import pytest
import torch.nn as nn
from mmengine.optim import build_optim_wrapper

import mmact  # noqa: F401
from mmact.models.activations import (AGLU, APA, IGLU, AReLU, FleS,
                                      IGLUApprox)
from mmact.utils import activation_paramwise_cfg


class Net(nn.Module):

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.act = AGLU(num_parameters=8)
        self.gate = APA()
        self.arelu = AReLU()
        self.iglu = IGLU(learnable_sigma=True)
        self.iglu_fixed = IGLUApprox()
        self.fles = FleS(channels=8, reduction=4)
        # look-alike names that must keep their weight decay
        self.head = nn.Linear(8, 2)
        self.head.alpha = nn.Parameter(self.head.weight.new_ones(1))
        self.sigma = nn.Parameter(self.head.weight.new_ones(2))


def _decay_of(optim_wrapper, model):
    decay = {}
    names = {id(p): n for n, p in model.named_parameters()}
    for group in optim_wrapper.optimizer.param_groups:
        for p in group['params']:
            decay[names[id(p)]] = group['weight_decay']
    return decay


@pytest.mark.parametrize('with_model', [True, False])
def test_build_optim_wrapper(with_model):
    model = Net()
    cfg = activation_paramwise_cfg(model if with_model else None)
    wrapper = build_optim_wrapper(
        model,
        dict(
            optimizer=dict(type='SGD', lr=0.1, weight_decay=1e-4),
            paramwise_cfg=cfg))
    decay = _decay_of(wrapper, model)
    assert len(decay) == len(list(model.parameters()))
    no_decay = {
        'act.kappa_param', 'act.lambda_param', 'gate.kappa_param',
        'gate.lambda_param'
    }
    if with_model:
        no_decay |= {
            'arelu.alpha', 'arelu.beta', 'iglu.sigma', 'fles.fc1_bias',
            'fles.fc2_bias'
        }
    for name, wd in decay.items():
        assert wd == (0.0 if name in no_decay else 1e-4), name
    assert decay['conv.weight'] == 1e-4 and decay['head.alpha'] == 1e-4
    assert decay['sigma'] == 1e-4


def test_keys_and_extra_fields():
    cfg = activation_paramwise_cfg(
        decay_mult=0.5,
        norm_decay_mult=0.0,
        custom_keys={'head': dict(lr_mult=0.1)})
    assert cfg['norm_decay_mult'] == 0.0
    assert cfg['custom_keys']['.kappa_param'] == dict(decay_mult=0.5)
    assert cfg['custom_keys']['head'] == dict(lr_mult=0.1)
    assert not any(k in 'conv.weight' or k in 'bn.weight'
                   for k in cfg['custom_keys'] if k != 'head')
    with pytest.raises(ValueError, match='decay_mult must be >= 0'):
        activation_paramwise_cfg(decay_mult=-1)
    with pytest.raises(TypeError, match='model must be an nn.Module'):
        activation_paramwise_cfg(model='backbone')
