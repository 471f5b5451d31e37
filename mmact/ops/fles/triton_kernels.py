"""Triton kernels of the FleS pixel passes (imported only on the Triton path).

Maps are contiguous ``(planes, H, W)``; windows are tiles ``(kh, kw)`` cut
at the border (or one global window), laid out as a ``(nh, nw)`` grid per
plane. A program owns one band of tile rows of one plane and a block of
whole windows along the columns (``CW = kw * wpb`` columns, ``wpb`` windows),
so the per-window values it needs are a gather per column, and its window
sums are column sums followed by a segment sum, with no atomics.

Passes (``u = c k_ho x``, ``rho`` the gate, ``rho'`` its derivative in u):

* stats: the indicator ``ind = sum / count`` per window and its divisor
  ``count``: sums of ``relu(x)`` over ``max(count(x >= 0), 1)`` (positive
  indicator) or sums of ``x`` over the window's pixels (mean);
* apply: ``y = k_ve rho(u) x``;
* gate sums: window sums of ``g x rho(u)`` (``k_ve``'s gradient) and of
  ``g x^2 rho'(u)`` times ``k_ve c`` (``k_ho``'s), the gradients the scale
  MLP's backward takes;
* input gradient: ``g k_ve (rho(u) + u rho'(u)) + f'(x) q`` with
  ``q = g_ind / count`` (``g_ind`` the indicator's gradient; ``f'`` = step
  for positive, 1 for mean): the gate and indicator paths in one pass.

Per-window tensors (indicator, count, scales, gradients) are contiguous
float32 ``(planes, nh, nw)`` grids; maps are read in any float dtype and
computed in float32. No torch op runs between the passes but the scale
MLP.
"""
import triton
import triton.language as tl

__all__ = [
    'fles_stats_kernel', 'fles_apply_kernel', 'fles_gate_sums_kernel',
    'fles_grad_kernel'
]

_INV_SQRT2 = tl.constexpr(0.7071067811865476)
_INV_SQRT2PI = tl.constexpr(0.3989422804014327)


@triton.jit
def _gate(u, GATE: tl.constexpr):
    """(rho(u), rho'(u)): 0 sigmoid, 1 Gaussian CDF (erf), 2 tanh(softplus)."""
    if GATE == 0:
        e = tl.exp(-tl.abs(u))
        s = 1.0 / (1.0 + e)
        r = tl.where(u >= 0, s, e * s)
        d = r * (1.0 - r)
    elif GATE == 1:
        r = 0.5 * (1.0 + tl.math.erf(u * _INV_SQRT2))
        d = tl.exp(-0.5 * u * u) * _INV_SQRT2PI
    else:
        # tanh(softplus(u)) and sigmoid(u) from e = exp(-|u|) (no overflow)
        e = tl.exp(-tl.abs(u))
        e2 = e * e
        pos = u >= 0
        num = tl.where(pos, 1.0 + 2.0 * e, e2 + 2.0 * e)
        r = num / (num + tl.where(pos, 2.0 * e2, 2.0))
        sig = tl.where(pos, 1.0, e) / (1.0 + e)
        d = (1.0 - r * r) * sig
    return r, d


@triton.jit
def _band(pid, H, W, kh, kw, nh, nw, n_cb, CW, BLOCK_W: tl.constexpr):
    """The plane, tile row and column block of program ``pid``."""
    per_plane = nh * n_cb
    plane = pid // per_plane
    gr = (pid % per_plane) // n_cb
    cb = pid % n_cb
    local = tl.arange(0, BLOCK_W)
    col = cb * CW + local
    col_mask = (local < CW) & (col < W)
    row0 = gr * kh
    rows = tl.minimum(kh, H - row0)
    base = plane.to(tl.int64) * H * W + row0 * W
    # flat index of each column's window in the (planes, nh, nw) grid
    win = plane.to(tl.int64) * (nh * nw) + gr * nw + col // kw
    return plane, gr, cb, rows, base, col, col_mask, local, win


@triton.jit
def _window_sums(colsum, local, plane, gr, cb, kw, nh, nw, wpb,
                 BLOCK_NW: tl.constexpr):
    """Columns added up per window: the block's window sums, their flat
    grid index and mask."""
    j = tl.arange(0, BLOCK_NW)
    onehot = (local // kw)[:, None] == j[None, :]
    sums = tl.sum(tl.where(onehot, colsum[:, None], 0.0), axis=0)
    wcol = cb * wpb + j
    at = plane.to(tl.int64) * (nh * nw) + gr * nw + wcol
    return sums, at, (j < wpb) & (wcol < nw)


@triton.jit
def _rows_block(r0, rows, base, W, col, col_mask, BLOCK_R: tl.constexpr):
    """Offsets and mask of rows ``[r0, r0 + BLOCK_R)`` of a band."""
    r = r0 + tl.arange(0, BLOCK_R)
    mask = (r < rows)[:, None] & col_mask[None, :]
    return base + r[:, None] * W + col[None, :], mask


@triton.jit
def fles_stats_kernel(x_ptr, ind_ptr, count_ptr, H, W, kh, kw, nh, nw, n_cb,
                      CW, wpb, POSITIVE: tl.constexpr, BLOCK_R: tl.constexpr,
                      BLOCK_W: tl.constexpr, BLOCK_NW: tl.constexpr):
    """The indicator and its divisor per window: sums of relu(x) over
    ``max(count(x >= 0), 1)``, or sums of x over the window's pixels."""
    plane, gr, cb, rows, base, col, col_mask, local, win = _band(
        tl.program_id(0), H, W, kh, kw, nh, nw, n_cb, CW, BLOCK_W)
    acc = tl.zeros((BLOCK_R, BLOCK_W), dtype=tl.float32)
    cnt = tl.zeros((BLOCK_R, BLOCK_W), dtype=tl.float32)
    for r0 in range(0, rows, BLOCK_R):
        offs, mask = _rows_block(r0, rows, base, W, col, col_mask, BLOCK_R)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        if POSITIVE:
            acc += tl.maximum(x, 0.0)
            cnt += tl.where(mask & (x >= 0.0), 1.0, 0.0)
        else:
            acc += x
            cnt += tl.where(mask, 1.0, 0.0)
    sums, at, w_mask = _window_sums(
        tl.sum(acc, axis=0), local, plane, gr, cb, kw, nh, nw, wpb, BLOCK_NW)
    count = _window_sums(
        tl.sum(cnt, axis=0), local, plane, gr, cb, kw, nh, nw, wpb,
        BLOCK_NW)[0]
    count = tl.maximum(count, 1.0)
    tl.store(ind_ptr + at, sums / count, mask=w_mask)
    tl.store(count_ptr + at, count, mask=w_mask)


@triton.jit
def fles_apply_kernel(x_ptr, y_ptr, kv_ptr, ko_ptr, cst, H, W, kh, kw, nh, nw,
                      n_cb, CW, GATE: tl.constexpr, BLOCK_R: tl.constexpr,
                      BLOCK_W: tl.constexpr):
    """``y = k_ve rho(c k_ho x) x`` with the scales of each pixel's window."""
    # no `_` names: one bound before a loop and again inside it would be a
    # loop-carried variable changing type
    plane, gr, cb, rows, base, col, col_mask, local, win = _band(
        tl.program_id(0), H, W, kh, kw, nh, nw, n_cb, CW, BLOCK_W)
    kv = tl.load(kv_ptr + win, mask=col_mask, other=0.0)[None, :]
    ko = (tl.load(ko_ptr + win, mask=col_mask, other=1.0) * cst)[None, :]
    for r0 in range(0, rows, BLOCK_R):
        offs, mask = _rows_block(r0, rows, base, W, col, col_mask, BLOCK_R)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        rho, drho = _gate(ko * x, GATE)
        tl.store(
            y_ptr + offs, (kv * rho * x).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def fles_gate_sums_kernel(x_ptr, g_ptr, kv_ptr, ko_ptr, s_ve_ptr, s_ho_ptr,
                          cst, H, W, kh, kw, nh, nw, n_cb, CW, wpb,
                          GATE: tl.constexpr, BLOCK_R: tl.constexpr,
                          BLOCK_W: tl.constexpr, BLOCK_NW: tl.constexpr):
    """Window sums of ``g x rho(u)`` and of ``g x^2 rho'(u)`` times the
    window's ``k_ve c``."""
    plane, gr, cb, rows, base, col, col_mask, local, win = _band(
        tl.program_id(0), H, W, kh, kw, nh, nw, n_cb, CW, BLOCK_W)
    ko = (tl.load(ko_ptr + win, mask=col_mask, other=1.0) * cst)[None, :]
    acc_ve = tl.zeros((BLOCK_R, BLOCK_W), dtype=tl.float32)
    acc_ho = tl.zeros((BLOCK_R, BLOCK_W), dtype=tl.float32)
    for r0 in range(0, rows, BLOCK_R):
        offs, mask = _rows_block(r0, rows, base, W, col, col_mask, BLOCK_R)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        rho, drho = _gate(ko * x, GATE)
        gx = g * x  # masked lanes: 0
        acc_ve += gx * rho
        acc_ho += gx * x * drho
    s_ve, at, w_mask = _window_sums(
        tl.sum(acc_ve, axis=0), local, plane, gr, cb, kw, nh, nw, wpb,
        BLOCK_NW)
    tl.store(s_ve_ptr + at, s_ve, mask=w_mask)
    s_ho = _window_sums(
        tl.sum(acc_ho, axis=0), local, plane, gr, cb, kw, nh, nw, wpb,
        BLOCK_NW)[0]
    # d y / d k_ho = k_ve c x^2 rho'(u): the window's k_ve and c after the sum
    kv_w = tl.load(kv_ptr + at, mask=w_mask, other=0.0)
    tl.store(s_ho_ptr + at, s_ho * kv_w * cst, mask=w_mask)


@triton.jit
def fles_grad_kernel(x_ptr, g_ptr, gx_ptr, kv_ptr, ko_ptr, gi_ptr, count_ptr,
                     cst, H, W,
                     kh, kw, nh, nw, n_cb, CW, GATE: tl.constexpr,
                     POSITIVE: tl.constexpr, BLOCK_R: tl.constexpr,
                     BLOCK_W: tl.constexpr):
    """``gx = g k_ve (rho(u) + u rho'(u)) + f'(x) q``, ``q = g_ind /
    count`` (gate and indicator paths together)."""
    plane, gr, cb, rows, base, col, col_mask, local, win = _band(
        tl.program_id(0), H, W, kh, kw, nh, nw, n_cb, CW, BLOCK_W)
    kv = tl.load(kv_ptr + win, mask=col_mask, other=0.0)[None, :]
    ko = (tl.load(ko_ptr + win, mask=col_mask, other=1.0) * cst)[None, :]
    q = (tl.load(gi_ptr + win, mask=col_mask, other=0.0) /
         tl.load(count_ptr + win, mask=col_mask, other=1.0))[None, :]
    for r0 in range(0, rows, BLOCK_R):
        offs, mask = _rows_block(r0, rows, base, W, col, col_mask, BLOCK_R)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        u = ko * x
        rho, drho = _gate(u, GATE)
        gx = g * kv * (rho + u * drho)
        if POSITIVE:
            gx += tl.where(x > 0.0, q, 0.0)
        else:
            gx += q
        tl.store(gx_ptr + offs, gx.to(gx_ptr.dtype.element_ty), mask=mask)
