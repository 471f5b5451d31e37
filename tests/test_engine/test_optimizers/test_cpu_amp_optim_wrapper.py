import pytest
import torch
import torch.nn as nn
from mmengine.registry import OPTIM_WRAPPERS

import mmact  # noqa: F401
from mmact.models.activations import AGLU


def test_forward_runs_in_bfloat16_and_updates_float32_weights():
    model = nn.Sequential(nn.Linear(8, 8), AGLU(), nn.Linear(8, 2))
    wrapper = OPTIM_WRAPPERS.build(
        dict(
            type='CPUAmpOptimWrapper',
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1)))
    before = [p.detach().clone() for p in model.parameters()]
    with wrapper.optim_context(model):
        hidden = model[0](torch.randn(4, 8))
        loss = model[2](model[1](hidden)).float().pow(2).mean()
    assert hidden.dtype == torch.bfloat16
    wrapper.update_params(loss)
    assert torch.isfinite(loss)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(not torch.equal(a, b)
               for a, b in zip(before, model.parameters()))


def test_only_bfloat16():
    model = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="dtype must be 'bfloat16'"):
        OPTIM_WRAPPERS.build(
            dict(
                type='CPUAmpOptimWrapper',
                dtype='float16',
                optimizer=torch.optim.SGD(model.parameters(), lr=0.1)))
