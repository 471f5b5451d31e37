"""The learnable-activation protocol: an activation defined only here is
handled by the optimizer constructor, ActivationStatsHook, the probes and
activation_paramwise_cfg without any change elsewhere."""
from types import SimpleNamespace
from typing import Dict

import pytest
import torch
import torch.nn as nn
from mmengine.model import BaseModule
from mmengine.optim import build_optim_wrapper
from mmengine.registry import MODELS

import mmact  # noqa: F401
from mmact.analysis.probes import (activation_curve, activation_parameters,
                                   expected_output, find_modules)
from mmact.engine.hooks import ActivationStatsHook
from mmact.models.activations import AGLU
from mmact.models.activations.base import (LearnableActivation,
                                           has_forward_stats,
                                           no_decay_parameters)
from mmact.utils import activation_paramwise_cfg


@MODELS.register_module(force=True)
class ToyLeakyActivation(LearnableActivation, BaseModule):
    """``max(x, slope * x)`` with a learnable slope: the whole declaration
    of a new activation is the class body."""

    no_decay_params = ('slope', )

    def __init__(self, slope: float = 0.25, inplace: bool = False) -> None:
        super().__init__()
        self.slope = nn.Parameter(torch.tensor([slope]))

    def forward(self, x):
        return torch.where(x >= 0, x, self.slope * x)

    def activation_stats(self) -> Dict[str, torch.Tensor]:
        return {'slope': self.slope.detach()}

    def forward_stats(self, x) -> Dict[str, float]:
        return {'negative_share': float((x < 0).float().mean())}


class Net(nn.Module):

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.toy = MODELS.build(dict(type='ToyLeakyActivation', slope=0.5))
        self.aglu = AGLU()
        # a look-alike name outside an activation keeps its decay
        self.slope = nn.Parameter(torch.ones(1))

    def forward(self, x):
        return self.aglu(self.toy(self.conv(x)))


def test_protocol_defaults():
    assert not has_forward_stats(AGLU())
    assert not has_forward_stats(nn.ReLU())
    assert has_forward_stats(ToyLeakyActivation())
    assert LearnableActivation().activation_stats() == {}
    assert [n for n, _ in no_decay_parameters(ToyLeakyActivation())] == [
        'slope'
    ]


def test_optimizer_constructor_and_helper_read_the_declaration():
    model = Net()
    assert [n for n, _ in no_decay_parameters(model)] == [
        'toy.slope', 'aglu.kappa_param', 'aglu.lambda_param'
    ]
    wrapper = build_optim_wrapper(
        model,
        dict(
            constructor='ActivationOptimWrapperConstructor',
            optimizer=dict(type='SGD', lr=0.1, weight_decay=1e-4)))
    decay = {
        id(p): g['weight_decay']
        for g in wrapper.optimizer.param_groups for p in g['params']
    }
    assert decay[id(model.toy.slope)] == 0.0
    assert decay[id(model.slope)] == 1e-4
    assert decay[id(model.conv.weight)] == 1e-4
    keys = activation_paramwise_cfg(model)['custom_keys']
    assert keys['toy.slope'] == dict(decay_mult=0.0)


def test_probes_read_the_declaration():
    model = Net()
    assert [n for n, _ in find_modules(model)] == ['toy', 'aglu']
    assert activation_parameters(model.toy)['slope'].tolist() == [0.5]
    z = torch.linspace(-2, 2, 5)
    torch.testing.assert_close(
        activation_curve(model.toy, z),
        torch.tensor([[-1.0, -0.5, 0.0, 1.0, 2.0]]))
    # E[max(X, s X)] = (1 - s) / sqrt(2 pi) for X ~ N(0, 1)
    assert expected_output(model.toy)[0] == pytest.approx(
        0.5 / (2 * torch.pi)**0.5, abs=1e-5)


class _Recorder:

    def __init__(self):
        self.scalars = {}

    def add_scalars(self, scalars, step):
        self.scalars.update(scalars)

    def info(self, message):
        pass


def test_stats_hook_reads_the_declaration():
    model = Net()
    record = _Recorder()
    runner = SimpleNamespace(
        model=model, iter=0, visualizer=record, logger=record)
    hook = ActivationStatsHook(interval=1, per_layer=True)
    hook.before_train_iter(runner, 0)
    x = torch.randn(2, 3, 4, 4)
    model(x)
    hook.after_train_iter(runner, 0)
    stats = record.scalars
    assert stats['act/ToyLeakyActivation.slope_mean'] == 0.5
    assert stats['act/toy.slope'] == 0.5
    expected = float((model.conv(x) < 0).float().mean())
    assert stats['act/ToyLeakyActivation.negative_share'] == pytest.approx(
        expected)
    assert stats['act/toy.negative_share'] == pytest.approx(expected)
    assert 'act/AGLU.kappa_mean' in stats
    assert not model.toy._forward_pre_hooks
