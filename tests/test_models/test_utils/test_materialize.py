"""materialize_lazy_modules and the MaterializedModel builder."""
import pytest
import torch
import torch.nn as nn
from mmengine.registry import MODELS

import mmact  # noqa: F401
from mmact.models.activations import FleS
from mmact.models.utils import (build_materialized_model,
                                materialize_lazy_modules)


def test_materialize_restores_flags_and_reports_unreached():
    net = nn.Sequential(
        nn.Conv2d(3, 8, 1), nn.BatchNorm2d(8), FleS(reduction=4),
        nn.Conv2d(8, 4, 1))
    net.train()
    net[1].eval()  # e.g. a frozen norm layer
    stats = net[1].running_mean.clone()
    materialize_lazy_modules(net, torch.randn(2, 3, 5, 5))
    assert net[2].channels == 8
    assert net.training and net[2].training and not net[1].training
    assert torch.equal(net[1].running_mean, stats)

    class TwoBranch(nn.Module):

        def __init__(self):
            super().__init__()
            self.used = FleS(reduction=2)
            self.unused = FleS(reduction=2)

        def forward(self, x):
            return self.used(x)

    with pytest.raises(RuntimeError, match=r"did not reach.*\['unused'\]"):
        materialize_lazy_modules(TwoBranch(), torch.randn(1, 4, 3, 3))


def test_builder_is_registered_and_returns_the_model_itself():
    assert MODELS.get('MaterializedModel') is build_materialized_model
    model = MODELS.build(
        dict(
            type='MaterializedModel',
            input_shape=(1, 3, 4, 4),
            model=dict(type='FleS', reduction=1)))
    assert type(model) is FleS and model.channels == 3
    assert set(model.state_dict()) == set(
        FleS(channels=3, reduction=1).state_dict())
