"""FleS on the Triton kernels (tiles or a global window).

Called by :func:`mmact.ops.fles.fles_fused` when its table
(:func:`.dispatch.implementation`: the Triton settings cover the tensor and
:func:`supported` holds) picks it;
other configurations (overlapping windows, the softplus and quasi-linear
indicators) keep the torch path. Four passes over the pixels per training
step, two of them in backward (see :mod:`.triton_kernels`); the scale MLP on
the window grid runs in torch and is re-run in backward, so only ``x`` is
saved. Indicators and scales are float32 whatever the input dtype. The
forward and the backward are the profiler ranges ``mmact::triton_fles`` and
``mmact::triton_fles_backward`` (:mod:`mmact.ops.profiling`).
"""
import functools
from typing import NamedTuple, Sequence, Tuple

import torch
from torch import Tensor

from ..profiling import labelled
from ..second_derivative import differentiable_once
from .gates import GATES
from .geometry import WindowGeometry, window_area
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


@functools.lru_cache(maxsize=64)
def _area(geom: WindowGeometry, device: torch.device) -> Tensor:
    return window_area(geom, device, torch.float32)


def _stats(xf: Tensor, geom: WindowGeometry, mode: str,
           bands: _Bands) -> Tuple[Tensor, Tensor]:
    """Indicator ``(planes, nh, nw)`` and its divisor (float32)."""
    planes = xf.shape[0]
    sums = xf.new_empty(planes, *geom.grid, dtype=torch.float32)
    positive = mode == 'positive'
    count = torch.empty_like(sums) if positive else _area(geom, xf.device)
    _kernels().fles_stats_kernel[(planes * bands.programs_per_plane, )](
        xf,
        sums,
        count if positive else sums,
        *bands.args,
        bands.wpb,
        POSITIVE=positive,
        BLOCK_R=bands.block_r,
        BLOCK_W=bands.block_w,
        BLOCK_NW=bands.block_nw)
    if positive:
        count.clamp_(min=1.0)
    return sums.div_(count), count


def _scales(scale_fn: ScaleFn, ind: Tensor, params: Sequence[Tensor]):
    dtype = params[0].dtype if params else ind.dtype
    k_ve, k_ho = scale_fn(ind.to(dtype), *params)
    return k_ve, k_ho


def _f32(t: Tensor, planes: int, geom: WindowGeometry) -> Tensor:
    return t.detach().reshape(planes,
                              *geom.grid).to(torch.float32).contiguous()


class _FleSTriton(torch.autograd.Function):
    """FleS with Triton pixel passes; saves ``x``, the indicator grid and
    the parameters."""

    @staticmethod
    def forward(ctx, x: Tensor, geom: WindowGeometry, gate: str, mode: str,
                scale_fn: ScaleFn, *params: Tensor) -> Tensor:
        n, c, h, w = x.shape
        planes = n * c
        xf = x.view(planes, h, w)
        bands = _bands(geom)
        ind, count = _stats(xf, geom, mode, bands)
        k_ve, k_ho = _scales(scale_fn, ind.view(n, c, *geom.grid), params)
        code, cst = _GATES[gate]
        y = torch.empty_like(xf)
        _kernels().fles_apply_kernel[(planes * bands.programs_per_plane, )](
            xf,
            y,
            _f32(k_ve, planes, geom),
            _f32(k_ho, planes, geom),
            cst,
            *bands.args,
            GATE=code,
            BLOCK_R=bands.block_r,
            BLOCK_W=bands.block_w)
        ctx.geom, ctx.gate, ctx.mode, ctx.scale_fn = geom, gate, mode, scale_fn
        ctx.op = 'fles_fused'
        ctx.save_for_backward(x, ind, count, *params)
        return y.view_as(x)

    @staticmethod
    @labelled('mmact::triton_fles_backward')
    @differentiable_once
    def backward(ctx, grad_out: Tensor):
        x, ind, count, *params = ctx.saved_tensors
        geom, (code, cst) = ctx.geom, _GATES[ctx.gate]
        n, c, h, w = x.shape
        planes = n * c
        xf = x.view(planes, h, w)
        gf = grad_out.contiguous().view(planes, h, w)
        bands = _bands(geom)
        grid = (planes * bands.programs_per_plane, )
        dtype = params[0].dtype if params else ind.dtype
        k_ve, k_ho, scales_backward = scales_vjp(
            ctx.scale_fn,
            ind.view(n, c, *geom.grid).to(dtype), params)
        kv, ko = _f32(k_ve, planes, geom), _f32(k_ho, planes, geom)
        s_ve = torch.empty_like(kv)
        s_ho = torch.empty_like(kv)
        _kernels().fles_gate_sums_kernel[grid](
            xf,
            gf,
            kv,
            ko,
            s_ve,
            s_ho,
            cst,
            *bands.args,
            bands.wpb,
            GATE=code,
            BLOCK_R=bands.block_r,
            BLOCK_W=bands.block_w,
            BLOCK_NW=bands.block_nw)
        # d y / d k_ve = rho(u) x;  d y / d k_ho = k_ve c x^2 rho'(u)
        g_ho = s_ho.mul_(kv).mul_(cst)
        g_ind, *param_grads = scales_backward(s_ve, g_ho)
        q = (g_ind.reshape(planes, *geom.grid).to(torch.float32) /
             count).contiguous()
        grad_x = torch.empty_like(xf)
        _kernels().fles_grad_kernel[grid](
            xf,
            gf,
            grad_x,
            kv,
            ko,
            q,
            cst,
            *bands.args,
            GATE=code,
            POSITIVE=ctx.mode == 'positive',
            BLOCK_R=bands.block_r,
            BLOCK_W=bands.block_w)
        return (grad_x.view_as(x), None, None, None, None, *param_grads)


@labelled('mmact::triton_fles')
def fles_triton(x: Tensor, geom: WindowGeometry, params: Sequence[Tensor],
                gate: str, mode: str, scale_fn: ScaleFn) -> Tensor:
    """FleS of a contiguous ``(N, C, H, W)`` map on the Triton kernels.

    Args:
        x (Tensor): float32 / float16 / bfloat16 input.
        geom (WindowGeometry): Tiles or one global window.
        params (Sequence[Tensor]): Passed to ``scale_fn(ind, *params)``.
        gate (str): A gate of :data:`~mmact.ops.fles.FLES_GATES`.
        mode (str): ``'positive'`` or ``'mean'``.
        scale_fn (ScaleFn): Maps indicators to ``(k_ve, k_ho)``.

    Returns:
        Tensor: ``k_ve rho(k_ho x) x`` in the dtype of ``x``.
    """
    return _FleSTriton.apply(x, geom, gate, mode, scale_fn, *params)
