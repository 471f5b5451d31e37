"""Tests of mmact.ops.smu."""
import math

import pytest
import torch
import torch.nn.functional as F

from mmact.ops import smu


def _formula(x, mu, alpha):
    return 0.5 * ((1 + alpha) * x +
                  (1 - alpha) * x * torch.erf(mu * (1 - alpha) * x))


@pytest.mark.parametrize('mu,alpha', [(1.0, 0.25), (2.5, 0.0), (0.3, 0.6)])
def test_smu_formula(mu, alpha):
    x = torch.linspace(-6, 6, 121, dtype=torch.float64)
    torch.testing.assert_close(
        smu(x, mu, alpha), _formula(x, mu, alpha), rtol=1e-12, atol=1e-12)


def test_smu_limits():
    x = torch.linspace(-6, 6, 121, dtype=torch.float64)
    # large mu: Leaky ReLU with slope alpha (the authors' start, mu = 1e6)
    torch.testing.assert_close(
        smu(x, 1e6, 0.25), F.leaky_relu(x, 0.25), atol=1e-6, rtol=0)
    # mu -> 0: the linear (1 + alpha) x / 2
    torch.testing.assert_close(
        smu(x, 1e-9, 0.25), 0.625 * x, atol=1e-7, rtol=0)
    # alpha = 0, mu = 1 / sqrt(2): GELU
    torch.testing.assert_close(
        smu(x, 1 / math.sqrt(2), 0.0), F.gelu(x), rtol=1e-12, atol=1e-12)


def test_smu_gradcheck_with_learnable_mu():
    x = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    mu = torch.tensor([0.8], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, m: smu(a, m, 0.25), (x, mu))
    # the hand-written gradients equal autograd of the formula
    gx, gm = torch.autograd.grad(smu(x, mu, 0.3).pow(2).sum(), (x, mu))
    wx, wm = torch.autograd.grad(_formula(x, mu, 0.3).pow(2).sum(), (x, mu))
    torch.testing.assert_close(gx, wx)
    torch.testing.assert_close(gm, wm)


def test_smu_dtypes_saved_tensors_and_errors():
    x = (torch.randn(4, 64) * 50).to(torch.bfloat16).requires_grad_()
    mu = torch.tensor([2.0], requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(
            lambda t: saved.append(t) or t, lambda t: t):
        y = smu(x, mu)
    big = [t for t in saved if t.numel() > 1]
    assert len(big) == 1 and big[0].data_ptr() == x.data_ptr()
    y.sum().backward()
    assert y.dtype == x.grad.dtype == torch.bfloat16
    assert torch.isfinite(x.grad).all() and torch.isfinite(mu.grad).all()
    with pytest.raises(TypeError, match='floating-point'):
        smu(torch.arange(4))
    with pytest.raises(ValueError, match='mu must hold a single value'):
        smu(torch.randn(3), torch.ones(2))
