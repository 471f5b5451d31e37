"""FleS's C++ operator on CUDA maps (``MMACT_CUDA_KERNELS=1``): the pass
operators' CUDA kernels (``csrc/fles_cuda.cu``) around the MLP's ATen
calls, against the float64 composite and the Triton row for every gate of
``mmact/ops/fles/gates.py``, both kernel indicators, tiled and global
windows, NCHW and channels-last maps, float32 / float16 / bfloat16;
determinism, streams and the calls the kernels decline. They need a CUDA
GPU, and a toolkit of torch's CUDA major version to build the kernels
(``python -m mmact.ops.cuda_build`` first builds them outside the
test)."""
import warnings

import pytest
import torch

from mmact.ops import backends
from mmact.ops.fles import (FLES_GATES, K_HO_MIN, fles_fused,
                            fles_mlp_scales, fles_reference,
                            fles_shared_mlp_scales, window_geometry)
from mmact.ops.fles import cpu
from mmact.ops.fles.dispatch import implementation

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason='needs a CUDA GPU (the kernels are compiled without one by '
    'tests/test_ops/test_cuda_build.py)')

# relative L2 error against float64: the output rounding of the dtype
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
DTYPES = list(TOL)
# (H, W, window): tiles cut at the border, one global window, a window
# larger than the map (clamped to it)
WINDOWS = [(13, 17, (5, 4)), (9, 15, (9, 15)), (6, 7, (9, 15))]
LAYOUTS = {'shared': fles_shared_mlp_scales, 'separate': fles_mlp_scales}


@pytest.fixture(autouse=True)
def cuda_kernels():
    """Every case runs with the CUDA kernels selected, which must load."""
    with backends.using(cuda_kernels=True):
        assert cpu.cuda_routed(), 'the CUDA kernels did not load: see the log'
        yield


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    assert torch.isfinite(a).all()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def case(h, w, layout='shared', n=2, c=12, hidden=3, seed=0):
    """A map, the MLP's parameters (float32, on the GPU) and an output
    gradient."""
    g = torch.Generator().manual_seed(seed)
    trunk = (hidden, ) if layout == 'shared' else (2, hidden)
    x = torch.randn(n, c, h, w, generator=g) * 2
    params = [
        torch.randn(*trunk, c, generator=g) * 0.5,
        torch.randn(*trunk, generator=g) * 0.1,
        torch.randn(2, c, hidden, generator=g) * 0.5,
        torch.randn(2, c, generator=g) * 0.1 + 0.6
    ]
    go = torch.randn(n, c, h, w, generator=g)
    return x.cuda(), [p.cuda() for p in params], go.cuda()


def run(x, params, go, geom, gate, mode, layout, **settings):
    """Output and (x, *params) gradients of fles_fused under
    ``settings``."""
    x = x.detach().requires_grad_()
    params = [p.detach().requires_grad_() for p in params]
    with backends.using(**settings):
        y = fles_fused(x, geom, params, gate=gate, mode=mode,
                       scale_fn=LAYOUTS[layout])
        grads = torch.autograd.grad(y, [x, *params], go.to(y.dtype))
    return (y, *grads)


def reference(x, params, go, geom, gate, mode, layout):
    """The float64 composite (on the GPU)."""
    x64 = x.detach().double().requires_grad_()
    p64 = [p.detach().double().requires_grad_() for p in params]
    y = fles_reference(x64, geom, p64, gate, mode, scale_fn=LAYOUTS[layout])
    return (y, *torch.autograd.grad(y, [x64, *p64], go.double()))


@pytest.mark.parametrize('gate', FLES_GATES)
@pytest.mark.parametrize('mode', ['positive', 'mean'])
@pytest.mark.parametrize('layout', list(LAYOUTS))
@pytest.mark.parametrize('dtype', DTYPES)
def test_rows_agree(gate, mode, layout, dtype, mmact_ops):
    """The CUDA row against the float64 composite and the Triton row:
    output and the gradients of the map and of the four MLP parameters."""
    for h, w, window in WINDOWS:
        geom = window_geometry(h, w, window)
        x, params, go = case(h, w, layout)
        x = x.to(dtype)
        plan = implementation(x, geom, gate, mode, LAYOUTS[layout], params)
        assert plan.name == 'operator', (h, w, window)
        with mmact_ops() as ran:
            got = run(x, params, go, geom, gate, mode, layout)
        assert 'mmact::fles' in ran and 'mmact::fles_stats' in ran
        assert got[0].dtype == got[1].dtype == dtype
        want = reference(x, params, go, geom, gate, mode, layout)
        tols = (TOL[dtype], TOL[dtype]) + (max(TOL[dtype], 1e-4), ) * 4
        for a, b, tol in zip(got, want, tols):
            assert a.shape == b.shape and rel(a, b) < tol, (h, w, rel(a, b))
        triton = run(x, params, go, geom, gate, mode, layout,
                     cuda_kernels=False)
        for a, b, tol in zip(got, triton, tols):
            assert rel(a, b) < 2 * tol, (h, w, 'triton')


@pytest.mark.parametrize('gate', FLES_GATES)
@pytest.mark.parametrize('dtype', DTYPES)
def test_channels_last(gate, dtype):
    """A channels-last map: the operator reads it as it is, returns its
    layout and the NCHW call's values (the same sums in another order)."""
    geom = window_geometry(13, 17, (5, 4))
    x, params, go = case(13, 17, seed=3)
    x = x.to(dtype)
    xl = x.contiguous(memory_format=torch.channels_last)
    got, want = [], []
    for inp, out in ((xl, got), (x, want)):
        inp = inp.detach().requires_grad_()
        leaves = [p.detach().requires_grad_() for p in params]
        y = torch.ops.mmact.fles(inp, *leaves, *geom.window, gate,
                                 'positive', K_HO_MIN)
        out += [y, *torch.autograd.grad(y, [inp, *leaves], go.to(dtype))]
    assert got[0].is_contiguous(memory_format=torch.channels_last)
    assert got[1].is_contiguous(memory_format=torch.channels_last)
    for a, b in zip(got, want):
        assert rel(a, b) < TOL[dtype]
    # the entry takes it too, as the table does
    entry = cpu.cuda_entry()
    y = entry(xl, *params, *geom.window, gate, 'positive', K_HO_MIN)
    assert y is not None and rel(y, want[0]) < TOL[dtype]


def test_float64_gradcheck_on_cuda():
    """float64 is not a kernel dtype: the torch row (one warning saying
    so), checked by gradcheck on the GPU; the float32 kernels' gradients are
    held to it above."""
    geom = window_geometry(5, 6, (2, 3))
    x, params, _ = case(5, 6, n=1, c=4, hidden=2)
    x = x.double().requires_grad_()
    params = [p.double().requires_grad_() for p in params]
    with pytest.warns(UserWarning, match='do not take a torch.float64 map'):
        assert implementation(x, geom, 'erf', 'positive',
                              fles_shared_mlp_scales, params).name == 'torch'
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        assert torch.autograd.gradcheck(
            lambda x, *p: fles_fused(x, geom, p, gate='erf',
                                     scale_fn=fles_shared_mlp_scales),
            (x, *params))


def test_large_mlp_and_eval():
    """Any MLP size (ATen calls), and no node without a gradient."""
    geom = window_geometry(32, 32, (4, 4))
    x, params, go = case(32, 32, n=4, c=64, hidden=16, seed=5)
    got = run(x, params, go, geom, 'sigmoid', 'positive', 'shared')
    want = reference(x, params, go, geom, 'sigmoid', 'positive', 'shared')
    for a, b in zip(got, want):
        assert rel(a, b) < 1e-4
    with torch.no_grad():
        y = fles_fused(x.requires_grad_(), geom, params,
                       scale_fn=fles_shared_mlp_scales)
    assert y.grad_fn is None and rel(y, want[0]) < 1e-5


def test_backward_is_deterministic():
    """Two backward passes give the same bits (no atomics)."""
    geom = window_geometry(64, 64, (9, 15))
    x, params, go = case(64, 64, n=4, c=32, hidden=4, seed=6)
    first = run(x, params, go, geom, 'sigmoid', 'positive', 'shared')
    second = run(x, params, go, geom, 'sigmoid', 'positive', 'shared')
    for a, b in zip(first, second):
        assert torch.equal(a, b)


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
@pytest.mark.parametrize('channels_last', [False, True])
def test_half_grad_x_is_rounded_once(dtype, channels_last):
    """A half map's grad_x is the input pass's float32 sum of both terms
    rounded once: the float32 map's pass on the same values, rounded; the
    node returns it."""
    geom = window_geometry(13, 17, (5, 4))
    x, params, go = case(13, 17, seed=8)
    x, go = x.to(dtype), go.to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    ind, div = torch.ops.mmact.fles_stats(x, *geom.window, 'positive')
    k_ve, k_ho = torch.rand_like(ind) + 0.5, torch.rand_like(ind) + 0.5
    g_ind = torch.randn_like(ind)
    args = (k_ve, k_ho, g_ind, div, *geom.window, 'erf', 'positive')
    half = torch.ops.mmact.fles_input_backward(x, go, *args)
    single = torch.ops.mmact.fles_input_backward(x.float(), go.float(), *args)
    assert half.dtype == dtype and half.stride() == x.stride()
    assert torch.equal(half, single.to(dtype))
    xr = x.detach().requires_grad_()
    y = torch.ops.mmact.fles(xr, *params, *geom.window, 'erf', 'positive',
                             K_HO_MIN)
    gx, = torch.autograd.grad(y, xr, go)
    want = reference(x.float(), params, go.float(), geom, 'erf', 'positive',
                     'shared')[1]
    assert rel(gx, want) < TOL[dtype]


def test_global_window_sums_in_double():
    """A 200x304 global window (1,900 values per lane in NCHW, 7,600
    channels-last): the window sums in double, the float32 map's indicator
    and scale gradients within a few ulps of float64's, in both layouts."""
    geom = window_geometry(200, 304, (200, 304))
    x, _, go = case(200, 304, n=1, c=8, seed=9)
    for layout in (torch.contiguous_format, torch.channels_last):
        xl, gl = (t.contiguous(memory_format=layout) for t in (x, go))
        ind, div = torch.ops.mmact.fles_stats(xl, *geom.window, 'positive')
        positive = (x >= 0).double()
        want = (x.double().clamp_min(0).sum((-2, -1)) /
                positive.sum((-2, -1))).view_as(ind)
        assert (ind.double() - want).abs().max() <= 4e-7 * want.abs().max()
        k = torch.full_like(ind, 0.8)
        _, g_ve, _ = torch.ops.mmact.fles_gate_backward(
            xl, gl, k, k, *geom.window, 'sigmoid')
        u = 0.8 * x.double()
        want = (go.double() * x.double() * torch.sigmoid(u)).sum(
            (-2, -1)).view_as(g_ve)
        scale = (go.double() * x.double()).abs().sum((-2, -1)).max()
        assert (g_ve.double() - want).abs().max() <= 4e-7 * scale


def test_current_stream():
    """The kernels run on the current stream."""
    geom = window_geometry(20, 20, (20, 20))
    x, params, _ = case(20, 20, seed=7)
    want = fles_fused(x, geom, params, scale_fn=fles_shared_mlp_scales)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        got = fles_fused(x, geom, params, scale_fn=fles_shared_mlp_scales)
    stream.synchronize()
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_declined_calls_warn_once_and_run_the_next_row():
    """Overlapping windows, an indicator the kernels lack, MLP parameters
    on another device or dtype: the next row, with one warning saying
    why."""
    x, params, _ = case(12, 12)
    tiles = window_geometry(12, 12, (4, 4))
    cases = [
        (window_geometry(12, 12, (4, 4), (2, 2)), 'positive', params,
         'overlapping windows'),
        (tiles, 'softplus', params, "indicator 'softplus'"),
        (tiles, 'positive', [p.double() for p in params],
         'MLP parameters torch.float64'),
    ]
    for geom, mode, p, reason in cases:
        with pytest.warns(UserWarning, match=reason):
            plan = implementation(x, geom, 'sigmoid', mode,
                                  fles_shared_mlp_scales, p)
        assert plan.name in ('triton', 'torch'), reason
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert implementation(x, tiles, 'sigmoid', 'positive',
                              fles_shared_mlp_scales,
                              params).name == 'operator'


def test_operator_refuses_bad_input():
    x, params, _ = case(6, 7)
    with pytest.raises(RuntimeError, match='float32 / float16 / bfloat16 '
                       'CUDA one'):
        torch.ops.mmact.fles(x.double(), *params, 3, 4, 'sigmoid',
                             'positive', K_HO_MIN)
    with pytest.raises(RuntimeError, match="float32 tensors on x's device"):
        torch.ops.mmact.fles(x, *[p.cpu() for p in params], 3, 4, 'sigmoid',
                             'positive', K_HO_MIN)
    with pytest.raises(ValueError, match=r'window \(7, 4\).*6x7'):
        torch.ops.mmact.fles(x, *params, 7, 4, 'sigmoid', 'positive',
                             K_HO_MIN)
