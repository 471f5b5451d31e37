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
(:func:`mmact.ops.apa.rebuilt_backward`).

The kernels take the raw parameters (float32, float16 or bfloat16, on the
input's device, contiguous; anything else is refused, naming the tensor),
clamp lambda themselves and write the raw parameters' gradients, so a call
runs no torch op but the allocations of its outputs (and of the partial
sums). Host work per call is a cache look-up: the layout, the grid and the
kernels' launches (:class:`~mmact.ops.triton_launch.Launch`, the cheapest
launch the installed Triton offers) are planned once per shape, strides,
dtypes and flags; on a fast GPU small activations are bound by launch
overhead, not by the kernels. Each launcher is the profiler range
``mmact::triton_<launcher>`` (:mod:`mmact.ops.profiling`).
"""
import functools
from typing import Any, Callable, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..backends import TRITON_DTYPES
from ..profiling import labelled
from ..triton_launch import Launch, aligned

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
# Entries of each launcher's cache (shapes x layouts x dtypes x flags). A
# key holds everything a launch is specialized on, the strides of the
# tensors copied to another layout included (a copy is aligned).
_CACHE_SIZE = 1024
_FORWARDS: dict = {}
_BACKWARDS: dict = {}


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


def _kernels():
    from . import triton_kernels as apa_kernels  # imports triton: only on this path
    return apa_kernels


def _check_params(x: Tensor, kappa: Tensor, lam: Tensor) -> None:
    """Refuse parameters the kernels cannot read where they are."""
    device = x.get_device()
    for p, what in ((kappa, 'kappa'), (lam, 'lambda')):
        if p.get_device() != device or not p.is_contiguous():
            raise ValueError(
                f'apa / aglu on the Triton kernels: {what} must be a '
                f'contiguous tensor on the input\'s device ({x.device}); got '
                f'one on {p.device} with strides {p.stride()}')


def _check_dtypes(**tensors: Optional[Tensor]) -> None:
    for what, t in tensors.items():
        if t is not None and t.dtype not in TRITON_DTYPES:
            raise TypeError(
                f'apa / aglu on the Triton kernels: {what} must be float32, '
                f'float16 or bfloat16, got {t.dtype}')


def _cache(cache: dict, key: tuple, build: Callable[[], Any]) -> Any:
    entry = build()
    if len(cache) >= _CACHE_SIZE:  # many shapes (multi-scale): start over
        cache.clear()
    cache[key] = entry
    return entry


class _Forward(NamedTuple):
    """A forward call's plan: the launch (None for an empty tensor), its
    integer arguments, and whether the input is copied first (not
    dense)."""
    launch: Optional[Launch]
    ints: Tuple[int, ...]
    copy: bool


def _forward_entry(name: str, x: Tensor, kappa: Tensor, lam: Tensor,
                   channel_dim: int) -> _Forward:
    _check_dtypes(x=x, kappa=kappa, lam=lam)
    per_channel = kappa.numel() > 1 or lam.numel() > 1
    plan = _plan(tuple(x.shape), x.stride(), per_channel, channel_dim,
                 _FWD_TILE)
    copy = plan is None
    if copy:
        plan = _plan(
            tuple(x.shape), _contiguous_strides(x.shape), per_channel,
            channel_dim, _FWD_TILE)
    if x.numel() == 0:
        return _Forward(None, (), copy)
    launch = Launch(
        _kernels().eta_fwd_kernel, (plan.n_p * plan.n_q, ),
        dict(
            AGLU=name == 'aglu',
            K_PER_CHANNEL=kappa.numel() > 1,
            L_PER_CHANNEL=lam.numel() > 1,
            CHANNEL_AXIS=plan.axis,
            BLOCK_P=plan.block_p,
            BLOCK_Q=plan.block_q,
            WIDE=plan.wide))
    return _Forward(launch, (plan.P, plan.Q, plan.C, plan.n_q), copy)


def _contiguous_strides(shape: Sequence[int]) -> Tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


@labelled('mmact::triton_eta_forward')
def eta_forward(name: str, x: Tensor, kappa: Tensor, lam: Tensor,
                lambda_min: float, channel_dim: int) -> Tensor:
    """APA (``name='apa'``) or AGLU (``'aglu'``) of ``x``, in its dtype.

    Args:
        name (str): ``'apa'`` or ``'aglu'``.
        x (Tensor): float32 / float16 / bfloat16 input.
        kappa (Tensor): The raw ``kappa``: 1 or C values.
        lam (Tensor): The raw ``lambda``: 1 or C values (the kernel clamps
            it to ``lambda_min``).
        lambda_min (float): The floor of ``lam``.
        channel_dim (int): Axis of ``x`` the per-channel values follow.

    Returns:
        Tensor: The output, with the strides of ``x`` when ``x`` is dense
        (other strides: ``x`` is copied to a contiguous tensor first).

    Raises:
        TypeError: A tensor of another dtype than the kernels read.
        ValueError: A parameter on another device than ``x``, or not
            contiguous.
    """
    key = (name, x.shape, x.stride(), x.dtype, kappa.dtype, lam.dtype,
           kappa.numel() > 1, lam.numel() > 1, channel_dim, x.get_device(),
           aligned(x))
    entry = _FORWARDS.get(key)
    if entry is None:
        entry = _cache(
            _FORWARDS, key,
            lambda: _forward_entry(name, x, kappa, lam, channel_dim))
    _check_params(x, kappa, lam)
    if entry.copy:
        x = x.contiguous()
    y = torch.empty_like(x)
    if entry.launch is not None:
        entry.launch(x, y, kappa, lam, lambda_min, *entry.ints)
    return y


def _same_layout(a: Tensor, b: Tensor) -> bool:
    sa, sb = a.stride(), b.stride()
    return sa == sb or all(x == y
                           for x, y, size in zip(sa, sb, a.shape) if size > 1)


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
    scale: Optional[Tensor] = None  # C or N * C values
    shift: Optional[Tensor] = None
    other_scale: Optional[Tensor] = None
    rows_per_sample: int = 1  # for a per-sample scale


_NO_SOURCES = _Sources()


class _Backward(NamedTuple):
    """A backward call's plan: the two launches (None for an empty tensor;
    the second None where no parameter gradient is wanted), their integer
    arguments, and the partial sums' size."""
    grads: Optional[Launch]
    grads_ints: Tuple[int, ...]
    params: Optional[Launch]
    params_ints: Tuple[int, ...]
    part_size: int


def _backward_entry(name: str, x: Tensor, kappa: Tensor, lam: Tensor,
                    plan: _Plan, needs: Sequence[bool],
                    sources: _Sources) -> _Backward:
    need_x, need_k, need_l = needs[:3]
    need_params = need_k or need_l
    if x.numel() == 0:
        return _Backward(None, (), None, (), 0)
    k_per_channel, l_per_channel = kappa.numel() > 1, lam.numel() > 1
    programs, groups, iters, S = _bwd_grid(plan, BACKWARD_PROGRAMS)
    scale = sources.scale
    grads = Launch(
        _kernels().eta_bwd_kernel, (programs, ),
        dict(
            AGLU=name == 'aglu',
            K_PER_CHANNEL=k_per_channel,
            L_PER_CHANNEL=l_per_channel,
            CHANNEL_AXIS=plan.axis,
            NEED_X=need_x,
            NEED_PARAMS=need_params,
            HAS_SCALE=scale is not None,
            SCALE_PER_SAMPLE=scale is not None and scale.numel() > plan.C,
            HAS_SHIFT=sources.shift is not None,
            HAS_OTHER=sources.other is not None,
            HAS_OTHER_SCALE=sources.other_scale is not None,
            BLOCK_P=plan.block_p,
            BLOCK_Q=plan.block_q,
            WIDE=plan.wide))
    grads_ints = (plan.P, plan.Q, plan.C, plan.n_q, groups, iters,
                  S * plan.C, sources.rows_per_sample)
    if not need_params:
        return _Backward(grads, grads_ints, None, (), 1)
    block_c = min(_pow2_ceil(plan.C), 64)
    # a shared parameter's gradient sums every channel: one program
    summed = (need_k and not k_per_channel) or (need_l and not l_per_channel)
    n_programs = 1 if summed else _cdiv(plan.C, block_c)
    params = Launch(
        _kernels().eta_param_grad_kernel, (n_programs, ),
        dict(
            K_PER_CHANNEL=k_per_channel,
            L_PER_CHANNEL=l_per_channel,
            NEED_K=need_k,
            NEED_L=need_l,
            BLOCK_S=max(4096 // block_c, 1),
            BLOCK_C=block_c))
    iters = _cdiv(_cdiv(plan.C, block_c), n_programs)
    return _Backward(grads, grads_ints, params,
                     (S, plan.C, S * plan.C, n_programs, iters),
                     2 * S * plan.C)


def _launch_backward(entry: _Backward, x: Tensor, grad_out: Tensor,
                     kappa: Tensor, lam: Tensor, lambda_min: float,
                     needs: Sequence[bool], sources: _Sources,
                     dtype: torch.dtype):
    """grad_x (the layout of ``x``, in ``dtype``) and the raw parameters'
    gradients (their shape and dtype); ``grad_out`` (and
    ``sources.other``) already laid out as ``x``. Allocations only."""
    need_x, need_k, need_l = needs[:3]
    grad_x = torch.empty_like(x, dtype=dtype) if need_x else None
    grad_k = torch.empty_like(kappa) if need_k else None
    grad_l = torch.empty_like(lam) if need_l else None
    if entry.grads is None:  # empty input: the sums are zero
        return (grad_x, None if grad_k is None else grad_k.zero_(),
                None if grad_l is None else grad_l.zero_())
    part = torch.empty(
        entry.part_size, dtype=torch.float32, device=x.device)
    entry.grads(x, grad_out, x if grad_x is None else grad_x, kappa, lam,
                lambda_min, part,
                *(x if t is None else t for t in sources[:4]),
                *entry.grads_ints)
    if entry.params is not None:
        entry.params(part, lam, part if grad_k is None else grad_k,
                     part if grad_l is None else grad_l, lambda_min,
                     *entry.params_ints)
    return grad_x, grad_k, grad_l


@labelled('mmact::triton_eta_backward')
def eta_backward(
    name: str, x: Tensor, grad_out: Tensor, kappa: Tensor, lam: Tensor,
    lambda_min: float, channel_dim: int, needs: Sequence[bool]
) -> Tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
    """Gradients of :func:`eta_forward` w.r.t. ``x`` and the raw ``kappa``
    and ``lam``.

    Args:
        name, x, kappa, lam, lambda_min, channel_dim: As for
            :func:`eta_forward`.
        grad_out (Tensor): Gradient of the output (copied to the layout of
            ``x`` first where it has another).
        needs (Sequence[bool]): Which of the three gradients to return.

    Returns:
        tuple: ``(grad_x, grad_kappa, grad_lambda)``, None where not needed;
        ``grad_x`` in the dtype of ``x``, the others in their parameter's
        shape and dtype (the clamp's chain rule applied).
    """
    needs = tuple(needs[:3])
    key = (name, x.shape, x.stride(), x.dtype, grad_out.dtype, kappa.dtype,
           lam.dtype, kappa.numel() > 1, lam.numel() > 1, channel_dim,
           x.get_device(), aligned(x), grad_out.stride(), aligned(grad_out),
           needs, BACKWARD_PROGRAMS)
    entry = _BACKWARDS.get(key)
    if entry is None:
        entry = _cache(_BACKWARDS, key,
                       lambda: _plain_backward_entry(name, x, grad_out, kappa,
                                                     lam, channel_dim, needs))
    _check_params(x, kappa, lam)
    copy, entry = entry
    if copy:  # not dense: the kernels read a contiguous copy
        x = x.contiguous()
    if not _same_layout(grad_out, x):
        grad_out = torch.empty_like(x, dtype=grad_out.dtype).copy_(grad_out)
    return _launch_backward(entry, x, grad_out, kappa, lam, lambda_min, needs,
                            _NO_SOURCES, x.dtype)


def _plain_backward_entry(name, x, grad_out, kappa, lam, channel_dim, needs):
    """(whether ``x`` is copied to a contiguous tensor first, the
    entry)."""
    _check_dtypes(x=x, grad_out=grad_out, kappa=kappa, lam=lam)
    per_channel = kappa.numel() > 1 or lam.numel() > 1
    plan = _plan(tuple(x.shape), x.stride(), per_channel, channel_dim,
                 _BWD_TILE)
    copy = plan is None
    if copy:
        plan = _plan(
            tuple(x.shape), _contiguous_strides(x.shape), per_channel,
            channel_dim, _BWD_TILE)
    return copy, _backward_entry(name, x, kappa, lam, plan, needs,
                                 _NO_SOURCES)


@labelled('mmact::triton_eta_backward_rebuilt')
def eta_backward_rebuilt(
    name: str, grad_out: Tensor, kappa: Tensor, lam: Tensor,
    lambda_min: float, src: Tensor, scale: Optional[Tensor],
    shift: Optional[Tensor], other: Optional[Tensor],
    other_scale: Optional[Tensor], needs: Sequence[bool]
) -> Optional[Tuple[Tensor, Optional[Tensor], Optional[Tensor]]]:
    """:func:`eta_backward` at ``z = src * scale + shift + other *
    other_scale``, rebuilt per element in the kernel (``z`` is never
    stored).

    Args:
        name (str): ``'apa'`` or ``'aglu'``.
        grad_out (Tensor): Gradient of the output, ``(N, C, ...)``.
        kappa, lam (Tensor): The raw parameters, 1 or C values each
            (channels along dim 1).
        lambda_min (float): The floor of ``lam``.
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
        channel; a coefficient that is not contiguous): rebuild ``z`` with
        torch then.
    """
    needs = tuple(needs[:3])
    coefs = (scale, shift, other_scale)
    if not all(t is None or t.is_contiguous() for t in coefs):
        return None
    key = (name, src.shape, src.stride(), src.dtype, grad_out.dtype,
           kappa.dtype, lam.dtype, kappa.numel() > 1, lam.numel() > 1,
           src.get_device(), aligned(src), grad_out.stride(),
           aligned(grad_out), needs, BACKWARD_PROGRAMS,
           *(None if t is None else (t.numel(), t.dtype, aligned(t))
             for t in coefs),
           None if other is None else
           (other.dtype, other.stride(), aligned(other)))
    entry = _BACKWARDS.get(key)
    if entry is None:
        entry = _cache(_BACKWARDS, key,
                       lambda: _rebuilt_entry(name, grad_out, kappa, lam, src,
                                              scale, shift, other,
                                              other_scale, needs))
    if entry is None:
        return None
    _check_params(src, kappa, lam)
    copy, entry = entry
    if copy:  # not dense: the kernels read a contiguous copy
        src = src.contiguous()
    if not _same_layout(grad_out, src):
        grad_out = torch.empty_like(src, dtype=grad_out.dtype).copy_(grad_out)
    if other is not None and not _same_layout(other, src):
        other = torch.empty_like(src, dtype=other.dtype).copy_(other)
    return _launch_backward(
        entry, src, grad_out, kappa, lam, lambda_min, needs,
        _Sources(other, scale, shift, other_scale), grad_out.dtype)


def _rebuilt_entry(name, grad_out, kappa, lam, src, scale, shift, other,
                   other_scale, needs):
    """(whether ``src`` is copied to a contiguous tensor first, the entry),
    or None where the kernel does not cover the layout."""
    _check_dtypes(
        src=src,
        grad_out=grad_out,
        kappa=kappa,
        lam=lam,
        scale=scale,
        shift=shift,
        other=other,
        other_scale=other_scale)
    device = src.get_device()
    for what, t in (('scale', scale), ('shift', shift), ('other', other),
                    ('other_scale', other_scale)):
        if t is not None and t.get_device() != device:
            raise ValueError(
                f'apa / aglu rebuilt backward on the Triton kernels: {what} '
                f'is on {t.device}, the sources on {src.device}')
    N, C = src.shape[:2]
    plan = _plan(tuple(src.shape), src.stride(), True, 1, _BWD_TILE)
    copy = plan is None
    strides = src.stride()
    if copy:
        strides = _contiguous_strides(src.shape)
        plan = _plan(tuple(src.shape), strides, True, 1, _BWD_TILE)
    per_sample = scale is not None and scale.numel() > C
    numel = src.numel()
    if per_sample and N > 1 and (plan.C == 1 or strides[0] * N != numel):
        return None
    rows_per_sample = strides[0] // plan.Q if per_sample and N > 1 else 1
    sources = _Sources(other, scale, shift, other_scale, rows_per_sample)
    return copy, _backward_entry(name, src, kappa, lam, plan, needs, sources)
