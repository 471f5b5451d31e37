"""Tests of mmact.ops.arelu."""
import pytest
import torch

from mmact.ops import arelu


def test_values_against_formula():
    x = torch.linspace(-4, 4, 81, dtype=torch.float64)
    out = arelu(x, 0.9, 2.0)
    expected = torch.where(x < 0, 0.9 * x, (1 + torch.sigmoid(
        torch.tensor(2.0, dtype=torch.float64))) * x)
    torch.testing.assert_close(out, expected)


def test_alpha_is_clamped():
    x = torch.tensor([-2.0, 3.0])
    torch.testing.assert_close(arelu(x, 5.0, 0.0), torch.tensor([-1.98, 4.5]))
    torch.testing.assert_close(arelu(x, -1.0, 0.0), torch.tensor([-0.02,
                                                                    4.5]))


def test_gradcheck_and_clamp_gradient():
    x = torch.randn(3, 4, dtype=torch.float64)
    x = (x + 0.1 * x.sign()).requires_grad_()  # keep away from the kink
    alpha = torch.tensor([0.5], dtype=torch.float64, requires_grad=True)
    beta = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(arelu, (x, alpha, beta))
    a = torch.tensor([2.0], requires_grad=True)
    arelu(torch.randn(5), a, torch.tensor([1.0])).sum().backward()
    assert a.grad.item() == 0.0  # no gradient through the clamp


def test_half_and_errors():
    x = torch.randn(8, dtype=torch.bfloat16)
    assert arelu(x, torch.tensor([0.9]), torch.tensor([2.0])).dtype == x.dtype
    with pytest.raises(TypeError, match='floating-point'):
        arelu(torch.arange(3))
    with pytest.raises(ValueError, match='alpha must hold a single value'):
        arelu(torch.randn(3), torch.ones(2))
