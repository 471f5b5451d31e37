"""Launchers of the fused Triton APA / AGLU kernels.

Called by :mod:`mmact.ops.apa` when :func:`~mmact.ops.triton.use_triton`
says so; parameter shapes are validated there. Any dense layout (NCHW,
``channels_last``, NLC, ...) is processed in storage order, so no copy is
made; other strides are made contiguous first. The backward kernel writes
per-tile partial sums of the parameter gradients, which are added up here
(in float64) and scaled by ``1/l`` and ``1/l^2`` per channel.
"""
from typing import NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

__all__ = ['eta_forward', 'eta_backward']

# Elements per program: 16 (forward) / 8 (backward) per thread at 4 warps.
_FWD_TILE = 2048
_BWD_TILE = 1024


class _Plan(NamedTuple):
    """Storage of ``x`` seen as a row-major ``(P, Q)`` matrix, and tiles."""
    P: int
    Q: int
    C: int
    axis: int  # channel follows rows (0) or columns (1)
    per_channel: bool
    block_p: int
    block_q: int
    n_p: int
    n_q: int
    wide: bool


def _is_dense(x: Tensor) -> bool:
    """Whether the elements of ``x`` fill its storage span without gaps or
    overlaps (in some dimension order)."""
    expected = 1
    for stride, size in sorted(
        (st, s) for s, st in zip(x.shape, x.stride()) if s > 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _pow2_ceil(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _block_q(Q: int, lowest: int, tile: int) -> int:
    """Largest power-of-two tile width that pads ``Q`` by at most 7 %, else
    the one that pads least (wide rows coalesce; padding is idle lanes)."""
    top = min(tile, 1024, _pow2_ceil(Q))
    sizes = [1 << i for i in range(top.bit_length()) if 1 << i >= lowest]
    sizes = sizes or [top]
    padded = {b: _cdiv(Q, b) * b for b in sizes}
    good = [b for b in sizes if padded[b] <= 1.07 * Q]
    if good:
        return max(good)
    least = min(padded.values())
    return max(b for b in sizes if padded[b] == least)


def _plan(x: Tensor, per_channel: bool, channel_dim: int, tile: int) -> _Plan:
    n = x.numel()
    C = x.shape[channel_dim % x.dim()] if per_channel else 1
    if C == 1:
        per_channel = False
    if not per_channel:
        P, Q, axis = 1, n, 0
        block_q, block_p = min(tile, _pow2_ceil(n)), 1
    else:
        inner = x.stride(channel_dim % x.dim())
        if inner == 1:  # channels last: a row holds one of each channel
            P, Q, axis = n // C, C, 1
            block_q = _block_q(Q, 1, tile)
        else:  # channels first: a row is (part of) one channel plane
            P, Q, axis = n // inner, inner, 0
            block_q = _block_q(Q, 16, tile)
        block_p = min(max(tile // block_q, 1), _pow2_ceil(P))
    n_p, n_q = _cdiv(P, block_p), _cdiv(Q, block_q)
    wide = (n_p * block_p) * Q >= 2**31
    return _Plan(P, Q, C, axis, per_channel, block_p, block_q, n_p, n_q, wide)


def _dense(x: Tensor) -> Tensor:
    return x if _is_dense(x) else x.contiguous()


def _param(p: Tensor, x: Tensor) -> Tensor:
    return p.detach().to(device=x.device, dtype=torch.float32).contiguous()


def _same_layout(a: Tensor, b: Tensor) -> bool:
    return all(sa == sb
               for sa, sb, size in zip(a.stride(), b.stride(), a.shape)
               if size > 1)


def _kernels():
    from . import apa_kernels  # imports triton: only on this path
    return apa_kernels


def eta_forward(name: str, x: Tensor, kappa: Tensor, lam: Tensor,
                channel_dim: int) -> Tensor:
    """APA (``name='apa'``) or AGLU (``'aglu'``) of ``x``, in its dtype.

    Args:
        name (str): ``'apa'`` or ``'aglu'``.
        x (Tensor): float32 / float16 / bfloat16 input.
        kappa (Tensor): 1 or C values.
        lam (Tensor): 1 or C values, already clamped.
        channel_dim (int): Axis of ``x`` the per-channel values follow.

    Returns:
        Tensor: The output, with the strides of ``x`` when ``x`` is dense.
    """
    x = _dense(x)
    y = torch.empty_like(x)
    if x.numel() == 0:
        return y
    plan = _plan(x,
                 kappa.numel() > 1 or lam.numel() > 1, channel_dim, _FWD_TILE)
    _kernels().eta_fwd_kernel[(plan.n_p * plan.n_q, )](
        x,
        y,
        _param(kappa, x),
        _param(lam, x),
        plan.P,
        plan.Q,
        plan.C,
        plan.n_q,
        AGLU=name == 'aglu',
        K_PER_CHANNEL=kappa.numel() > 1,
        L_PER_CHANNEL=lam.numel() > 1,
        CHANNEL_AXIS=plan.axis,
        BLOCK_P=plan.block_p,
        BLOCK_Q=plan.block_q,
        WIDE=plan.wide)
    return y


def _reduce(partial: Tensor, plan: _Plan) -> Tensor:
    """Per-channel (C,) float64 totals of the kernel's partial sums."""
    if not plan.per_channel:
        return partial.sum(dtype=torch.float64).reshape(1)
    if plan.axis == 0:
        return partial.view(plan.P // plan.C, plan.C, plan.n_q).sum(
            (0, 2), dtype=torch.float64)
    return partial.sum(0, dtype=torch.float64)


def _to_param(total: Tensor, p: Tensor) -> Tensor:
    if p.numel() == 1:
        total = total.sum()
    return total.reshape(p.shape).to(p.dtype)


def eta_backward(
    name: str, x: Tensor, grad_out: Tensor, kappa: Tensor, lam: Tensor,
    channel_dim: int, needs: Sequence[bool]
) -> Tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
    """Gradients of :func:`eta_forward` w.r.t. ``x``, ``kappa`` and ``lam``.

    Args:
        name, x, kappa, lam, channel_dim: As for :func:`eta_forward`.
        grad_out (Tensor): Gradient of the output.
        needs (Sequence[bool]): Which of the three gradients to return.

    Returns:
        tuple: ``(grad_x, grad_kappa, grad_lambda)``, None where not needed;
        ``grad_x`` in the dtype of ``x``, the others in their parameter's
        shape and dtype.
    """
    need_x, need_k, need_l = needs[:3]
    x = _dense(x)
    if not _same_layout(grad_out, x):
        grad_out = torch.empty_like(x).copy_(grad_out)
    per_k, per_l = kappa.numel() > 1, lam.numel() > 1
    plan = _plan(x, per_k or per_l, channel_dim, _BWD_TILE)
    grad_x = torch.empty_like(x) if need_x else None
    need_params = need_k or need_l
    if not plan.per_channel:
        shape = (plan.n_p * plan.n_q, )
    elif plan.axis == 0:
        shape = (plan.P, plan.n_q)
    else:
        shape = (plan.n_p, plan.Q)
    sums = x.new_empty(
        (2, ) + shape if need_params else (2, 1), dtype=torch.float32)
    if x.numel() == 0:
        zeros = [torch.zeros_like(p) for p in (kappa, lam)]
        return grad_x, zeros[0] if need_k else None, (
            zeros[1] if need_l else None)
    _kernels().eta_bwd_kernel[(plan.n_p * plan.n_q, )](
        x,
        grad_out,
        grad_x if need_x else x,
        _param(kappa, x),
        _param(lam, x),
        sums[0],
        sums[1],
        plan.P,
        plan.Q,
        plan.C,
        plan.n_q,
        AGLU=name == 'aglu',
        K_PER_CHANNEL=per_k,
        L_PER_CHANNEL=per_l,
        CHANNEL_AXIS=plan.axis,
        PER_CHANNEL_SUMS=plan.per_channel,
        NEED_X=need_x,
        NEED_PARAMS=need_params,
        BLOCK_P=plan.block_p,
        BLOCK_Q=plan.block_q,
        WIDE=plan.wide)
    grad_k = grad_l = None
    if need_params:
        l64 = lam.detach().to(torch.float64).reshape(-1).to(x.device)
        if need_k:
            grad_k = _to_param(_reduce(sums[0], plan) / l64, kappa)
        if need_l:
            grad_l = _to_param(_reduce(sums[1], plan) / (l64 * l64), lam)
    return grad_x, grad_k, grad_l
