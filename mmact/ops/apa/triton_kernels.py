"""Triton kernels of APA / AGLU (imported only on the Triton path).

The input is seen as a row-major ``(P, Q)`` matrix over its storage. A
per-channel parameter follows the rows (``CHANNEL_AXIS=0``: channel
``p % C``; channels-first data, ``Q`` = elements of one channel plane) or
the columns (``CHANNEL_AXIS=1``: channel ``q``; channels-last data,
``Q = C``). Programs work on ``BLOCK_P x BLOCK_Q`` tiles (forward: one;
backward: a run of tiles along which the channels stay fixed), so the
parameter loads and the per-channel gradient sums are per row / column
vectors, never per-element divisions.

The kernels read the raw parameters (float32, float16 or bfloat16, taken
in float32) and clamp lambda themselves, ``l = max(lambda, lambda_min)``
with lambda_min's float32 value; :func:`eta_param_grad_kernel` writes the
gradients of the raw parameters in their shape and dtype (a shared one
beside a per-channel one summed, lambda's zero where the clamp holds:
``lambda <= lambda_min``), so no torch op runs around them.

Math (``a = ln l - k z``, ``e = exp(-|a|)``): ``softplus(a) = max(a, 0) +
log1p(e)``, ``g = sigmoid(a)``, ``eta = exp(-softplus(a) / l)``; see
:mod:`mmact.ops.apa` for the derivatives. ``log1p`` is ``2 atanh(s)`` with
``s = e / (2 + e) <= 1/3`` as a polynomial (relative error 2e-7): the
common ``tl`` API has no log1p, and ``log(1 + e)`` loses all digits for
``e < 6e-8``, which ``1/l = 1e4`` would amplify. In backward one division
gives both ``1 / (1 + e)`` and ``1 / (2 + e)``.
"""
import triton
import triton.language as tl

__all__ = ['eta_fwd_kernel', 'eta_bwd_kernel', 'eta_param_grad_kernel']


@triton.jit
def _log1p_from_s(s):
    s2 = s * s
    p = 0.34225806 * s2 + 0.39589497
    p = p * s2 + 0.66676003
    p = p * s2 + 1.99999964
    return s * p


@triton.jit
def _softplus_minus_sigmoid(a, e, sp, g):
    """softplus(a) - sigmoid(a) without cancellation: for a < 0 it is
    log1p(e) - e / (1 + e) = e^2/2 - 2e^3/3 + 3e^4/4 - ..., ~e^2/2 where both
    terms are ~e (lambda at its clamp: the 1/l^2 of the lambda gradient
    would amplify the cancelled digits); series for e < 0.05 (truncation
    error 5e-7 relative)."""
    series = e * e * (0.5 - e * (0.6666667 - e * (0.75 - e *
                                                  (0.8 - e * 0.8333333))))
    return tl.where((a < 0.0) & (e < 0.05), series, sp - g)


@triton.jit
def _load_param(ptr, ch, Q, PER_CHANNEL: tl.constexpr,
                CHANNEL_AXIS: tl.constexpr):
    # one return: the compiler wants the same type on every return
    if not PER_CHANNEL:
        value = tl.load(ptr)
    elif CHANNEL_AXIS == 0:
        value = tl.load(ptr + ch)  # p % C is always a valid channel
    else:
        value = tl.load(ptr + ch, mask=ch < Q, other=1.0)
    return value


@triton.jit
def _clamped(raw, lambda_min):
    """The strict clamp of :func:`mmact.ops.apa.clamp_lambda`."""
    return tl.where(raw > lambda_min, raw, lambda_min)


@triton.jit
def _params(pid, P, Q, C, n_q, n_groups, k_ptr, l_ptr, lambda_min,
            K_PER_CHANNEL: tl.constexpr, L_PER_CHANNEL: tl.constexpr,
            CHANNEL_AXIS: tl.constexpr, BLOCK_P: tl.constexpr,
            BLOCK_Q: tl.constexpr, WIDE: tl.constexpr):
    """Where a program starts and its (k, 1/l, ln l) (``l`` clamped),
    broadcastable over a tile: program ``pid`` owns tile row
    ``pid // n_groups`` and tile columns ``group * iters ...``
    (``CHANNEL_AXIS=0``), or tile column ``pid % n_q`` and tile rows
    ``group * iters ...`` (``CHANNEL_AXIS=1``).
    """
    if WIDE:
        pid = pid.to(tl.int64)
    if CHANNEL_AXIS == 0:
        group = pid % n_groups
        p = (pid // n_groups) * BLOCK_P + tl.arange(0, BLOCK_P)
        q = tl.arange(0, BLOCK_Q)
        ch = (p % C)[:, None]
    else:
        group = pid // n_q
        p = tl.arange(0, BLOCK_P)
        q = (pid % n_q) * BLOCK_Q + tl.arange(0, BLOCK_Q)
        ch = q[None, :]
    k = _load_param(k_ptr, ch, Q, K_PER_CHANNEL, CHANNEL_AXIS).to(tl.float32)
    lam = _clamped(
        _load_param(l_ptr, ch, Q, L_PER_CHANNEL, CHANNEL_AXIS).to(tl.float32),
        lambda_min)
    return group, p, q, k, 1.0 / lam, tl.log(lam)


@triton.jit
def eta_fwd_kernel(x_ptr, y_ptr, k_ptr, l_ptr, lambda_min, P, Q, C, n_q,
                   AGLU: tl.constexpr, K_PER_CHANNEL: tl.constexpr,
                   L_PER_CHANNEL: tl.constexpr, CHANNEL_AXIS: tl.constexpr,
                   BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr,
                   WIDE: tl.constexpr):
    """``y = eta(x)`` (APA) or ``x * eta(x)`` (AGLU), one tile a program."""
    pid = tl.program_id(0)
    if CHANNEL_AXIS == 0:
        n_groups = n_q
    else:
        n_groups = 1
    group, p, q, k, inv_l, ln_l = _params(pid, P, Q, C, n_q, n_groups, k_ptr,
                                          l_ptr, lambda_min, K_PER_CHANNEL,
                                          L_PER_CHANNEL, CHANNEL_AXIS, BLOCK_P,
                                          BLOCK_Q, WIDE)
    if CHANNEL_AXIS == 0:
        q = group * BLOCK_Q + q
    else:
        p = group * BLOCK_P + p
    mask = (p < P)[:, None] & (q < Q)[None, :]
    offs = p[:, None] * Q + q[None, :]
    z = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    a = ln_l - k * z
    e = tl.exp(-tl.abs(a))
    sp = tl.maximum(a, 0.0) + _log1p_from_s(e / (2.0 + e))
    y = tl.exp(-sp * inv_l)
    if AGLU:
        y = z * y
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _input(x_ptr, other_ptr, scale_ptr, shift_ptr, oscale_ptr, offs, mask,
           rows, cols, P, Q, C, rows_per_sample, CHANNEL_AXIS: tl.constexpr,
           HAS_SCALE: tl.constexpr, SCALE_PER_SAMPLE: tl.constexpr,
           HAS_SHIFT: tl.constexpr, HAS_OTHER: tl.constexpr,
           HAS_OTHER_SCALE: tl.constexpr):
    """The input tile in float32: ``x`` itself, or ``z = x * scale + shift
    + other * other_scale`` rebuilt from its sources (terms optional;
    ``scale`` per channel or per (sample, channel), the others per channel;
    sample of row ``p``: ``p // rows_per_sample``; any float dtype, taken
    in float32)."""
    z = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    # coefficients are loaded per row (channels first) or column vector
    if CHANNEL_AXIS == 0:
        ch = (rows % C)[:, None]
        ch_mask = (rows < P)[:, None]
    else:
        ch = cols[None, :]
        ch_mask = (cols < Q)[None, :]
    if HAS_SCALE:
        if SCALE_PER_SAMPLE:
            at = (rows // rows_per_sample)[:, None] * C + ch
            if CHANNEL_AXIS == 0:  # one value per row
                at_mask = ch_mask
            else:
                at_mask = mask
            z = z * tl.load(scale_ptr + at, mask=at_mask,
                            other=0.0).to(tl.float32)
        else:
            z = z * tl.load(scale_ptr + ch, mask=ch_mask,
                            other=0.0).to(tl.float32)
    if HAS_SHIFT:
        z = z + tl.load(shift_ptr + ch, mask=ch_mask, other=0.0).to(tl.float32)
    if HAS_OTHER:
        other = tl.load(other_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        if HAS_OTHER_SCALE:
            other = other * tl.load(
                oscale_ptr + ch, mask=ch_mask, other=0.0).to(tl.float32)
        z = z + other
    return z


@triton.jit
def eta_bwd_kernel(x_ptr, go_ptr, gx_ptr, k_ptr, l_ptr, lambda_min, part_ptr,
                   other_ptr, scale_ptr, shift_ptr, oscale_ptr, P, Q, C, n_q,
                   n_groups,
                   iters, part_stride, rows_per_sample, AGLU: tl.constexpr,
                   K_PER_CHANNEL: tl.constexpr, L_PER_CHANNEL: tl.constexpr,
                   CHANNEL_AXIS: tl.constexpr, NEED_X: tl.constexpr,
                   NEED_PARAMS: tl.constexpr, HAS_SCALE: tl.constexpr,
                   SCALE_PER_SAMPLE: tl.constexpr, HAS_SHIFT: tl.constexpr,
                   HAS_OTHER: tl.constexpr, HAS_OTHER_SCALE: tl.constexpr,
                   BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr,
                   WIDE: tl.constexpr):
    """grad_x and partial sums of the parameter gradients, one pass.

    A program walks ``iters`` tiles along its rows (``CHANNEL_AXIS=0``) or
    columns (``CHANNEL_AXIS=1``), so each of its channels stays fixed, and
    accumulates (still to be scaled by ``1/l`` and ``1/l^2``)::

        APA:  sk = sum go eta g z,      sl = sum go eta (softplus(a) - g)
        AGLU: sk = sum go eta g z^2,    sl = sum go eta z (softplus(a) - g)

    The sums land in ``part[s, c]`` (``S x C``, row-major; the lambda sums
    ``part_stride`` further on), one row ``s`` per (sample, group);
    :func:`eta_param_grad_kernel` adds the rows up. With any ``HAS_*``
    flag the input is rebuilt from ``x_ptr`` and the sources (see
    :func:`_input`) instead of read.
    """
    pid = tl.program_id(0)
    group, p, q, k, inv_l, ln_l = _params(pid, P, Q, C, n_q, n_groups, k_ptr,
                                          l_ptr, lambda_min, K_PER_CHANNEL,
                                          L_PER_CHANNEL, CHANNEL_AXIS, BLOCK_P,
                                          BLOCK_Q, WIDE)
    k_inv_l = k * inv_l
    p0 = p
    q0 = q
    acc_k = tl.zeros((BLOCK_P, BLOCK_Q), dtype=tl.float32)
    acc_l = tl.zeros((BLOCK_P, BLOCK_Q), dtype=tl.float32)
    for i in range(iters):
        # fresh names: p / q re-bound here would be loop-carried and change
        # type (int32 -> int64) in WIDE kernels
        if CHANNEL_AXIS == 0:
            rows = p0
            cols = (group * iters + i) * BLOCK_Q + q0
        else:
            rows = (group * iters + i) * BLOCK_P + p0
            cols = q0
        mask = (rows < P)[:, None] & (cols < Q)[None, :]
        offs = rows[:, None] * Q + cols[None, :]
        z = _input(x_ptr, other_ptr, scale_ptr, shift_ptr, oscale_ptr, offs,
                   mask, rows, cols, P, Q, C, rows_per_sample, CHANNEL_AXIS,
                   HAS_SCALE, SCALE_PER_SAMPLE, HAS_SHIFT, HAS_OTHER,
                   HAS_OTHER_SCALE)
        go = tl.load(go_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        a = ln_l - k * z
        e = tl.exp(-tl.abs(a))
        r = 1.0 / ((1.0 + e) * (2.0 + e))
        sp = tl.maximum(a, 0.0) + _log1p_from_s(e * (1.0 + e) * r)
        g = tl.where(a >= 0.0, 1.0, e) * (2.0 + e) * r
        w = go * tl.exp(-sp * inv_l)  # masked lanes: go = 0
        if AGLU:
            wz = w * z
            wzg = wz * g
            gx = w + k_inv_l * wzg
            if NEED_PARAMS:
                acc_k += wzg * z
                acc_l += wz * _softplus_minus_sigmoid(a, e, sp, g)
        else:
            wg = w * g
            gx = wg * k_inv_l
            if NEED_PARAMS:
                acc_k += wg * z
                acc_l += w * _softplus_minus_sigmoid(a, e, sp, g)
        if NEED_X:
            tl.store(gx_ptr + offs, gx.to(gx_ptr.dtype.element_ty), mask=mask)
    if NEED_PARAMS:
        if CHANNEL_AXIS == 0:
            p = p0  # after the loop: not loop-carried
            at = ((p // C) * n_groups + group) * C + p % C
            tl.store(part_ptr + at, tl.sum(acc_k, axis=1), mask=p < P)
            tl.store(
                part_ptr + part_stride + at, tl.sum(acc_l, axis=1), mask=p < P)
        else:
            q = q0
            at = group * Q + q
            tl.store(part_ptr + at, tl.sum(acc_k, axis=0), mask=q < Q)
            tl.store(
                part_ptr + part_stride + at, tl.sum(acc_l, axis=0), mask=q < Q)


@triton.jit
def eta_param_grad_kernel(part_ptr, l_ptr, k_out_ptr, l_out_ptr, lambda_min,
                          S, C, part_stride, n_programs, iters,
                          K_PER_CHANNEL: tl.constexpr,
                          L_PER_CHANNEL: tl.constexpr, NEED_K: tl.constexpr,
                          NEED_L: tl.constexpr, BLOCK_S: tl.constexpr,
                          BLOCK_C: tl.constexpr):
    """The raw parameters' gradients from the partial sums (fixed order:
    deterministic): per channel ``gk_c = sum_s part[s, c] / l_c`` and
    ``gl_c = sum_s part[S + s, c] / l_c^2`` (``l`` clamped); a per-channel
    parameter gets them as they are, a shared one their sum over the
    channels (then ``n_programs`` is 1 and the program walks every
    channel block: ``iters`` blocks a program); lambda's is zero where
    ``lambda <= lambda_min``. Written in each output's dtype."""
    pid = tl.program_id(0)
    sum_k = 0.0
    sum_l = 0.0
    # the trip count is an argument: Triton 3.6's interpreter cannot take
    # a loop bound computed from the program id
    for i in range(iters):
        c = (pid + i * n_programs) * BLOCK_C + tl.arange(0, BLOCK_C)
        c_mask = c < C
        acc_k = tl.zeros((BLOCK_S, BLOCK_C), dtype=tl.float32)
        acc_l = tl.zeros((BLOCK_S, BLOCK_C), dtype=tl.float32)
        for s0 in range(0, S, BLOCK_S):
            s = s0 + tl.arange(0, BLOCK_S)
            mask = (s < S)[:, None] & c_mask[None, :]
            offs = s[:, None] * C + c[None, :]
            acc_k += tl.load(part_ptr + offs, mask=mask, other=0.0)
            acc_l += tl.load(
                part_ptr + part_stride + offs, mask=mask, other=0.0)
        if L_PER_CHANNEL:
            raw = tl.load(l_ptr + c, mask=c_mask, other=1.0).to(tl.float32)
        else:
            raw = tl.load(l_ptr).to(tl.float32)
        inv_l = 1.0 / _clamped(raw, lambda_min)
        grad_k = tl.sum(acc_k, axis=0) * inv_l  # masked channels: 0
        grad_l = tl.sum(acc_l, axis=0) * inv_l * inv_l
        if NEED_K:
            if K_PER_CHANNEL:
                tl.store(
                    k_out_ptr + c,
                    grad_k.to(k_out_ptr.dtype.element_ty),
                    mask=c_mask)
            else:
                sum_k += tl.sum(grad_k, axis=0)
        if NEED_L:
            if L_PER_CHANNEL:
                grad_l = tl.where(raw > lambda_min, grad_l, 0.0)
                tl.store(
                    l_out_ptr + c,
                    grad_l.to(l_out_ptr.dtype.element_ty),
                    mask=c_mask)
            else:
                sum_l += tl.sum(grad_l, axis=0)
    if NEED_K:
        if not K_PER_CHANNEL:
            tl.store(k_out_ptr, sum_k.to(k_out_ptr.dtype.element_ty))
    if NEED_L:
        if not L_PER_CHANNEL:
            raw_l = tl.load(l_ptr).to(tl.float32)
            sum_l = tl.where(raw_l > lambda_min, sum_l, 0.0)
            tl.store(l_out_ptr, sum_l.to(l_out_ptr.dtype.element_ty))
