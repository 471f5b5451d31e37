"""Triton kernels of APA / AGLU (imported only on the Triton path).

The input is seen as a row-major ``(P, Q)`` matrix over its storage. A
per-channel parameter follows the rows (``CHANNEL_AXIS=0``: channel
``p % C``; channels-first data, ``Q`` = elements of one channel plane) or
the columns (``CHANNEL_AXIS=1``: channel ``q``; channels-last data,
``Q = C``). Each program handles one ``BLOCK_P x BLOCK_Q`` tile, so the
parameter loads and the per-channel gradient sums are per row / column
vectors, never per-element divisions.

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

__all__ = ['eta_fwd_kernel', 'eta_bwd_kernel']


@triton.jit
def _log1p_from_s(s):
    s2 = s * s
    p = 0.34225806 * s2 + 0.39589497
    p = p * s2 + 0.66676003
    p = p * s2 + 1.99999964
    return s * p


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
def _tile(pid, P, Q, C, n_q, k_ptr, l_ptr, K_PER_CHANNEL: tl.constexpr,
          L_PER_CHANNEL: tl.constexpr, CHANNEL_AXIS: tl.constexpr,
          BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr, WIDE: tl.constexpr):
    """Offsets, mask and (k, 1/l, ln l) broadcastable over one tile."""
    if WIDE:
        pid = pid.to(tl.int64)
    pid_p = pid // n_q
    pid_q = pid % n_q
    p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    q = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)
    mask = (p < P)[:, None] & (q < Q)[None, :]
    offs = p[:, None] * Q + q[None, :]
    if CHANNEL_AXIS == 0:
        ch = (p % C)[:, None]
    else:
        ch = q[None, :]
    k = _load_param(k_ptr, ch, Q, K_PER_CHANNEL, CHANNEL_AXIS)
    lam = _load_param(l_ptr, ch, Q, L_PER_CHANNEL, CHANNEL_AXIS)
    return p, q, offs, mask, k, 1.0 / lam, tl.log(lam)


@triton.jit
def eta_fwd_kernel(x_ptr, y_ptr, k_ptr, l_ptr, P, Q, C, n_q,
                   AGLU: tl.constexpr, K_PER_CHANNEL: tl.constexpr,
                   L_PER_CHANNEL: tl.constexpr, CHANNEL_AXIS: tl.constexpr,
                   BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr,
                   WIDE: tl.constexpr):
    """``y = eta(x)`` (APA) or ``x * eta(x)`` (AGLU), one pass."""
    _, _, offs, mask, k, inv_l, ln_l = _tile(
        tl.program_id(0), P, Q, C, n_q, k_ptr, l_ptr, K_PER_CHANNEL,
        L_PER_CHANNEL, CHANNEL_AXIS, BLOCK_P, BLOCK_Q, WIDE)
    z = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    a = ln_l - k * z
    e = tl.exp(-tl.abs(a))
    sp = tl.maximum(a, 0.0) + _log1p_from_s(e / (2.0 + e))
    y = tl.exp(-sp * inv_l)
    if AGLU:
        y = z * y
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def eta_bwd_kernel(x_ptr, go_ptr, gx_ptr, k_ptr, l_ptr, sk_ptr, sl_ptr, P, Q,
                   C, n_q, AGLU: tl.constexpr, K_PER_CHANNEL: tl.constexpr,
                   L_PER_CHANNEL: tl.constexpr, CHANNEL_AXIS: tl.constexpr,
                   PER_CHANNEL_SUMS: tl.constexpr, NEED_X: tl.constexpr,
                   NEED_PARAMS: tl.constexpr, BLOCK_P: tl.constexpr,
                   BLOCK_Q: tl.constexpr, WIDE: tl.constexpr):
    """grad_x and per-tile partial sums of the parameter gradients, one pass.

    Sums (still to be scaled by ``1/l`` and ``1/l^2`` per channel)::

        APA:  sk = sum go eta g z,      sl = sum go eta (softplus(a) - g)
        AGLU: sk = sum go eta g z^2,    sl = sum go eta z (softplus(a) - g)

    They are written per tile row (``CHANNEL_AXIS=0``: ``sk[p, pid_q]``),
    per tile column (``CHANNEL_AXIS=1``: ``sk[pid_p, q]``) or per tile
    (scalar parameters: ``sk[pid]``); the launcher adds the partials up.
    """
    pid = tl.program_id(0)
    p, q, offs, mask, k, inv_l, ln_l = _tile(pid, P, Q, C, n_q, k_ptr, l_ptr,
                                             K_PER_CHANNEL, L_PER_CHANNEL,
                                             CHANNEL_AXIS, BLOCK_P, BLOCK_Q,
                                             WIDE)
    z = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
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
        gx = w + (k * inv_l) * wzg
        tk = wzg * z
        tlam = wz * (sp - g)
    else:
        wg = w * g
        gx = wg * (k * inv_l)
        tk = wg * z
        tlam = w * (sp - g)
    if NEED_X:
        tl.store(gx_ptr + offs, gx.to(gx_ptr.dtype.element_ty), mask=mask)
    if NEED_PARAMS:
        if not PER_CHANNEL_SUMS:
            tl.store(sk_ptr + pid, tl.sum(tl.sum(tk, axis=1), axis=0))
            tl.store(sl_ptr + pid, tl.sum(tl.sum(tlam, axis=1), axis=0))
        elif CHANNEL_AXIS == 0:
            at = p * n_q + pid % n_q
            tl.store(sk_ptr + at, tl.sum(tk, axis=1), mask=p < P)
            tl.store(sl_ptr + at, tl.sum(tlam, axis=1), mask=p < P)
        else:
            at = (pid // n_q) * Q + q
            tl.store(sk_ptr + at, tl.sum(tk, axis=0), mask=q < Q)
            tl.store(sl_ptr + at, tl.sum(tlam, axis=0), mask=q < Q)
