"""Launchers of the fused Triton APA / AGLU kernels.

Called by :mod:`mmact.ops.apa` when its dispatch table
(:func:`mmact.ops.apa.dispatch.implementation`) picks ``'triton'``;
parameter shapes are validated there. Any dense layout (NCHW,
``channels_last``, NLC, ...) is processed in storage order, so no copy is
made; other strides are made contiguous first. Backward is two launches:
grad_x with per-program partial sums of the parameter gradients, then a
fixed-order sum of the partials scaled by ``1/l`` and ``1/l^2``
(deterministic, no atomics). The memory-lean backward
(:func:`eta_backward_rebuilt`) is the same kernel loading the sources of
the input instead of the input: a BN affine, attention weights, a residual
(:func:`mmact.ops.apa.rebuilt_backward`). Host work per call is kept to a
few tensor allocations (layouts are planned once per shape and cached): on
a fast GPU small activations are bound by launch overhead, not by the
kernels. Each launcher is the profiler range ``mmact::triton_<launcher>``
(:mod:`mmact.ops.profiling`).
"""
import functools
from typing import NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..profiling import labelled

__all__ = [
    'eta_forward', 'eta_backward', 'eta_backward_rebuilt', 'BACKWARD_PROGRAMS'
]

# Elements per tile: 16 (forward) / 8 (backward) per thread at 4 warps.
_FWD_TILE = 2048
_BWD_TILE = 1024
#: Backward programs to aim for (a few per SM); each walks several tiles.
#: Read at every call (a test lowers it so that each program walks several
#: tiles of a small tensor).
BACKWARD_PROGRAMS = 2048


class _Plan(NamedTuple):
    """Storage of ``x`` seen as a row-major ``(P, Q)`` matrix, and tiles."""
    P: int
    Q: int
    C: int
    axis: int  # channel follows rows (0) or columns (1)
    block_p: int
    block_q: int
    n_p: int
    n_q: int
    wide: bool


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


def _is_dense(shape: Tuple[int, ...], stride: Tuple[int, ...]) -> bool:
    """Whether the elements fill their storage span without gaps or
    overlaps (in some dimension order)."""
    expected = 1
    for st, size in sorted((st, s) for s, st in zip(shape, stride) if s > 1):
        if st != expected:
            return False
        expected *= size
    return True


@functools.lru_cache(maxsize=1024)
def _plan(shape: Tuple[int, ...], stride: Tuple[int, ...], per_channel: bool,
          channel_dim: int, tile: int) -> Optional[_Plan]:
    """Tiling of a dense tensor; None when ``stride`` is not dense."""
    if not _is_dense(shape, stride):
        return None
    n = 1
    for s in shape:
        n *= s
    dim = channel_dim % len(shape) if per_channel else 0
    C = shape[dim] if per_channel else 1
    if C == 1:  # shared parameters: one row holding everything
        P, Q, axis = 1, n, 0
        block_q, block_p = min(tile, _pow2_ceil(n)), 1
    else:
        inner = stride[dim]
        if inner == 1:  # channels last: a row holds one of each channel
            P, Q, axis = n // C, C, 1
            block_q = _block_q(Q, 1, tile)
        else:  # channels first: a row is (part of) one channel plane
            P, Q, axis = n // inner, inner, 0
            block_q = _block_q(Q, 16, tile)
        block_p = min(max(tile // block_q, 1), _pow2_ceil(P))
    n_p, n_q = _cdiv(P, block_p), _cdiv(Q, block_q)
    wide = (n_p * block_p) * Q >= 2**31
    return _Plan(P, Q, C, axis, block_p, block_q, n_p, n_q, wide)


def _planned(x: Tensor, kappa: Tensor, lam: Tensor, channel_dim: int,
             tile: int) -> Tuple[Tensor, _Plan]:
    per_channel = kappa.numel() > 1 or lam.numel() > 1
    plan = _plan(tuple(x.shape), x.stride(), per_channel, channel_dim, tile)
    if plan is None:
        x = x.contiguous()
        plan = _plan(
            tuple(x.shape), x.stride(), per_channel, channel_dim, tile)
    return x, plan


def _param(p: Tensor, x: Tensor) -> Tensor:
    if (p.dtype == torch.float32 and p.device == x.device
            and p.is_contiguous()):
        return p
    return p.detach().to(device=x.device, dtype=torch.float32).contiguous()


def _kernels():
    from . import triton_kernels as apa_kernels  # imports triton: only on this path
    return apa_kernels


@labelled('mmact::triton_eta_forward')
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
    x, plan = _planned(x, kappa, lam, channel_dim, _FWD_TILE)
    y = torch.empty_like(x)
    if x.numel() == 0:
        return y
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


def _same_layout(a: Tensor, b: Tensor) -> bool:
    sa, sb = a.stride(), b.stride()
    return sa == sb or all(x == y
                           for x, y, size in zip(sa, sb, a.shape) if size > 1)


def _to_param(grad: Tensor, p: Tensor) -> Tensor:
    if p.numel() == 1 and grad.numel() > 1:  # shared, beside per-channel
        grad = grad.sum()
    if grad.shape != p.shape:
        grad = grad.view(p.shape)
    return grad if grad.dtype == p.dtype else grad.to(p.dtype)


@functools.lru_cache(maxsize=1024)
def _bwd_grid(plan: _Plan, aim: int) -> Tuple[int, int, int, int]:
    """(programs, groups, tiles walked per program, partial rows S) for
    about ``aim`` programs: a program walks tiles along the direction in
    which its channels stay."""
    if plan.axis == 0:
        walk, other = plan.n_q, plan.n_p
    else:
        walk, other = plan.n_p, plan.n_q
    iters = min(walk, max(1, walk * other // aim))
    groups = _cdiv(walk, iters)
    rows = (plan.P // plan.C) * groups if plan.axis == 0 else groups
    return other * groups, groups, iters, rows


class _Sources(NamedTuple):
    """How the backward kernel gets the input: ``x`` itself (all None), or
    rebuilt as ``x * scale + shift + other * other_scale``."""
    other: Optional[Tensor] = None
    scale: Optional[Tensor] = None  # C or N * C float32 values
    shift: Optional[Tensor] = None
    other_scale: Optional[Tensor] = None
    rows_per_sample: int = 1  # for a per-sample scale


def _launch_backward(name: str, x: Tensor, grad_out: Tensor, kappa: Tensor,
                     lam: Tensor, plan: _Plan, needs: Sequence[bool],
                     sources: _Sources, dtype: torch.dtype):
    """grad_x (the layout of ``x``, in ``dtype``) and the parameter
    gradients; ``grad_out`` (and ``sources.other``) already laid out as
    ``x``."""
    need_x, need_k, need_l = needs[:3]
    need_params = need_k or need_l
    grad_x = torch.empty_like(x, dtype=dtype) if need_x else None
    if x.numel() == 0:
        return (grad_x, torch.zeros_like(kappa) if need_k else None,
                torch.zeros_like(lam) if need_l else None)
    lam32 = _param(lam, x)
    programs, groups, iters, S = _bwd_grid(plan, BACKWARD_PROGRAMS)
    part = x.new_empty(
        2 * S * plan.C if need_params else 1, dtype=torch.float32)
    _kernels().eta_bwd_kernel[(programs, )](
        x,
        grad_out,
        grad_x if need_x else x,
        _param(kappa, x),
        lam32,
        part,
        *(x if t is None else t for t in sources[:4]),
        plan.P,
        plan.Q,
        plan.C,
        plan.n_q,
        groups,
        iters,
        S * plan.C,
        sources.rows_per_sample,
        AGLU=name == 'aglu',
        K_PER_CHANNEL=kappa.numel() > 1,
        L_PER_CHANNEL=lam.numel() > 1,
        CHANNEL_AXIS=plan.axis,
        NEED_X=need_x,
        NEED_PARAMS=need_params,
        HAS_SCALE=sources.scale is not None,
        SCALE_PER_SAMPLE=(sources.scale is not None
                          and sources.scale.numel() > plan.C),
        HAS_SHIFT=sources.shift is not None,
        HAS_OTHER=sources.other is not None,
        HAS_OTHER_SCALE=sources.other_scale is not None,
        BLOCK_P=plan.block_p,
        BLOCK_Q=plan.block_q,
        WIDE=plan.wide)
    if not need_params:
        return grad_x, None, None
    grads = part.new_empty(2, plan.C)
    block_c = min(_pow2_ceil(plan.C), 64)
    _kernels().eta_param_grad_kernel[(_cdiv(plan.C, block_c), )](
        part,
        lam32,
        grads,
        S,
        plan.C,
        S * plan.C,
        L_PER_CHANNEL=lam.numel() > 1,
        BLOCK_S=max(4096 // block_c, 1),
        BLOCK_C=block_c)
    grad_k, grad_l = grads.unbind(0)
    return (grad_x, _to_param(grad_k, kappa) if need_k else None,
            _to_param(grad_l, lam) if need_l else None)


@labelled('mmact::triton_eta_backward')
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
    x, plan = _planned(x, kappa, lam, channel_dim, _BWD_TILE)
    if not _same_layout(grad_out, x):
        grad_out = torch.empty_like(x).copy_(grad_out)
    return _launch_backward(name, x, grad_out, kappa, lam, plan, needs,
                            _Sources(), x.dtype)


def _coef(t: Optional[Tensor], src: Tensor) -> Optional[Tensor]:
    return None if t is None else _param(t.reshape(-1), src)


@labelled('mmact::triton_eta_backward_rebuilt')
def eta_backward_rebuilt(
    name: str, grad_out: Tensor, kappa: Tensor, lam: Tensor, src: Tensor,
    scale: Optional[Tensor], shift: Optional[Tensor], other: Optional[Tensor],
    other_scale: Optional[Tensor], needs: Sequence[bool]
) -> Optional[Tuple[Tensor, Optional[Tensor], Optional[Tensor]]]:
    """:func:`eta_backward` at ``z = src * scale + shift + other *
    other_scale``, rebuilt per element in the kernel (``z`` is never
    stored).

    Args:
        name (str): ``'apa'`` or ``'aglu'``.
        grad_out (Tensor): Gradient of the output, ``(N, C, ...)``.
        kappa, lam (Tensor): 1 or C values each (channels along dim 1),
            ``lam`` already clamped.
        src (Tensor): ``grad_out``'s shape; float32 / float16 / bfloat16.
        scale (Tensor, optional): C values (shaped ``(1, C, 1, ...)``) or
            one per (sample, channel) (``(N, C, 1, ...)``).
        shift, other_scale (Tensor, optional): C values each.
        other (Tensor, optional): ``grad_out``'s shape.
        needs (Sequence[bool]): Which of the three gradients to return.

    Returns:
        tuple | None: ``(grad_z, grad_kappa, grad_lambda)`` as for
        :func:`eta_backward` (``grad_z`` in ``grad_out``'s dtype), or None
        when the kernel does not cover the layout (a per-sample ``scale``
        on a tensor whose samples are not outermost in memory, or a single
        channel): rebuild ``z`` with torch then.
    """
    N, C = src.shape[:2]
    plan = _plan(tuple(src.shape), src.stride(), True, 1, _BWD_TILE)
    if plan is None:
        src = src.contiguous()
        plan = _plan(tuple(src.shape), src.stride(), True, 1, _BWD_TILE)
    per_sample = scale is not None and scale.numel() > C
    if per_sample and N > 1 and (plan.C == 1
                                 or src.stride(0) * N != src.numel()):
        return None
    if not _same_layout(grad_out, src):
        grad_out = torch.empty_like(src, dtype=grad_out.dtype).copy_(grad_out)
    if other is not None and not _same_layout(other, src):
        other = torch.empty_like(src, dtype=other.dtype).copy_(other)
    rows_per_sample = src.stride(0) // plan.Q if per_sample and N > 1 else 1
    sources = _Sources(other, _coef(scale, src), _coef(shift, src),
                       _coef(other_scale, src), rows_per_sample)
    return _launch_backward(name, src, grad_out, kappa, lam, plan, needs,
                            sources, grad_out.dtype)
