"""The FleS scale MLPs' written-out vector-Jacobian products
(mmact.ops.fles.scales.scales_vjp) against autograd."""
import pytest
import torch

from mmact.ops.fles import (K_HO_MIN, fles_mlp_scales, fles_shared_mlp_scales,
                            scales_vjp)

DT = torch.float64


def _params(layout, c, h, seed):
    g = torch.Generator().manual_seed(seed)
    trunk = (2, ) if layout == 'separate' else ()
    shapes = [(*trunk, h, c), (*trunk, h), (2, c, h), (2, c)]
    return [torch.randn(*s, generator=g, dtype=DT) for s in shapes]


def _autograd_vjp(scale_fn, ind, params, g_ve, g_ho):
    leaves = [t.detach().clone().requires_grad_() for t in (ind, *params)]
    k_ve, k_ho = scale_fn(*leaves)
    grads = torch.autograd.grad((k_ve, k_ho), leaves, (g_ve, g_ho))
    return k_ve.detach(), k_ho.detach(), grads


@pytest.mark.parametrize('layout,scale_fn',
                         [('separate', fles_mlp_scales),
                          ('shared', fles_shared_mlp_scales)])
@pytest.mark.parametrize('grid', [(1, 1), (2, 3)])
def test_written_vjp_equals_autograd(layout, scale_fn, grid):
    """Values and every gradient; hidden units both sides of the ReLU and
    k_ho both sides of its floor (a channel whose head underflows)."""
    n, c, h = 3, 6, 4
    params = _params(layout, c, h, seed=1)
    # k_ho of channel 2 below its floor, where softplus' (3e-7) is not 0
    params[2][1, 2] = 0.0
    params[3][1, 2] = -15.0
    g = torch.Generator().manual_seed(2)
    ind = torch.randn(n, c, *grid, generator=g, dtype=DT)
    g_ve, g_ho = (
        torch.randn(n, c, *grid, generator=g, dtype=DT) for _ in range(2))
    k_ve, k_ho, vjp = scales_vjp(scale_fn, ind, params)
    want_ve, want_ho, want = _autograd_vjp(scale_fn, ind, params, g_ve, g_ho)
    assert (k_ho[:, 2] == K_HO_MIN).all()
    torch.testing.assert_close(k_ve, want_ve)
    torch.testing.assert_close(k_ho, want_ho)
    got = vjp(g_ve, g_ho)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_other_scale_functions_use_autograd():
    """A scale function without a written product is differentiated by
    autograd; the results do not record a graph."""

    def scale_fn(ind, a, b):
        return ind * a, (ind * b).exp()

    ind = torch.rand(2, 3, 1, 1, dtype=DT)
    a, b = torch.rand(3, 1, 1, dtype=DT), torch.rand(3, 1, 1, dtype=DT)
    g_ve, g_ho = torch.rand_like(ind), torch.rand_like(ind)
    k_ve, k_ho, vjp = scales_vjp(scale_fn, ind, [a, b])
    got = vjp(g_ve, g_ho)
    want = _autograd_vjp(scale_fn, ind, [a, b], g_ve, g_ho)[2]
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y)
        assert not x.requires_grad
