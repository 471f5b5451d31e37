"""FleS math (mmact/ops/fles/) against loop-based references."""
import math

import pytest
import torch
import torch.nn.functional as F

from mmact.ops.fles import (FLES_GATES, K_HO_MIN, fles_apply, fles_fused,
                            fles_gate, fles_gate_and_grad, fles_indicator,
                            fles_mlp_scales, fles_proto_scales, fles_reference,
                            window_expand, window_geometry)

DT = torch.float64


# ----------------------------------------------------------------- references
def loop_starts(size, k, s):
    """Window starts along one axis, derived independently: step by s until a
    window reaches the border."""
    k = min(k, size)
    starts = [0]
    while starts[-1] + k < size:
        starts.append(starts[-1] + s)
    return starts, k


def loop_windows(h, w, window, stride):
    rows, kh = loop_starts(h, window[0], stride[0])
    cols, kw = loop_starts(w, window[1], stride[1])
    return [[(r, min(r + kh, h), c, min(c + kw, w)) for c in cols]
            for r in rows]


def loop_transform(v, mode, gamma_c=1.0, beta_c=0.0, eta=0.1):
    if mode == 'positive':
        return max(v, 0.0)
    if mode == 'softplus':
        return math.log1p(math.exp(gamma_c * v + beta_c))
    if mode == 'quasi_linear':
        return v if v >= eta else eta * math.exp(v / eta - 1.0)
    return v


def loop_indicator(x,
                   window,
                   stride,
                   mode='positive',
                   gamma=None,
                   beta=None,
                   eta=0.1):
    n, c, h, w = x.shape
    wins = loop_windows(h, w, window, stride)
    out = torch.zeros(n, c, len(wins), len(wins[0]), dtype=x.dtype)
    for b in range(n):
        for ch in range(c):
            g = 1.0 if gamma is None else float(gamma[ch])
            bt = 0.0 if beta is None else float(beta[ch])
            for i, row in enumerate(wins):
                for j, (r0, r1, c0, c1) in enumerate(row):
                    vals = [float(v) for v in x[b, ch, r0:r1, c0:c1].flatten()]
                    if mode == 'positive':
                        pos = [v for v in vals if v >= 0]
                        out[b, ch, i, j] = sum(pos) / max(len(pos), 1)
                    else:
                        out[b, ch, i, j] = sum(
                            loop_transform(v, mode, g, bt, eta)
                            for v in vals) / len(vals)
    return out


def loop_expand(k, h, w, window, stride):
    """Per-pixel average of the values of all windows covering the pixel."""
    wins = loop_windows(h, w, window, stride)
    n, c = k.shape[:2]
    total = torch.zeros(n, c, h, w, dtype=k.dtype)
    cover = torch.zeros(h, w, dtype=k.dtype)
    for i, row in enumerate(wins):
        for j, (r0, r1, c0, c1) in enumerate(row):
            total[:, :, r0:r1, c0:c1] += k[:, :, i:i + 1, j:j + 1]
            cover[r0:r1, c0:c1] += 1
    assert (cover > 0).all()
    return total / cover


def mlp_params(c, hidden, seed=0, scale=0.5):
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(2, hidden, c, generator=g, dtype=DT) * scale),
        (torch.randn(2, hidden, generator=g, dtype=DT) * scale),
        (torch.randn(2, c, hidden, generator=g, dtype=DT) * scale),
        (torch.randn(2, c, generator=g, dtype=DT) * scale),
    ]


def loop_mlp(ind, params):
    w1, b1, w2, b2 = params
    n, c, gh, gw = ind.shape
    kve = torch.empty_like(ind)
    kho = torch.empty_like(ind)
    for b in range(n):
        for i in range(gh):
            for j in range(gw):
                v = ind[b, :, i, j]
                for idx, target in ((0, kve), (1, kho)):
                    hid = torch.relu(w1[idx] @ v + b1[idx])
                    target[b, :, i, j] = F.softplus(w2[idx] @ hid + b2[idx])
    return kve, kho


GEOMS = [
    # (h, w, window, stride): tiles with border tiles, exact tiles,
    # overlapping with cut border windows, overlap in one axis only
    (7, 10, (3, 4), (3, 4)),
    (6, 8, (3, 4), (3, 4)),
    (7, 10, (3, 4), (2, 3)),
    (5, 9, (5, 4), (5, 1)),
]


# -------------------------------------------------------------- geometry
@pytest.mark.parametrize('h,w,window,stride', GEOMS)
def test_window_geometry_matches_loop(h, w, window, stride):
    geom = window_geometry(h, w, window, stride)
    wins = loop_windows(h, w, window, stride)
    assert geom.grid == (len(wins), len(wins[0]))
    assert not geom.clamped
    assert geom.overlapping == (tuple(stride) != tuple(window))


def test_window_geometry_clamps_and_global():
    geom = window_geometry(4, 6, (9, 15))
    assert geom.clamped and geom.window == (4, 6) and geom.grid == (1, 1)
    assert geom.is_global
    geom = window_geometry(4, 20, (9, 15), (9, 5))
    assert geom.clamped and geom.window == (4, 15) and geom.stride == (4, 5)
    assert geom.grid == (1, 2)
    glob = window_geometry(4, 6)
    assert glob.is_global and not glob.clamped and glob.window == (4, 6)


@pytest.mark.parametrize('window,stride,match', [
    ((0, 3), None, r'window_size must be positive, got \(0, 3\)'),
    (-2, None, r'window_size must be positive, got \(-2, -2\)'),
    ((3, 3), (0, 1), r'stride must be positive, got \(0, 1\)'),
    ((3, 3), (4, 3), r'stride \(4, 3\) must not exceed window_size \(3, 3\)'),
    (None, 2, 'stride=2 needs a window_size'),
])
def test_window_geometry_errors(window, stride, match):
    with pytest.raises(ValueError, match=match):
        window_geometry(8, 8, window, stride)


def test_window_geometry_type_error():
    with pytest.raises(TypeError, match='pair of ints'):
        window_geometry(8, 8, (3, 3, 3))


# -------------------------------------------------------------- indicators
@pytest.mark.parametrize('h,w,window,stride', GEOMS)
@pytest.mark.parametrize('mode',
                         ['positive', 'softplus', 'quasi_linear', 'mean'])
def test_indicator_matches_loop(h, w, window, stride, mode):
    torch.manual_seed(1)
    x = torch.randn(2, 3, h, w, dtype=DT)
    x[0, 0, 0, 0] = 0.0  # an exact zero counts as non-negative
    x[1, 1, :, :3] = -1.0  # windows with no non-negative value
    gamma = beta = None
    if mode == 'softplus':
        gamma = torch.tensor([0.5, 1.0, 2.0], dtype=DT)
        beta = torch.tensor([-0.3, 0.0, 0.4], dtype=DT)
    geom = window_geometry(h, w, window, stride)
    got = fles_indicator(x, geom, mode, gamma, beta, eta=0.1)
    want = loop_indicator(x, window, stride, mode, gamma, beta, eta=0.1)
    torch.testing.assert_close(got, want)


def test_positive_indicator_counts_only_non_negative():
    x = torch.tensor([[[[1.0, 3.0, -5.0, -7.0]]]], dtype=DT)
    geom = window_geometry(1, 4, (1, 4))
    # (1 + 3) / 2, not (1 + 3) / 4 and not the signed mean
    assert fles_indicator(x, geom).item() == pytest.approx(2.0)
    assert fles_indicator(x, geom, 'mean').item() == pytest.approx(-2.0)
    neg = -torch.ones(1, 1, 2, 2, dtype=DT)
    assert fles_indicator(neg, window_geometry(2, 2)).item() == 0.0


def test_quasi_linear_is_continuous_at_eta():
    eta = 0.1
    x = torch.tensor([[[[eta - 1e-9, eta, eta + 1e-9]]]], dtype=DT)
    geom = window_geometry(1, 3, (1, 1))
    vals = fles_indicator(x, geom, 'quasi_linear', eta=eta).flatten()
    torch.testing.assert_close(
        vals, torch.full_like(vals, eta), atol=1e-8, rtol=0)


@pytest.mark.parametrize('h,w,window,stride', GEOMS)
def test_window_expand_matches_loop(h, w, window, stride):
    geom = window_geometry(h, w, window, stride)
    k = torch.randn(2, 3, *geom.grid, dtype=DT)
    torch.testing.assert_close(
        window_expand(k, geom), loop_expand(k, h, w, window, stride))


# -------------------------------------------------------------- gates
def test_gates_definitions_and_derivatives():
    z = torch.linspace(-6, 6, 101, dtype=DT, requires_grad=True)
    expected = {
        'sigmoid': torch.sigmoid(z),
        'erf': 0.5 * (1 + torch.erf(z / math.sqrt(2))),
        'tanh_softplus': torch.tanh(torch.log1p(torch.exp(z))),
        'tanh_gate': 0.5 * (torch.tanh(z) + 1),
    }
    for gate in FLES_GATES:
        r = fles_gate(z, gate)
        torch.testing.assert_close(r, expected[gate])
        (auto, ) = torch.autograd.grad(r.sum(), z)
        r2, dr = fles_gate_and_grad(z.detach(), gate)
        torch.testing.assert_close(r2, r.detach())
        torch.testing.assert_close(dr, auto)
    with pytest.raises(ValueError, match="unknown FleS gate 'relu'"):
        fles_gate(z, 'relu')


# -------------------------------------------------------------- full FleS
@pytest.mark.parametrize('h,w,window,stride', GEOMS + [(5, 6, None, None)])
@pytest.mark.parametrize('gate', FLES_GATES)
def test_fles_matches_loop_reference(h, w, window, stride, gate):
    torch.manual_seed(2)
    c = 4
    x = torch.randn(2, c, h, w, dtype=DT)
    params = mlp_params(c, 2)
    geom = window_geometry(h, w, window, stride)
    if window is None:
        window, stride = (h, w), (h, w)
    ind = loop_indicator(x, window, stride)
    kve, kho = loop_mlp(ind, params)
    want = loop_expand(kve, h, w, window, stride) * fles_gate(
        loop_expand(kho, h, w, window, stride) * x, gate) * x
    torch.testing.assert_close(
        fles_reference(x, geom, params, gate=gate), want)
    torch.testing.assert_close(fles_fused(x, geom, params, gate=gate), want)


@pytest.mark.parametrize('h,w,window,stride', GEOMS + [(5, 6, None, None)])
@pytest.mark.parametrize('mode',
                         ['positive', 'softplus', 'quasi_linear', 'mean'])
def test_fused_gradients_match_composite(h, w, window, stride, mode):
    torch.manual_seed(3)
    c = 4
    x = torch.randn(2, c, h, w, dtype=DT, requires_grad=True)
    params = [p.requires_grad_() for p in mlp_params(c, 2)]
    gamma = torch.rand(c, dtype=DT, requires_grad=True) + 0.5
    beta = torch.randn(c, dtype=DT, requires_grad=True)
    geom = window_geometry(h, w, window, stride)
    kw = dict(mode=mode, gamma=gamma, beta=beta, gate='sigmoid')
    leaves = [x] + params + ([gamma, beta] if mode == 'softplus' else [])
    grad = torch.randn(2, c, h, w, dtype=DT)
    g_ref = torch.autograd.grad(
        fles_reference(x, geom, params, **kw), leaves, grad)
    g_fused = torch.autograd.grad(
        fles_fused(x, geom, params, **kw), leaves, grad)
    for a, b in zip(g_fused, g_ref):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(
    'window,stride,block,gate,fast',
    [
        ((2, 3), None, 1 << 21, 'sigmoid', False),  # tiles, full Jacobian
        ((2, 3), (1, 2), 1 << 21, 'sigmoid', True),  # overlapping
        (None, None, 1 << 21, 'sigmoid', True),  # global
        ((2, 3), None, 1, 'erf', True),  # one plane per block
        ((2, 3), None, 1 << 21, 'tanh_softplus', True),
        ((2, 3), (1, 2), 1 << 21, 'tanh_gate', True),
    ])
def test_fused_gradcheck(window, stride, block, gate, fast):
    torch.manual_seed(4)
    c = 3
    x = torch.randn(1, c, 3, 5, dtype=DT, requires_grad=True)
    params = [p.requires_grad_() for p in mlp_params(c, 2, scale=0.7)]
    geom = window_geometry(3, 5, window, stride)

    def fn(x, *ps):
        return fles_fused(x, geom, ps, gate=gate, block_bytes=block)

    assert torch.autograd.gradcheck(fn, (x, *params), fast_mode=fast)


@pytest.mark.parametrize('mode', ['softplus', 'quasi_linear'])
def test_fused_gradcheck_indicator_params(mode):
    torch.manual_seed(5)
    c = 3
    x = torch.randn(1, c, 3, 4, dtype=DT, requires_grad=True)
    params = [p.requires_grad_() for p in mlp_params(c, 2, scale=0.7)]
    gamma = (torch.rand(c, dtype=DT) + 0.5).requires_grad_()
    beta = torch.randn(c, dtype=DT).requires_grad_()
    geom = window_geometry(3, 4, (2, 2), (1, 2))

    def fn(x, gamma, beta, *ps):
        return fles_fused(x, geom, ps, mode=mode, gamma=gamma, beta=beta)

    assert torch.autograd.gradcheck(
        fn, (x, gamma, beta, *params), fast_mode=True)


def test_global_equals_window_covering_map():
    torch.manual_seed(6)
    x = torch.randn(2, 4, 5, 7, dtype=DT)
    params = mlp_params(4, 2)
    full = window_geometry(5, 7, (5, 7))
    glob = window_geometry(5, 7, None)
    for fn in (fles_reference, fles_fused):
        torch.testing.assert_close(fn(x, glob, params), fn(x, full, params))


def test_locality_tiles_and_overlap():
    torch.manual_seed(7)
    h, w = 8, 9
    params = mlp_params(3, 4)
    params[1] = params[1].abs() + 2.0  # keep every hidden ReLU unit active
    x = torch.randn(1, 3, h, w, dtype=DT)
    x2 = x.clone()
    x2[0, :, 4, 4] += 3.0  # a pixel inside tile rows 3-5, cols 3-5
    pixel_changed = torch.zeros(h, w, dtype=torch.bool)
    pixel_changed[4, 4] = True
    # tiles 3x3: only the pixels of that tile change
    geom = window_geometry(h, w, (3, 3))
    diff = (fles_fused(x2, geom, params) - fles_fused(x, geom, params))
    changed = diff.abs().amax(dim=(0, 1)) > 0
    expected = torch.zeros(h, w, dtype=torch.bool)
    expected[3:6, 3:6] = True
    assert torch.equal(changed, expected)
    # overlapping 4x4 / stride 2: windows starting at rows/cols 2 and 4
    # contain (4, 4); pixels covered by any of them may change
    geom = window_geometry(h, w, (4, 4), (2, 2))
    diff = (fles_fused(x2, geom, params) - fles_fused(x, geom, params))
    changed = diff.abs().amax(dim=(0, 1)) > 0
    expected = torch.zeros(h, w, dtype=torch.bool)
    expected[2:8, 2:8] = True
    assert torch.equal(changed, expected)
    # and nothing depends on a pixel outside its windows
    far = x.clone()
    far[0, :, 0, 0] += 3.0
    diff = (fles_fused(far, geom, params) - fles_fused(x, geom, params))
    changed = diff.abs().amax(dim=(0, 1)) > 0
    assert changed[:4, :4].all() and not changed[4:, :].any() \
        and not changed[:, 4:].any()


def test_fused_saves_only_input():
    x = torch.randn(2, 8, 16, 16, requires_grad=True)
    params = [p.float().requires_grad_() for p in mlp_params(8, 2)]
    geom = window_geometry(16, 16, (5, 7))
    big = []

    def pack(t):
        if t.numel() >= x.numel():
            big.append(t.untyped_storage().data_ptr())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fles_fused(x, geom, params)
    assert set(big) == {x.untyped_storage().data_ptr()}
    big.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fles_reference(x, geom, params)
    assert len(set(big)) > 1  # the composite keeps intermediates


def test_k_ho_floor_keeps_fused_finite():
    x = torch.randn(1, 2, 4, 4, dtype=DT, requires_grad=True)
    w1, b1, w2, b2 = [p.clone() for p in mlp_params(2, 1)]
    w2.zero_()
    b2.fill_(-1000.0)  # softplus underflows to exactly 0
    params = [w1, b1, w2, b2]
    ind = torch.rand(1, 2, 1, 1, dtype=DT)
    assert fles_mlp_scales(ind, *params)[1].min().item() == K_HO_MIN
    y = fles_fused(x, window_geometry(4, 4), params)
    y.sum().backward()
    assert torch.isfinite(y).all() and torch.isfinite(x.grad).all()


def test_proto_scales_use_batch_statistics():
    torch.manual_seed(8)
    x = torch.randn(3, 4, 5, 5, dtype=DT)
    alpha = torch.tensor([0.2, -0.1], dtype=DT)
    gamma = torch.tensor([0.6, 0.3], dtype=DT)
    kve, kho = fles_proto_scales(x, alpha, gamma)
    pos = x.clamp(min=0).sum((0, 2, 3)) / (x >= 0).sum((0, 2, 3))
    mu = pos / pos.mean()
    torch.testing.assert_close(kve.flatten(), F.softplus(0.2 * mu + 0.6))
    torch.testing.assert_close(kho.flatten(), F.softplus(-0.1 * mu + 0.3))
    # the first sample's scales change when another sample changes
    other = x.clone()
    other[2] *= 5
    assert not torch.allclose(fles_proto_scales(other, alpha, gamma)[0], kve)
    y = fles_apply(x, kve, kho)
    assert y.shape == x.shape


def test_scale_mlp_of_small_grid_runs_on_one_thread():
    """The tiny scale-MLP ops run on one intra-op thread; the caller's
    thread count is restored."""
    seen = []

    def scale_fn(ind, *params):
        seen.append(torch.get_num_threads())
        return fles_mlp_scales(ind, *params)

    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = torch.randn(2, 4, 6, 6, dtype=DT, requires_grad=True)
        params = [p.requires_grad_() for p in mlp_params(4, 2)]
        geom = window_geometry(6, 6, (3, 3))
        fles_fused(x, geom, params, scale_fn=scale_fn).sum().backward()
        # once, in forward: backward uses the VJP prepared there
        assert seen == [1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(old)


def test_onnx_export_runs_the_composite_and_matches_onnxruntime(tmp_path):
    """Export goes through the table's composite row (no export branch):
    onnxruntime gives the layer's values (the whole-map indicator)."""
    ort = pytest.importorskip('onnxruntime')
    from mmact.compat import TORCHSCRIPT_ONNX_EXPORT
    from mmact.models.activations import FleS
    torch.manual_seed(3)
    m = FleS(channels=8, reduction=4).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    x = torch.randn(2, 8, 6, 8)
    path = str(tmp_path / 'fles.onnx')
    torch.onnx.export(
        m, (x, ), path, input_names=['x'], **TORCHSCRIPT_ONNX_EXPORT)
    sess = ort.InferenceSession(path, providers=['CPUExecutionProvider'])
    out = sess.run(None, {'x': x.numpy()})[0]
    with torch.no_grad():
        torch.testing.assert_close(
            torch.from_numpy(out), m(x), rtol=1e-4, atol=1e-5)
