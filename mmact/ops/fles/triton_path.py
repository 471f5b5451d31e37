"""FleS on the Triton kernels (tiles or a global window).

Called by :func:`mmact.ops.fles.fles_fused` when its table
(:func:`.dispatch.implementation`: the Triton settings cover the tensor and
:func:`supported` holds) picks it;
other configurations (overlapping windows, the softplus and quasi-linear
indicators) keep the torch path. Four passes over the pixels per training
step, two of them in backward (see :mod:`.triton_kernels`); the scale MLP on
the window grid runs in torch (the ``fles.mlp`` profiler range) and is
re-run in backward, so only ``x`` is saved, in its own dtype. Indicators and
scales are float32 whatever the input dtype. Between the passes no torch op
runs but the MLP and the allocations of the outputs; the passes' launches
are planned once per input shape, dtype and configuration
(:class:`~mmact.ops.triton_launch.Launch`). Where no gradient is wanted no
autograd node is recorded. The forward and the backward are the profiler
ranges ``mmact::triton_fles`` and ``mmact::triton_fles_backward``
(:mod:`mmact.ops.profiling`).
"""
import functools
from typing import NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..profiling import label, labelled
from ..second_derivative import differentiable_once
from ..triton_launch import Launch, aligned
from .gates import GATES
from .geometry import WindowGeometry
from .scales import ScaleFn, scales_vjp

__all__ = ['supported', 'fles_triton']

#: gate -> (kernel gate code, c), from the gate table.
_GATES = {name: (gate.kernel, gate.c) for name, gate in GATES.items()}
_MODES = ('positive', 'mean')
# Elements of one tile of rows x columns.
_TILE = 2048


def supported(geom: WindowGeometry, gate: str, mode: str) -> bool:
    """Whether the kernels cover this window grid, gate and indicator."""
    return not geom.overlapping and gate in _GATES and mode in _MODES


class _Bands(NamedTuple):
    """Programs: one band of tile rows x one block of whole windows."""
    args: Tuple[int, ...]  # H, W, kh, kw, nh, nw, n_cb, CW
    wpb: int
    programs_per_plane: int
    block_r: int
    block_w: int
    block_nw: int


def _pow2_ceil(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


@functools.lru_cache(maxsize=256)
def _bands(geom: WindowGeometry) -> _Bands:
    kh, kw = geom.window
    nh, nw = geom.grid
    wpb = max(1, min(nw, 256 // kw))  # windows per column block
    cw = kw * wpb
    n_cb = -(-nw // wpb)
    block_w = _pow2_ceil(min(cw, geom.width))
    block_r = max(1, min(_pow2_ceil(kh), _TILE // block_w))
    return _Bands((geom.height, geom.width, kh, kw, nh, nw, n_cb, cw), wpb,
                  nh * n_cb, block_r, block_w, _pow2_ceil(wpb))


def _kernels():
    from . import triton_kernels as fles_kernels  # imports triton: only on this path
    return fles_kernels


class _Launches(NamedTuple):
    """The four passes of one input shape, dtype and configuration."""
    stats: Launch
    apply: Launch
    gate_sums: Launch
    grad: Launch


def _launches(geom: WindowGeometry, gate: str, mode: str,
              planes: int) -> _Launches:
    bands = _bands(geom)
    grid = (planes * bands.programs_per_plane, )
    kernels = _kernels()
    code = _GATES[gate][0]
    blocks = dict(BLOCK_R=bands.block_r, BLOCK_W=bands.block_w)
    sums = dict(blocks, BLOCK_NW=bands.block_nw)
    return _Launches(
        Launch(kernels.fles_stats_kernel, grid,
               dict(sums, POSITIVE=mode == 'positive')),
        Launch(kernels.fles_apply_kernel, grid, dict(blocks, GATE=code)),
        Launch(kernels.fles_gate_sums_kernel, grid, dict(sums, GATE=code)),
        Launch(kernels.fles_grad_kernel, grid,
               dict(blocks, GATE=code, POSITIVE=mode == 'positive')))


# Launches per (input shape, dtypes, device, alignment, window grid, gate,
# indicator): everything the kernels are specialized on.
_CACHE_SIZE = 256
_LAUNCHES: dict = {}


def _planned(x: Tensor, grad: Optional[Tensor], geom: WindowGeometry,
             gate: str, mode: str) -> _Launches:
    key = (x.shape, x.dtype, x.get_device(), aligned(x),
           None if grad is None else (grad.dtype, aligned(grad)), geom, gate,
           mode)
    launches = _LAUNCHES.get(key)
    if launches is None:
        if len(_LAUNCHES) >= _CACHE_SIZE:
            _LAUNCHES.clear()
        n, c = x.shape[:2]
        launches = _LAUNCHES[key] = _launches(geom, gate, mode, n * c)
    return launches


def _scales(scale_fn: ScaleFn, ind: Tensor, params: Sequence[Tensor],
            vjp: bool = False):
    """``(k_ve, k_ho)`` (and with ``vjp`` the backward of the scales) as
    the kernels read them: contiguous float32 ``(N, C, nh, nw)`` (the MLP
    layouts of :mod:`.scales` give them so; another scale function's are
    converted, as part of it)."""
    with label('fles.mlp'):
        dtype = params[0].dtype if params else ind.dtype
        ind = ind if ind.dtype is dtype else ind.to(dtype)
        if vjp:
            k_ve, k_ho, backward = scales_vjp(scale_fn, ind, params)
        else:
            (k_ve, k_ho), backward = scale_fn(ind, *params), None
        return _f32(k_ve), _f32(k_ho), backward


def _f32(t: Tensor) -> Tensor:
    if t.dtype is torch.float32 and t.is_contiguous():
        return t  # the kernels read the data: no detach
    return t.detach().to(torch.float32).contiguous()


def _forward(x: Tensor, geom: WindowGeometry, gate: str, mode: str,
             scale_fn: ScaleFn, params: Sequence[Tensor]):
    """``(y, ind, count)``: the output and what backward needs."""
    n, c = x.shape[:2]
    bands = _bands(geom)
    launches = _planned(x, None, geom, gate, mode)
    ind = torch.empty((n, c) + geom.grid, dtype=torch.float32,
                      device=x.device)
    count = torch.empty_like(ind)
    launches.stats(x, ind, count, *bands.args, bands.wpb)
    k_ve, k_ho, _ = _scales(scale_fn, ind, params)
    y = torch.empty_like(x)
    launches.apply(x, y, k_ve, k_ho, _GATES[gate][1], *bands.args)
    return y, ind, count


class _FleSTriton(torch.autograd.Function):
    """FleS with Triton pixel passes; saves ``x``, the indicator grid and
    its divisors, and the parameters."""

    @staticmethod
    def forward(ctx, x: Tensor, geom: WindowGeometry, gate: str, mode: str,
                scale_fn: ScaleFn, *params: Tensor) -> Tensor:
        y, ind, count = _forward(x, geom, gate, mode, scale_fn, params)
        ctx.geom, ctx.gate, ctx.mode, ctx.scale_fn = geom, gate, mode, scale_fn
        ctx.op = 'fles_fused'
        ctx.save_for_backward(x, ind, count, *params)
        return y

    @staticmethod
    @labelled('mmact::triton_fles_backward')
    @differentiable_once
    def backward(ctx, grad_out: Tensor):
        x, ind, count, *params = ctx.saved_tensors
        geom, cst = ctx.geom, _GATES[ctx.gate][1]
        if not grad_out.is_contiguous():
            grad_out = grad_out.contiguous()
        bands = _bands(geom)
        launches = _planned(x, grad_out, geom, ctx.gate, ctx.mode)
        kv, ko, scales_backward = _scales(ctx.scale_fn, ind, params, True)
        s_ve = torch.empty_like(ind)
        g_ho = torch.empty_like(ind)
        launches.gate_sums(x, grad_out, kv, ko, s_ve, g_ho, cst, *bands.args,
                           bands.wpb)
        with label('fles.mlp'):
            g_ind, *param_grads = scales_backward(s_ve, g_ho)
            g_ind = _f32(g_ind)
        grad_x = torch.empty_like(x)
        launches.grad(x, grad_out, grad_x, kv, ko, g_ind, count, cst,
                      *bands.args)
        return (grad_x, None, None, None, None, *param_grads)


@labelled('mmact::triton_fles')
def fles_triton(x: Tensor, geom: WindowGeometry, params: Sequence[Tensor],
                gate: str, mode: str, scale_fn: ScaleFn) -> Tensor:
    """FleS of a contiguous ``(N, C, H, W)`` map on the Triton kernels.

    Args:
        x (Tensor): float32 / float16 / bfloat16 input (computed in
            float32, returned and saved for backward in its dtype).
        geom (WindowGeometry): Tiles or one global window.
        params (Sequence[Tensor]): Passed to ``scale_fn(ind, *params)``.
        gate (str): A gate of :data:`~mmact.ops.fles.FLES_GATES`.
        mode (str): ``'positive'`` or ``'mean'``.
        scale_fn (ScaleFn): Maps indicators to ``(k_ve, k_ho)``.

    Returns:
        Tensor: ``k_ve rho(k_ho x) x`` in the dtype of ``x``.
    """
    if torch.is_grad_enabled() and (x.requires_grad or any(
            p.requires_grad for p in params)):
        return _FleSTriton.apply(x, geom, gate, mode, scale_fn, *params)
    return _forward(x, geom, gate, mode, scale_fn, params)[0]
