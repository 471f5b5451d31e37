"""The element math of APA / AGLU that the C and CUDA kernels share
(``csrc/apa_math.h``), exact on the CPU: compiled into the C kernels and
reached through the CPU operators (``mmact::apa`` / ``aglu`` and
``mmact::apa_backward`` / ``aglu_backward``, the C++ node's backward as an
operator), held value by value to the float64 stable form of
``mmact/ops/apa/formula.py`` over every branch of the math (both signs of
``a``, ``e`` near 0 and 1, lambda at, below and above its clamp, tiny and
large lambda, negative kappa)."""
import os.path as osp

import pytest
import torch

from mmact.ops.apa.formula import composite
from mmact.ops.cpu_build import CSRC, extension, read_source

pytestmark = pytest.mark.skipif(
    extension() is None,
    reason='no C++ compiler or ninja, or the C kernels are switched off: '
    'nothing compiles the header')

LAMBDA_MIN = 1e-4
# (kappa, lambda) per channel: the branches of the math
PARAMS = [(1.0, 1.0), (1.702, 1.0), (0.5, LAMBDA_MIN), (2.0, LAMBDA_MIN / 3),
          (1.3, 1e-3), (0.8, 40.0), (-1.5, 0.7), (8.0, 0.05)]


def _grid():
    """(C, 513) inputs over the range where eta moves, and its tails."""
    z = torch.cat([torch.linspace(-12, 12, 481),
                   torch.tensor([-90.0, -40.0, -1e-6, 0.0, 1e-6, 40.0, 90.0]),
                   torch.linspace(-0.05, 0.05, 25)])
    return z.repeat(len(PARAMS), 1)


def _reference(name, x, kappa, lam, grad_out):
    x, kappa, lam = (t.double().requires_grad_() for t in (x, kappa, lam))
    y = composite(x, kappa, lam, name, LAMBDA_MIN, 0)
    return (y, *torch.autograd.grad(y, (x, kappa, lam), grad_out.double()))


@pytest.mark.parametrize('name', ['apa', 'aglu'])
def test_header_math_against_float64(name):
    x = _grid()
    kappa = torch.tensor([k for k, _ in PARAMS])
    lam = torch.tensor([l for _, l in PARAMS])
    go = torch.randn(x.shape, generator=torch.Generator().manual_seed(0))
    y = getattr(torch.ops.mmact, name)(x, kappa, lam, LAMBDA_MIN, 0)
    gx, gk, gl = getattr(torch.ops.mmact, f'{name}_backward')(
        go, x, kappa, lam, LAMBDA_MIN, 0, True, True)
    want = _reference(name, x, kappa, lam, go)
    # per value: float32 rounding of a result of size |want|, plus the
    # approximations' 2e-7 relative error
    for got, ref, what in ((y, want[0], 'y'), (gx, want[1], 'grad_x')):
        torch.testing.assert_close(
            got.double(), ref, rtol=3e-6, atol=1e-6, msg=what)
    # parameter gradients: float32 terms summed in double per channel;
    # lambda's terms are a difference of two near values (softplus(a) - g)
    # scaled by 1/l^2, which takes float32's rounding to 2e-4 at l = 1e-3
    torch.testing.assert_close(gk.double(), want[2], rtol=2e-5, atol=1e-5)
    torch.testing.assert_close(gl.double(), want[3], rtol=3e-4, atol=1e-5)
    # lambda at or below its clamp passes no gradient
    assert gl[2] == 0 and gl[3] == 0 and gl[4] != 0


def test_one_header_for_every_kernel():
    """The C kernels and the CUDA kernels compile the same element math:
    each translation unit inlines apa_math.h once, and neither kernel file
    spells the math's primitives itself."""
    for unit in ('apa_op.cpp', 'apa_cuda.cu'):
        assert read_source(unit).count('#define MMACT_APA_MATH_H') == 1, unit
    for kernels in ('apa.c', 'apa_cuda.cu'):
        with open(osp.join(CSRC, kernels)) as f:
            text = f.read()
        for primitive in ('exp2_nonpos(', 'log2_1p_from_s(', 'exp2f(',
                          'log2f('):
            assert primitive not in text, (kernels, primitive)
