"""Tests of mmact.ops.acon_c (the activation of Meta-ACON)."""
import pytest
import torch

from mmact.ops import acon_c


def _formula(x, p1, p2, beta):
    shape = (1, -1) + (1, ) * (x.dim() - 2)
    d = (p1 - p2).view(shape) * x
    b = beta.view(beta.shape + (1, ) * (x.dim() - beta.dim()))
    if beta.dim() == 1:
        b = beta.view(shape)
    return d * torch.sigmoid(b * d) + p2.view(shape) * x


def _inputs(beta_shape, spatial=(3, 4)):
    torch.manual_seed(0)
    x = torch.randn(2, 5, *spatial, dtype=torch.float64, requires_grad=True)
    p1 = torch.randn(5, dtype=torch.float64, requires_grad=True)
    p2 = torch.randn(5, dtype=torch.float64, requires_grad=True)
    beta = torch.rand(*beta_shape, dtype=torch.float64, requires_grad=True)
    return x, p1, p2, beta


@pytest.mark.parametrize('beta_shape', [(5, ), (2, 5)])
def test_acon_c_formula_and_gradcheck(beta_shape):
    args = _inputs(beta_shape)
    torch.testing.assert_close(acon_c(*args), _formula(*args))
    assert torch.autograd.gradcheck(acon_c, args)


def test_acon_c_special_cases():
    x, p1, _, _ = _inputs((5, ))
    x = x.detach()
    zero, one = torch.zeros(5, dtype=x.dtype), torch.ones(5, dtype=x.dtype)
    # p1 = 1, p2 = 0: Swish / SiLU with beta; beta = 0: the mean slope
    torch.testing.assert_close(
        acon_c(x, one, zero, one), torch.nn.functional.silu(x))
    torch.testing.assert_close(acon_c(x, one, zero, zero), 0.5 * x)
    # 1-D tokens (N, C) and 5-D volumes are channels-first too
    for shape in ((2, 5), (2, 5, 2, 2, 2)):
        v = torch.randn(*shape, dtype=torch.float64)
        torch.testing.assert_close(
            acon_c(v, p1.detach(), zero, one),
            _formula(v, p1.detach(), zero, one))


def test_acon_c_half_and_errors():
    x = torch.randn(2, 5, 8, 8).to(torch.bfloat16).requires_grad_()
    p1, p2 = torch.randn(5, requires_grad=True), torch.randn(5)
    beta = torch.rand(2, 5)
    y = acon_c(x, p1, p2, beta)
    y.sum().backward()
    assert y.dtype == x.grad.dtype == torch.bfloat16
    assert torch.isfinite(p1.grad).all()
    with pytest.raises(ValueError, match='p1 must have shape'):
        acon_c(x, torch.ones(4), p2, beta)
    with pytest.raises(ValueError, match='beta must have shape'):
        acon_c(x, p1, p2, torch.ones(3, 5))
    with pytest.raises(ValueError, match='channels-first'):
        acon_c(torch.ones(5), torch.ones(5), p2, torch.ones(5))
