"""Cases for the Triton FleS kernels, run by test_triton_kernels.py.

Not collected on its own (see test_apa/triton_cases.py). The reference is
:func:`mmact.ops.fles.fles_reference` (composite autograd) in float64.
"""
import os

import pytest
import torch

from mmact.models.activations.fles import FleS
from mmact.ops.fles import fles_fused, fles_reference, window_geometry

DEVICE = os.environ.get('MMACT_TEST_DEVICE', 'cpu')
TOL = {torch.float32: 2e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}


@pytest.fixture
def triton_calls(triton_launches):
    """``triton_calls()``: the FleS Triton launches so far (the profiler's
    ``mmact::triton_fles*`` ranges, tests/test_ops/conftest.py)."""
    torch.manual_seed(0)
    return lambda: [n for n in triton_launches() if n.startswith('fles')]


def mlp_params(channels, hidden=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(2, hidden, channels), (2, hidden), (2, channels, hidden),
              (2, channels)]
    params = [torch.randn(s, generator=g) * 0.3 for s in shapes]
    params[3] += 0.5
    return [p.to(DEVICE) for p in params]


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    assert torch.isfinite(a).all()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def check(x, window, gate='sigmoid', mode='positive', dtype=torch.float32):
    """Triton FleS on ``x.to(dtype)`` against the float64 composite."""
    geom = window_geometry(x.shape[2], x.shape[3], window)
    params = mlp_params(x.shape[1])
    xq = x.to(dtype)
    go = torch.randn(x.shape, device=DEVICE).to(dtype)

    def run(inp, ps, fn):
        inp = inp.detach().requires_grad_()
        ps = [p.detach().requires_grad_() for p in ps]
        y = fn(inp, geom, ps, gate=gate, mode=mode)
        return (y, ) + torch.autograd.grad(y, [inp] + ps, go.to(y.dtype))

    out = run(xq, params, fles_fused)
    ref = run(xq.double(), [p.double() for p in params], fles_reference)
    assert out[0].dtype == dtype and out[1].dtype == dtype
    tols = [TOL[dtype]] * 2 + [1e-5] * len(params)
    for got, want, tol in zip(out, ref, tols):
        assert got.shape == want.shape
        assert rel(got, want) < tol, (rel(got, want), tol)


def randn(*shape, scale=2.0):
    return torch.randn(*shape).mul(scale).to(DEVICE)


@pytest.mark.parametrize('gate',
                         ['sigmoid', 'tanh_gate', 'erf', 'tanh_softplus'])
def test_gates_on_odd_tiles(triton_calls, gate):
    # 13 x 20 map, 4 x 6 tiles: cut windows at the bottom and right border
    check(randn(2, 3, 13, 20), (4, 6), gate)
    assert sorted(triton_calls()) == ['fles', 'fles_backward']


@pytest.mark.parametrize('dtype',
                         [torch.float32, torch.float16, torch.bfloat16])
def test_mean_indicator_global_window_dtypes(triton_calls, dtype):
    check(randn(2, 3, 7, 9), None, 'erf', 'mean', dtype)
    assert sorted(triton_calls()) == ['fles', 'fles_backward']


def test_coco_window_9x15_half_precision(triton_calls):
    check(randn(1, 2, 19, 40), (9, 15), 'sigmoid', 'positive', torch.bfloat16)
    assert sorted(triton_calls()) == ['fles', 'fles_backward']


def test_wide_map_several_column_blocks(triton_calls):
    # 3-wide windows: 85 per column block, 120 windows on a row
    check(randn(1, 2, 5, 360), (2, 3), 'tanh_softplus')
    assert sorted(triton_calls()) == ['fles', 'fles_backward']


def test_non_contiguous_input(triton_calls):
    x = randn(2, 6, 11, 10)[:, ::2].transpose(2, 3)  # (2, 3, 10, 11)
    assert not x.is_contiguous()
    check(x, (3, 4), 'tanh_gate')
    assert sorted(triton_calls()) == ['fles', 'fles_backward']


def test_extreme_inputs(triton_calls):
    x = torch.tensor([-1e4, -100.0, -1.0, 0.0, 1e-3, 1.0, 100.0, 1e4])
    x = x.repeat(1, 2, 3, 1).to(DEVICE)  # (1, 2, 3, 8)
    for gate in ('sigmoid', 'erf', 'tanh_softplus'):
        check(x, (2, 3), gate)
    assert sorted(triton_calls()) == ['fles'] * 3 + ['fles_backward'] * 3


def test_module_on_triton(triton_calls):
    """The FleS module (9x15 windows) trains through the Triton path."""
    torch.manual_seed(0)
    act = FleS(channels=8, window_size=(9, 15), reduction=4).to(DEVICE)
    x = randn(2, 8, 20, 31).requires_grad_()
    act(x).square().sum().backward()
    assert sorted(triton_calls()) == ['fles', 'fles_backward']
    assert x.grad.shape == x.shape and torch.isfinite(x.grad).all()
    assert all(p.grad is not None for p in act.parameters())


def test_overlapping_windows_keep_the_torch_path(triton_calls):
    geom = window_geometry(12, 12, (6, 6), (3, 3))
    x = randn(1, 2, 12, 12)
    y = fles_fused(x, geom, mlp_params(2))
    ref = fles_reference(x.double(), geom, [p.double() for p in mlp_params(2)])
    assert rel(y, ref) < TOL[torch.float32]
    assert not triton_calls()
