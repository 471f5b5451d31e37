"""The CUDA kernels of FleS's pixel passes (``csrc/fles_cuda.cu``) run on
the CPU by their simulation (:mod:`mmact.testing.cuda_sim`): each pass
against float64 references and the C kernels, for every gate of
``mmact/ops/fles/gates.py``, both kernel indicators, tiled and global
windows, NCHW, channels-last and (planes, H, W) maps with a partial channel
tile, float32 / float16 / bfloat16; window sums bit for bit across block and
thread orders; the kernels' refusals. The C++ node's CUDA branch around
these passes (``forward_cuda``, ``backward_cuda``, ``MlpAten``) calls the
``mmact`` operators by name and runs on a GPU only."""
import pytest
import torch
import torch.nn.functional as F

from mmact.ops.fles.gates import FLES_GATES, GATES
from mmact.testing import cuda_sim

# relative L2 error against float64: the rounding of the output dtype
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
DTYPES = list(TOL)
# (H, W, window): tiles cut at the border (windows of fewer pixels than a
# block's pixel lanes), one global window of many pixels per lane
WINDOWS = [(13, 17, (5, 4)), (9, 15, (9, 15))]
# NCHW with a partial tile of 8 channels, channels last with two tiles of
# 32 (the second partial), (planes, H, W)
LAYOUTS = ['nchw', 'channels_last', 'planes']


def rel(a, b):
    a, b = a.double(), b.double()
    assert torch.isfinite(a).all()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def grid(h, w, window):
    kh, kw = window
    return kh, kw, -(-h // kh), -(-w // kw)


def case(layout, h, w, window, dtype, seed=0):
    """A map, per-window scales k_ve, k_ho (float32) and an output
    gradient."""
    g = torch.Generator().manual_seed(seed)
    shape = dict(nchw=(2, 12), channels_last=(1, 40), planes=(12, ))[layout]
    x = (torch.randn(*shape, h, w, generator=g) * 2).to(dtype)
    go = torch.randn(*shape, h, w, generator=g).to(dtype)
    if layout == 'channels_last':
        x = x.contiguous(memory_format=torch.channels_last)
        go = go.contiguous(memory_format=torch.channels_last)
    _, _, nh, nw = grid(h, w, window)
    k_ve = torch.rand(*shape, nh, nw, generator=g) + 0.5
    k_ho = torch.rand(*shape, nh, nw, generator=g) + 0.5
    return x, k_ve, k_ho, go


def per_pixel(t, h, w, window):
    """Per-window values (..., nh, nw) spread over their windows' pixels."""
    kh, kw = window
    return t.repeat_interleave(kh,
                               -2)[..., :h, :].repeat_interleave(kw,
                                                                 -1)[..., :w]


def window_sums(t, window):
    """Sums of t over the windows (cut at the border)."""
    kh, kw, nh, nw = grid(t.shape[-2], t.shape[-1], window)
    padded = F.pad(t, (0, nw * kw - t.shape[-1], 0, nh * kh - t.shape[-2]))
    return padded.reshape(*t.shape[:-2], nh, kh, nw, kw).sum((-3, -1))


def planes(t):
    """t as the C kernels take it: (planes, H, W) float32, contiguous."""
    return t.float().reshape(-1, *t.shape[-2:]).contiguous()


@pytest.mark.parametrize('mode', ['positive', 'mean'])
@pytest.mark.parametrize('layout', LAYOUTS)
@pytest.mark.parametrize('dtype', DTYPES)
def test_stats_and_indicator_backward(sim, mode, layout, dtype):
    """The indicator and divisor of each window, and the indicator's
    gradient added into grad_x, against float64 and the C kernels."""
    for h, w, window in WINDOWS:
        x, _, _, go = case(layout, h, w, window, dtype)
        ind, div = sim.fles_stats(x, *window, mode)
        x64 = x.double()
        if mode == 'positive':
            want_div = window_sums((x64 >= 0).double(), window).clamp_min(1)
            want_ind = window_sums(x64.clamp_min(0), window) / want_div
        else:
            want_div = window_sums(torch.ones_like(x64), window)
            want_ind = window_sums(x64, window) / want_div
        assert ind.dtype == div.dtype == torch.float32
        assert torch.equal(div.double(), want_div), (h, w)
        assert rel(ind, want_ind) < 1e-6, (h, w)
        c_ind, c_div = torch.ops.mmact.fles_stats(planes(x), *window, mode)
        assert torch.equal(div, c_div.reshape(div.shape))
        assert rel(ind, c_ind.reshape(ind.shape)) < 1e-6
        g_ind = torch.randn(
            ind.shape, generator=torch.Generator().manual_seed(1))
        gx = go.clone()  # go's layout: x's
        sim.fles_indicator_backward(gx, x, g_ind, div, *window, mode)
        slope = (x64 > 0).double() if mode == 'positive' else 1.0
        want = go.double() + slope * per_pixel(g_ind.double() / want_div, h, w,
                                               window)
        assert gx.stride() == x.stride() and rel(gx, want) < TOL[dtype]
        c_gx = planes(go)
        torch.ops.mmact.fles_indicator_backward(c_gx, planes(x), planes(g_ind),
                                                planes(div), *window, mode)
        assert rel(gx, c_gx.reshape(gx.shape)) < 2 * TOL[dtype]


@pytest.mark.parametrize('gate', FLES_GATES)
@pytest.mark.parametrize('layout', LAYOUTS)
@pytest.mark.parametrize('dtype', DTYPES)
def test_apply_and_gate_backward(sim, gate, layout, dtype):
    """y = k_ve rho(k_ho x) x and its gradients (grad_x with the scales
    fixed, the window sums of the scales' gradients) against float64
    autograd and the C kernels."""
    for h, w, window in WINDOWS:
        x, k_ve, k_ho, go = case(layout, h, w, window, dtype)
        y = sim.fles_apply(x, k_ve, k_ho, *window, gate)
        gx, g_ve, g_ho = sim.fles_gate_backward(x, go, k_ve, k_ho, *window,
                                                gate)
        leaves = [t.double().requires_grad_() for t in (x, k_ve, k_ho)]
        x64, kv64, ko64 = leaves
        u = per_pixel(ko64, h, w, window) * x64
        want = per_pixel(kv64, h, w, window) * GATES[gate].fn(u) * x64
        grads = torch.autograd.grad(want, leaves, go.double())
        assert y.dtype == gx.dtype == dtype
        assert y.stride() == gx.stride() == x.stride()
        assert rel(y, want) < TOL[dtype], (h, w)
        for a, b, tol in zip((gx, g_ve, g_ho), grads,
                             (TOL[dtype], 1e-5, 1e-5)):
            assert a.shape == b.shape and rel(a, b) < tol, (h, w, rel(a, b))
        c_in = (planes(x), planes(k_ve), planes(k_ho))
        c_y = torch.ops.mmact.fles_apply(*c_in, *window, gate)
        c_grads = torch.ops.mmact.fles_gate_backward(c_in[0], planes(go),
                                                     *c_in[1:], *window, gate)
        assert rel(y, c_y.reshape(y.shape)) < 2 * TOL[dtype]
        for a, b, tol in zip((gx, g_ve, g_ho), c_grads,
                             (TOL[dtype], 1e-5, 1e-5)):
            assert rel(a, b.reshape(a.shape)) < 2 * tol, (h, w)


@pytest.mark.parametrize('layout', ['nchw', 'channels_last'])
def test_window_sums_are_bitwise_stable(sim, layout):
    """Other block and thread orders (and in order) give the same bits:
    each lane's sum, then a fixed-order sum over the lanes."""
    x, k_ve, k_ho, go = case(layout, 13, 17, (5, 4), torch.float32, seed=3)
    first = (*sim.fles_stats(x, 5, 4, 'positive'),
             *sim.fles_gate_backward(x, go, k_ve, k_ho, 5, 4, 'erf'))
    for seed in (0, 2, 3):
        with cuda_sim.settings(order_seed=seed):
            again = (*sim.fles_stats(x, 5, 4, 'positive'),
                     *sim.fles_gate_backward(x, go, k_ve, k_ho, 5, 4, 'erf'))
        for a, b in zip(first, again):
            assert torch.equal(a, b), seed


def test_blocks_per_window_and_channel_tile(sim):
    """A block per window of each tile of channels: 8 per tile in NCHW,
    32 channels last."""
    x, _, _, _ = case('nchw', 13, 17, (5, 4), torch.float32)
    sim.fles_stats(x, 5, 4, 'mean')
    x, _, _, _ = case('channels_last', 13, 17, (5, 4), torch.float32)
    sim.fles_stats(x, 5, 4, 'mean')
    assert cuda_sim.launched() == [2 * 3 * 5 * 2, 1 * 3 * 5 * 2]


def test_bad_input_is_refused_as_on_cuda(sim):
    """The CUDA operators' refusals, with their words: a map's dtype,
    dimensions, a window that does not fit, per-window inputs of another
    dtype or count, an unknown gate or indicator, a grad_out or grad_x of
    another shape or layout."""
    x, k_ve, k_ho, go = case('nchw', 6, 7, (3, 4), torch.float32)
    with pytest.raises(
            TypeError,
            match=r'mmact::fles_stats on CUDA takes a '
            r'float32 / float16 / bfloat16 map, got Double'):
        sim.fles_stats(x.double(), 3, 4, 'positive')
    with pytest.raises(
            RuntimeError,
            match=r'mmact::fles_apply on CUDA takes '
            r'an \(N, C, H, W\) or \(planes, H, W\) map \(got '
            r'\[6, 7\]\)'):
        sim.fles_apply(x[0, 0], k_ve, k_ho, 3, 4, 'sigmoid')
    with pytest.raises(
            ValueError,
            match=r'mmact::fles_stats: window \(7, 4\) '
            r'must be positive and fit the 6x7 map'):
        sim.fles_stats(x, 7, 4, 'positive')
    with pytest.raises(
            RuntimeError,
            match=r'mmact::fles_apply on CUDA: k_ve '
            r'must hold float32 values on cpu for the \(24, 2, 2\) '
            r'windows \(got Double'):
        sim.fles_apply(x, k_ve.double(), k_ho, 3, 4, 'sigmoid')
    with pytest.raises(RuntimeError, match=r'k_ho must hold float32 values'):
        sim.fles_gate_backward(x, go, k_ve, k_ho[:1], 3, 4, 'sigmoid')
    with pytest.raises(
            ValueError,
            match=r"mmact::fles on CUDA: unknown gate "
            r"'gelu'; choose one of sigmoid, tanh_gate, erf, "
            r'tanh_softplus'):
        sim.fles_apply(x, k_ve, k_ho, 3, 4, 'gelu')
    with pytest.raises(
            ValueError,
            match=r"indicator mode 'softplus' has no "
            r'kernel; choose positive or mean'):
        sim.fles_stats(x, 3, 4, 'softplus')
    with pytest.raises(
            RuntimeError,
            match=r'mmact::fles_gate_backward on '
            r"CUDA takes a grad_out of x's shape"):
        sim.fles_gate_backward(x, go[:1], k_ve, k_ho, 3, 4, 'sigmoid')
    ind, div = sim.fles_stats(x, 3, 4, 'mean')
    with pytest.raises(
            RuntimeError,
            match=r'mmact::fles_indicator_backward '
            r"on CUDA adds into a grad_x of x's shape, layout and "
            r'dtype'):
        sim.fles_indicator_backward(
            go.contiguous(memory_format=torch.channels_last), x, ind, div, 3,
            4, 'mean')


def test_grids_over_the_limit_are_refused_before_any_copy(sim):
    """A map of 2^32 windows of a tile of channels (expanded: a contiguous
    copy would take 128 GiB): refused naming the shape, the window and the
    limit before the kernels copy or allocate anything."""
    x = torch.zeros(1, 1, 1, 1).expand(1, 8, 2**16, 2**16)
    with pytest.raises(
            RuntimeError,
            match=r'mmact::fles_stats on CUDA takes '
            r'at most 2\^31 - 1 windows x tiles of 8 channels \(got '
            r'4294967296 for shape \[1, 8, 65536, 65536\] and '
            r'window \(1, 1\)\)'):
        sim.fles_stats(x, 1, 1, 'positive')
    ones = torch.ones(1)
    with pytest.raises(
            RuntimeError,
            match=r'mmact::fles_apply on CUDA takes '
            r'at most 2\^31 - 1 windows'):
        sim.fles_apply(x, ones, ones, 1, 1, 'sigmoid')
    assert cuda_sim.launched() == []
