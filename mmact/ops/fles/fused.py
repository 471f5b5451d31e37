"""Fused FleS op: saves only the input, blocked over channel planes.

The indicator and the gate are evaluated block by block over ``N*C`` channel
planes (each block ~``block_bytes``, :mod:`.blocked`), so intermediates stay
in cache.
Derivatives of the gate are analytic; the scale MLP's vector-Jacobian
product (written out for the MLP layouts of :mod:`.scales`, autograd for any
other scale function) is prepared in forward on the (small) indicator grid,
whose intermediates are kept, so that backward does not re-run the MLP.

On float32 CPU tensors with tiles or a global window, a gate and indicator
the C kernels have and a small MLP of a layout of :mod:`.scales`, the whole
op is the torch operator ``mmact::fles`` (``csrc/fles_op.cpp``: the same
kernels, the MLP and its backward as loops in C++). In the other such cases
the pixel passes run in the fused C kernels of :mod:`.cpu` (one loop per
pass: window statistics, gate application, gate backward with the window
sums, indicator backward), for the gates and indicators they cover; the
rest (the MLP above all) stays in torch.
Each stage is labelled for ``torch.profiler`` (``fles.*``).

CUDA tensors with tiles or a global window and the ``positive`` / ``mean``
indicators run on the Triton kernels of :mod:`mmact.ops.fles.triton_path`.
Traced calls, forward-mode AD and ``composite=True`` run the composite,
:func:`~.scales.fles_reference`.

:func:`.dispatch.implementation` decides which of these runs, once per
call, from the input and the backends in force (:mod:`mmact.ops.backends`).
"""
from contextlib import contextmanager
from typing import Iterator, Optional, Sequence

import torch
from torch import Tensor

from ...compat import is_tracing
from .. import cuda_build
from ..profiling import label
from ..second_derivative import differentiable_once
from . import cpu
from .blocked import (apply_overlapping, apply_tiles, gate_grads_overlapping,
                      gate_grads_tiles, indicator_grads, indicator_stats)
from .dispatch import Plan, implementation
from .gates import check_gate
from .geometry import WindowGeometry
from .indicators import check_indicator
from .scales import (K_HO_MIN, ScaleFn, fles_mlp_scales, fles_reference,
                     scales_vjp)

__all__ = ['fles_fused']


#: Indicator grids up to this many values run the scale MLP on one thread.
SMALL_GRID = 1 << 18


@contextmanager
def _small_op_threads(ind: Tensor) -> Iterator[None]:
    """One intra-op thread for the scale MLP on a small CPU grid.

    The MLP is a few dozen tiny ops; with several threads each of them ends
    in a barrier, and on a loaded machine a descheduled worker stalls every
    barrier (measured: 0.9 s instead of 10 ms per step with 2 threads and a
    load average of 12 on 2 cores).
    """
    threads = torch.get_num_threads()
    if (threads == 1 or ind.device.type != 'cpu' or ind.numel() > SMALL_GRID
            or is_tracing()):
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _fles_forward(x: Tensor,
                  geom: WindowGeometry,
                  gate: str,
                  mode: str,
                  eta: float,
                  scale_fn: ScaleFn,
                  block: int,
                  plan: Plan,
                  gamma: Optional[Tensor],
                  beta: Optional[Tensor],
                  params: Sequence[Tensor],
                  keep_vjp: bool = False):
    """``(out, ind, count, vjp)``: the output (``x``'s shape), the indicator
    grid and its divisors (what backward needs besides ``x``), and with
    ``keep_vjp`` the scales and their vector-Jacobian product
    (:func:`~.scales.scales_vjp`, which keeps the MLP's grid-sized
    intermediates, so that backward does not re-run it), else None."""
    n, c, h, w = x.shape
    planes = n * c
    xf = x.reshape(planes, h, w)
    with label('fles.stats'):
        if plan.c_stats:
            ind, count = cpu.stats(xf, geom, mode)
        else:
            sums, count = indicator_stats(xf, geom, mode, eta, n, gamma, beta,
                                          block, torch.empty_like(xf))
            ind = sums / count
    ind = ind.view(n, c, *geom.grid)
    vjp = None
    with label('fles.mlp'), _small_op_threads(ind):
        if keep_vjp:
            k_ve, k_ho, backward = scales_vjp(scale_fn, ind, params)
            k_ve, k_ho = k_ve.detach(), k_ho.detach()
            vjp = (k_ve, k_ho, backward)
        else:
            k_ve, k_ho = scale_fn(ind, *params)
    kv = k_ve.reshape(planes, *geom.grid)
    ko = k_ho.reshape(planes, *geom.grid)
    with label('fles.apply'):
        if plan.c_gate:
            out = cpu.apply(xf, kv, ko, geom, gate)
        else:
            out = torch.empty_like(xf)
            apply = (apply_overlapping if geom.overlapping else apply_tiles)
            apply(xf, kv, ko, geom, gate, block, out)
    return out.view_as(x), ind, count, vjp


_HALF = (torch.float16, torch.bfloat16)


def _float(x: Tensor) -> Tensor:
    """``x`` in float32 where it is half: the torch and C passes compute in
    their input's dtype (a transient copy; ``x`` itself is saved)."""
    return x.float() if x.dtype in _HALF else x


class _FleSFunction(torch.autograd.Function):
    """Fused FleS: forward and backward save only ``x`` (plus tiny tensors),
    in its own dtype; a half ``x`` is computed in float32.

    See the module docstring for the method.
    """

    @staticmethod
    def forward(ctx, x: Tensor, geom: WindowGeometry, gate: str, mode: str,
                eta: float, scale_fn: ScaleFn, block: int, plan: Plan,
                gamma: Optional[Tensor], beta: Optional[Tensor], *params:
                Tensor) -> Tensor:
        out, ind, count, ctx.vjp = _fles_forward(_float(x), geom, gate, mode,
                                                 eta, scale_fn, block, plan,
                                                 gamma, beta, params, True)
        ctx.geom, ctx.gate, ctx.mode, ctx.eta = geom, gate, mode, eta
        ctx.op = 'fles_fused'
        ctx.block, ctx.plan = block, plan
        ctx.has_gamma = gamma is not None
        extra = [gamma, beta] if gamma is not None else []
        # the parameters for their version check: the VJP holds their values
        ctx.save_for_backward(x, ind, count, *extra, *params)
        return out.to(x.dtype)

    @staticmethod
    @differentiable_once
    def backward(ctx, grad_out: Tensor):
        x, ind, count, *rest = ctx.saved_tensors
        gamma = beta = None
        if ctx.has_gamma:
            gamma, beta, *rest = rest
        geom, block = ctx.geom, ctx.block
        dtype = x.dtype
        x = _float(x)
        n, c, h, w = x.shape
        planes = n * c
        xf = x.reshape(planes, h, w)
        gf = _float(grad_out).contiguous().reshape(planes, h, w)
        plan = ctx.plan
        k_ve, k_ho, scales_backward = ctx.vjp
        kv = k_ve.reshape(planes, *geom.grid)
        ko = k_ho.reshape(planes, *geom.grid)
        with label('fles.bwd.gate'):
            if plan.c_gate:
                grad_x, g_ve, g_ho = cpu.gate_backward(xf, gf, kv, ko, geom,
                                                       ctx.gate)
            else:
                grad_x = torch.empty_like(xf)
                gate_grads = (
                    gate_grads_overlapping
                    if geom.overlapping else gate_grads_tiles)
                g_ve, g_ho = gate_grads(xf, gf, kv, ko, geom, ctx.gate, block,
                                        grad_x)
        with label('fles.bwd.mlp'), _small_op_threads(ind):
            g_ind, *param_grads = scales_backward(g_ve, g_ho)
        g_gamma = g_beta = None
        if g_ind is not None:
            with label('fles.bwd.indicator'):
                if plan.c_stats:
                    cpu.indicator_backward(xf, grad_x, g_ind, count, geom,
                                           ctx.mode)
                else:
                    g_gamma, g_beta = indicator_grads(xf, g_ind, count, geom,
                                                      ctx.mode, ctx.eta, n,
                                                      gamma, beta, block,
                                                      grad_x)
        return (grad_x.view_as(x).to(dtype), None, None, None, None, None,
                None, None, g_gamma, g_beta, *param_grads)


def fles_fused(x: Tensor,
               geom: WindowGeometry,
               params: Sequence[Tensor],
               gate: str = 'sigmoid',
               mode: str = 'positive',
               gamma: Optional[Tensor] = None,
               beta: Optional[Tensor] = None,
               eta: float = 0.1,
               scale_fn: ScaleFn = fles_mlp_scales,
               block_bytes: int = 1 << 21) -> Tensor:
    """FleS on a contiguous ``(N, C, H, W)`` map, memory-lean.

    Same result as :func:`~mmact.ops.fles.fles_reference` (up to rounding);
    saves only ``x`` for backward (plus the tiny indicator grid and
    parameters), in its own dtype: a float16 / bfloat16 ``x`` is computed
    in float32 (the Triton kernels read it as it is; the other rows work on
    a float32 copy) and the result returned in its dtype. Its fused rows
    are not twice differentiable: the composite is
    (``mmact.ops.backends.using(composite=True)``).

    Args:
        x: ``(N, C, H, W)``.
        geom: the window grid.
        params: passed to ``scale_fn(ind, *params)``.
        gate: one of :data:`~mmact.ops.fles.FLES_GATES`.
        mode, gamma, beta, eta: the indicator (``gamma``/``beta`` only for
            ``mode='softplus'``).
        scale_fn: maps indicators to ``(k_ve, k_ho)``.
        block_bytes: target size of one block of channel planes.
    """
    check_gate(gate)
    check_indicator(mode)
    if x.dim() != 4:
        raise ValueError(f'fles_fused expects (N, C, H, W), got {x.shape}')
    if not x.is_contiguous():
        x = x.contiguous()
    plan = implementation(x, geom, gate, mode, scale_fn, params)
    if plan.name == 'composite':
        return fles_reference(_float(x), geom, params, gate, mode, gamma,
                              beta, eta, scale_fn).to(x.dtype)
    if plan.name == 'operator':
        try:
            return plan.operator(x, *params, *geom.window, gate, mode,
                                 K_HO_MIN)
        except RuntimeError as e:  # a GPU the CUDA kernels hold no code for
            if not cuda_build.unserved(e, x.device):
                raise
        # switched off: the table now picks the next row
        return fles_fused(x, geom, params, gate, mode, gamma, beta, eta,
                          scale_fn, block_bytes)
    if plan.name == 'triton':
        from .triton_path import fles_triton
        return fles_triton(x, geom, params, gate, mode, scale_fn)
    # blocks of the float32 copy of a half map
    plane = x.shape[-2] * x.shape[-1] * max(x.element_size(), 4)
    block = max(1, block_bytes // max(plane, 1))
    if mode != 'softplus':
        gamma = beta = None
    inputs = (x, gamma, beta, *params)
    if not (torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                            for t in inputs)):
        # Nothing to differentiate (eval, no_grad): no autograd node.
        return _fles_forward(_float(x), geom, gate, mode, float(eta),
                             scale_fn, block, plan, gamma, beta,
                             params)[0].to(x.dtype)
    return _FleSFunction.apply(x, geom, gate, mode, float(eta), scale_fn,
                               block, plan, gamma, beta, *params)
