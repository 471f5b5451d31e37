"""Tests of the IGLU / IGLUApprox modules."""
import math

import pytest
import torch
from mmengine.registry import MODELS, DefaultScope

import mmact  # noqa: F401
from mmact.models.activations import IGLU, IGLUApprox


@pytest.mark.parametrize('scope', ['mmdet', 'mmpretrain'])
@pytest.mark.parametrize('name', ['IGLU', 'IGLUApprox'])
def test_build_under_scopes(scope, name):
    pytest.importorskip(scope)
    registry = __import__(f'{scope}.registry', fromlist=['MODELS']).MODELS
    with DefaultScope.overwrite_default_scope(scope):
        m = registry.build(dict(type=name, sigma=2.0))
    assert type(m).__name__ == name and m.sigma.item() == 2.0
    assert not any(True for _ in m.parameters())
    assert m.state_dict() == {}


def test_values_and_large_sigma_is_relu():
    x = torch.linspace(-5, 5, 101, dtype=torch.float64)
    m = IGLU(sigma=1.0).double()
    torch.testing.assert_close(m(x), x * (0.5 + torch.atan(x) / math.pi))
    torch.testing.assert_close(
        IGLU(sigma=1e7).double()(x), torch.relu(x), atol=1e-6, rtol=0)
    a = IGLUApprox(sigma=1.0).double()
    torch.testing.assert_close(
        a(x), 0.5 * x * (1 + 2 * torch.relu(x)) / (1 + x.abs()))


@pytest.mark.parametrize('cls', [IGLU, IGLUApprox])
def test_learnable_sigma(cls):
    m = cls(sigma=0.5, learnable_sigma=True)
    assert [n for n, _ in m.named_parameters()] == ['sigma']
    m(torch.randn(4, 3) + 0.1).sum().backward()
    assert m.sigma.grad is not None and m.sigma.grad.abs() > 0
    assert 'learnable_sigma=True' in repr(m)
    from mmcv.cnn import ConvModule
    conv = ConvModule(3, 4, 1, act_cfg=dict(type=cls.__name__))
    assert conv(torch.randn(1, 3, 4, 4)).shape == (1, 4, 4, 4)


@pytest.mark.parametrize('cls', [IGLU, IGLUApprox])
def test_bad_arguments(cls):
    with pytest.raises(ValueError, match='sigma must be > 0'):
        cls(sigma=0.0)
    with pytest.raises(TypeError, match='sigma must be a float'):
        cls(sigma=None)
    with pytest.raises(TypeError, match='unexpected keyword'):
        MODELS.build(dict(type=cls.__name__, sigmaa=1.0))
