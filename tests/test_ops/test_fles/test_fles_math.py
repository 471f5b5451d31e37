"""The element math of FleS that the C and CUDA kernels share
(``csrc/fles_math.h``), exact on the CPU: compiled into the C kernels and
reached through the pass operators (``mmact::fles_apply``,
``fles_gate_backward``, ``fles_stats``, ``fles_indicator_backward``), held
value by value to float64 autograd of the gates of
``mmact/ops/fles/gates.py`` over every branch of the math (both signs of
``u``, erf's two halves, the tails where ``exp`` is clamped, the
tanh(softplus) cap at 20, windows without a non-negative pixel)."""
import os.path as osp

import pytest
import torch

from mmact.ops.cpu_build import CSRC, extension, read_source
from mmact.ops.fles.gates import FLES_GATES, GATES

pytestmark = pytest.mark.skipif(
    extension() is None,
    reason='no C++ compiler or ninja, or the C kernels are switched off: '
    'nothing compiles the header')


def _inputs():
    """(1, 601) inputs over the range where the gates move, and their
    tails."""
    z = torch.cat([
        torch.linspace(-12, 12, 561),
        torch.tensor([-100.0, -60.0, -30.0, -19.0, -1e-6, 0.0, 1e-6, 19.0,
                      21.0, 30.0, 60.0, 100.0]),
        torch.linspace(-0.05, 0.05, 28)
    ])
    return z.reshape(1, 1, -1)


@pytest.mark.parametrize('gate', FLES_GATES)
def test_gate_math_against_float64(gate):
    """Output, input gradient and the window sums of the scales' gradients
    of one window (a global one) against float64 autograd of
    ``k_ve * rho(k_ho x) * x``."""
    x = _inputs()
    kv = torch.tensor([[[0.8]]])
    ko = torch.tensor([[[1.3]]])
    go = torch.randn(x.shape, generator=torch.Generator().manual_seed(0))
    y = torch.ops.mmact.fles_apply(x, kv, ko, 1, x.shape[-1], gate)
    gx, g_ve, g_ho = torch.ops.mmact.fles_gate_backward(
        x, go, kv, ko, 1, x.shape[-1], gate)
    # the scales per pixel: each pixel's term of the window sums
    x64, kv64, ko64 = (t.double().expand_as(x).clone().requires_grad_()
                       for t in (x, kv, ko))
    y64 = kv64 * GATES[gate].fn(ko64 * x64) * x64
    want = torch.autograd.grad(y64, (x64, kv64, ko64), go.double())
    # per value: float32 rounding plus the approximations' error (exp 2e-7
    # relative, erf 1.5e-7 absolute)
    torch.testing.assert_close(y.double(), y64.detach(), rtol=3e-6,
                               atol=1e-6)
    torch.testing.assert_close(gx.double(), want[0], rtol=3e-6, atol=1e-6)
    # float32 terms summed in double, relative to the sum of the terms'
    # sizes (the sums cancel); rho' = r (1 - r) of the sigmoid loses digits
    # where r rounds near 1, which weighs x^2 (2e-6 of the sizes)
    for got, terms in ((g_ve, want[1]), (g_ho, want[2])):
        err = (got.double().sum() - terms.sum()).abs()
        assert err <= 1e-5 * terms.abs().sum(), (err, terms.abs().sum())


@pytest.mark.parametrize('mode', ['positive', 'mean'])
def test_indicator_math_against_float64(mode):
    """Indicators and their backward on tiles cut at the border, one tile
    without a non-negative pixel (divisor floored at 1), against float64
    autograd of the indicator's definition."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 7, 11, generator=g) * 3
    x[0, :3, :4] = -torch.rand(3, 4, generator=g) - 0.5
    kh, kw = 3, 4
    ind, div = torch.ops.mmact.fles_stats(x, kh, kw, mode)
    x64 = x.double().requires_grad_()
    term = x64.clamp_min(0) if mode == 'positive' else x64
    count = (x64 >= 0).double() if mode == 'positive' else torch.ones_like(
        x64)
    sums = torch.nn.functional.avg_pool2d(
        term[:, None], (kh, kw), ceil_mode=True, divisor_override=1)[:, 0]
    counts = torch.nn.functional.avg_pool2d(
        count[:, None], (kh, kw), ceil_mode=True, divisor_override=1)[:, 0]
    want = sums / counts.clamp_min(1)
    if mode == 'positive':  # a window without a non-negative pixel
        assert ind[0, 0, 0] == 0 and div[0, 0, 0] == 1
    torch.testing.assert_close(div.double(), counts.clamp_min(1).detach())
    torch.testing.assert_close(ind.double(), want.detach(), rtol=1e-6,
                               atol=1e-7)
    g_ind = torch.randn(ind.shape, generator=g)
    grad_x = torch.zeros_like(x)
    torch.ops.mmact.fles_indicator_backward(grad_x, x, g_ind, div, kh, kw,
                                            mode)
    want_gx, = torch.autograd.grad(want, x64, g_ind.double())
    torch.testing.assert_close(grad_x.double(), want_gx, rtol=1e-6,
                               atol=1e-7)


def test_one_header_for_every_kernel():
    """The C kernels, the MLP loops and the CUDA kernels compile the same
    element math: each translation unit inlines fles_math.h once, and no
    kernel file spells the math's primitives itself."""
    for unit in ('fles_op.cpp', 'fles_cuda.cu'):
        assert read_source(unit).count('#define MMACT_FLES_MATH_H') == 1, unit
    for kernels in ('fles.c', 'fles_cuda.cu', 'fles_mlp.h'):
        with open(osp.join(CSRC, kernels)) as f:
            text = f.read()
        for primitive in ('exp_c(', 'exp2f(', 'expf(', '0.3275911',
                          '1.44269504'):
            assert primitive not in text, (kernels, primitive)
