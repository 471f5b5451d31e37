"""Fused FleS op: saves only the input, blocked over channel planes.

The indicator and the gate are evaluated block by block over ``N*C`` channel
planes (each block ~``block_bytes``), so intermediates stay in cache.
Derivatives of the gate are analytic; the scale MLP is re-run in backward on
the (small) indicator grid, with its vector-Jacobian product written out for
the MLP layouts of :mod:`.scales` (autograd for any other scale function).

With tiles or a global window the scales are constant per window: they are
broadcast over tile views (:class:`~.tiling.Tiling`) and the gate is
evaluated through the fused native kernels (SiLU / GELU / Mish):
``y = k_ve / (c k_ho) * base(c k_ho x)``; the window gradients follow from
``d/dk_ve = sum g base(u) / (c k_ho)`` and
``d/dk_ho = k_ve / (c k_ho^2) * sum g (u base'(u) - base(u))``.
Overlapping windows use per-pixel averaged scales and direct formulas.

On float32 CPU tensors with tiles or a global window, a gate and indicator
the C kernel has and an MLP layout of :mod:`.scales`, the whole op is the
torch operator ``mmact::fles`` (``csrc/fles_op.cpp``: the same kernels, the
MLP and its backward in C++). In the other such cases the pixel passes run
in the fused C kernel of :mod:`.cpu_kernel` (one loop per pass: window
statistics, gate application, gate backward with the window sums, indicator
backward), for the gates and indicators it covers; the rest stays in torch.
Each stage is labelled for ``torch.profiler`` (``fles.*``).

CUDA tensors with tiles or a global window and the ``positive`` / ``mean``
indicators run on the Triton kernels of :mod:`mmact.ops.fles.triton_path`.

:func:`_implementation` decides which of these runs, once per call, from
the input and the backends in force (:mod:`mmact.ops.backends`).
"""
from contextlib import contextmanager, nullcontext
from typing import Callable, Iterator, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.profiler import record_function

from ...versions import forward_ad_active, is_tracing
from .. import backends
from .cpu_kernel import FleSCpuKernel, get_fles_kernel, get_fles_operator
from .gates import NATIVE_BASE, check_gate, fles_gate_and_grad, gate_inplace
from .geometry import (WindowGeometry, window_area, window_coverage,
                       window_scatter, window_sum)
from .indicators import (check_indicator, float_mask, indicator_transform,
                         indicator_transform_grad)
from .scales import (ScaleFn, fles_mlp_scales, fles_shared_mlp_scales,
                     scales_vjp)
from .tiling import Tiling, window_dot

__all__ = ['fles_fused', 'operator_window', 'operator_entry']


def _blocks(planes: int, block: int):
    for i in range(0, planes, block):
        yield slice(i, i + block)


def _per_plane(p: Tensor, n: int) -> Tensor:
    """(C,) channel parameter -> (N*C, 1, 1) per channel plane."""
    return p.repeat(n).view(-1, 1, 1)


def _indicator_stats(xf: Tensor, geom: WindowGeometry, mode: str, eta: float,
                     n: int, gamma: Optional[Tensor], beta: Optional[Tensor],
                     block: int, buf: Tensor) -> Tuple[Tensor, Tensor]:
    """Window sums of the indicator transform and its divisor.

    Returns ``(sums, count)``: ``(planes, nh, nw)`` sums and the counts of
    ``x >= 0`` (``positive``, floored at 1) or the window areas.
    ``buf`` (same shape as ``xf``) is scratch space.
    """
    planes = xf.shape[0]
    sums = xf.new_empty(planes, *geom.grid)
    if mode == 'positive':
        count = xf.new_empty(planes, *geom.grid)
    else:
        count = window_area(geom, xf.device, xf.dtype)
    if mode == 'softplus':
        gam, bet = _per_plane(gamma, n), _per_plane(beta, n)
    for sl in _blocks(planes, block):
        xs, tmp = xf[sl], buf[sl]
        if mode == 'positive':
            torch.clamp(xs, min=0, out=tmp)
            sums[sl] = window_sum(tmp, geom)
            count[sl] = window_sum(float_mask(xs, 1.0, out=tmp), geom)
        elif mode == 'softplus':
            torch.mul(xs, gam[sl], out=tmp).add_(bet[sl])
            sums[sl] = window_sum(F.softplus(tmp), geom)
        elif mode == 'quasi_linear':
            sums[sl] = window_sum(indicator_transform(xs, mode, eta=eta), geom)
        else:
            sums[sl] = window_sum(xs, geom)
    if mode == 'positive':
        count.clamp_(min=1.0)
    return sums, count


def _apply_overlapping(xf: Tensor, kv: Tensor, ko: Tensor,
                       geom: WindowGeometry, gate: str, block: int,
                       out: Tensor) -> None:
    """``out = k_ve * rho(k_ho x) * x`` with per-pixel averaged scales."""
    cover = window_coverage(geom, xf.device, xf.dtype)
    for sl in _blocks(xf.shape[0], block):
        xs, buf = xf[sl], out[sl]
        torch.mul(xs, window_scatter(ko[sl], geom) / cover, out=buf)
        gate_inplace(buf, gate)
        buf.mul_(xs).mul_(window_scatter(kv[sl], geom) / cover)


def _apply_tiles(xf: Tensor, kv: Tensor, ko: Tensor, geom: WindowGeometry,
                 gate: str, block: int, out: Tensor) -> None:
    """``out = k_ve / (c k_ho) * base(c k_ho x)`` on tiles / global."""
    tiling = Tiling(geom)
    base, _, cst = NATIVE_BASE[gate]
    ko_c = ko * cst
    ratio = kv / ko_c
    for sl in _blocks(xf.shape[0], block):
        buf = out[sl]
        tiling.mul(xf[sl], ko_c[sl], buf)
        base(buf)
        tiling.mul(buf, ratio[sl], buf)


def _gate_grads_overlapping(xf: Tensor, gf: Tensor, kv: Tensor, ko: Tensor,
                            geom: WindowGeometry, gate: str, block: int,
                            grad_x: Tensor) -> Tuple[Tensor, Tensor]:
    """Gradients through the gate for overlapping windows.

    Writes ``dy/dx * g`` (scales held fixed) into ``grad_x`` and returns the
    window gradients ``(g_ve, g_ho)``.
    """
    planes = xf.shape[0]
    g_ve = xf.new_empty(planes, *geom.grid)
    g_ho = xf.new_empty(planes, *geom.grid)
    cover = window_coverage(geom, xf.device, xf.dtype)
    for sl in _blocks(planes, block):
        xs, gs = xf[sl], gf[sl]
        kom = window_scatter(ko[sl], geom) / cover
        kvm = window_scatter(kv[sl], geom) / cover
        u = xs * kom
        r, dr = fles_gate_and_grad(u, gate)
        a = gs * xs
        # pixel gradients of the averaged scales, then the adjoint E^T
        g_ve[sl] = window_sum(a * r / cover, geom)
        g_ho[sl] = window_sum(a.mul_(xs).mul_(dr).mul_(kvm).div_(cover), geom)
        # dy/dx = k_ve * (rho(u) + u * rho'(u))
        torch.addcmul(r, u, dr, out=grad_x[sl]).mul_(kvm).mul_(gs)
    return g_ve, g_ho


def _gate_grads_tiles(xf: Tensor, gf: Tensor, kv: Tensor, ko: Tensor,
                      geom: WindowGeometry, gate: str, block: int,
                      grad_x: Tensor) -> Tuple[Tensor, Tensor]:
    """Gradients through the gate on tiles / global (native kernels)."""
    planes = xf.shape[0]
    tiling = Tiling(geom)
    base, base_grad, cst = NATIVE_BASE[gate]
    ko_c = ko * cst
    s_hu = xf.new_empty(planes, *geom.grid)
    s_gb = xf.new_empty(planes, *geom.grid)
    for sl in _blocks(planes, block):
        xs, gs = xf[sl], gf[sl]
        u = tiling.mul(xs, ko_c[sl], torch.empty_like(xs))
        hb = base_grad(gs, u)  # g * base'(u)
        s_hu[sl] = window_dot(hb, u, geom)
        s_gb[sl] = window_dot(base(u), gs, geom)
        tiling.mul(hb, kv[sl], grad_x[sl])
    g_ve = s_gb / ko_c
    g_ho = (s_hu - s_gb).mul_(kv).div_(ko_c * ko)
    return g_ve, g_ho


def _indicator_grads(
        xf: Tensor, g_ind: Tensor, count: Tensor, geom: WindowGeometry,
        mode: str, eta: float, n: int, gamma: Optional[Tensor],
        beta: Optional[Tensor], block: int,
        grad_x: Tensor) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """Adds the indicator path to ``grad_x``; returns (g_gamma, g_beta).

    d ind_w / d x_p = f'(x_p) / count_w for every window w containing p:
    ``grad_x += f'(x) * scatter(g_ind / count)``.
    """
    planes = xf.shape[0]
    q = g_ind.reshape(planes, *geom.grid) / count
    tiling = None if geom.overlapping else Tiling(geom)

    def add_scattered(dst, t, sl):
        if tiling is not None:
            return tiling.addcmul_(dst, t, q[sl])
        qm = window_scatter(q[sl], geom)
        return dst.add_(qm) if t is None else dst.addcmul_(t, qm)

    if mode != 'softplus':
        for sl in _blocks(planes, block):
            t = (None if mode == 'mean' else indicator_transform_grad(
                xf[sl], mode, eta))
            add_scattered(grad_x[sl], t, sl)
        return None, None
    gam, bet = _per_plane(gamma, n), _per_plane(beta, n)
    acc_gamma = xf.new_zeros(planes)
    acc_beta = xf.new_zeros(planes)
    for sl in _blocks(planes, block):
        xs = xf[sl]
        sig = torch.sigmoid(gam[sl] * xs + bet[sl])
        t = add_scattered(torch.zeros_like(xs), sig, sl)
        acc_beta[sl] = t.sum(dim=(-2, -1))
        acc_gamma[sl] = torch.linalg.vecdot(
            t.reshape(t.shape[0], -1), xs.reshape(t.shape[0], -1))
        grad_x[sl].addcmul_(t, gam[sl])
    return acc_gamma.view(n, -1).sum(0), acc_beta.view(n, -1).sum(0)


class _Plan(NamedTuple):
    """How :func:`fles_fused` runs on one input."""
    name: str  # 'triton', 'operator', 'c' or 'torch'
    #: the C kernel for the pixel passes it covers (name 'c'), else None
    kernel: Optional[FleSCpuKernel] = None
    c_stats: bool = False  # indicator statistics and their backward in C
    c_gate: bool = False  # gate application and its backward in C
    #: the whole op as a C++ operator (name 'operator'), else None
    operator: Optional[Callable] = None


_TORCH = _Plan('torch')
_TRITON = _Plan('triton')
_PLAIN_TYPES = (Tensor, torch.nn.Parameter)
#: The scale functions the C++ operator evaluates (its MLP layouts).
_OPERATOR_SCALES = (fles_mlp_scales, fles_shared_mlp_scales)


def _implementation(x: Tensor, geom: WindowGeometry, gate: str, mode: str,
                    scale_fn: ScaleFn, params: Sequence[Tensor]) -> _Plan:
    """Which implementation runs FleS on ``x``: the one place this is
    decided (the scale MLP is torch ops except in ``operator``):

    ==========================================  ==========================
    call                                        runs
    ==========================================  ==========================
    traced (``torch.compile``, ``torch.jit``,   ``torch``
    fake tensors, dispatch modes)
    a tensor the Triton settings cover, tiles   ``triton``: the whole op
    or a global window, a gate and indicator    (:mod:`.triton_path`)
    the kernels have
    plain float32 CPU tensor, tiles or a        ``operator``: the whole op
    global window, C kernels on and built,      as ``torch.ops.mmact.fles``
    a gate and indicator the kernel has, an     (``csrc/fles_op.cpp``)
    MLP layout of :mod:`.scales` with plain
    float32 CPU weights, no forward-mode AD
    the same but another gate, indicator or     ``c``: the pixel passes
    scale function                              whose gate / indicator the
                                                C kernel has, the rest torch
    anything else                               ``torch``
    ==========================================  ==========================

    The operator's Python entry takes the ``operator`` calls (these checks
    in C++) and declines the others with None: FleS layers call it first
    for the map sizes that took it (:func:`operator_window`).
    """
    if is_tracing():  # first: tracers reject reading x.layout
        return _TORCH
    if backends.takes_triton(x):
        from . import triton_path  # imports triton
        return _TRITON if triton_path.supported(geom, gate, mode) else _TORCH
    if (x.is_cpu and x.dtype is torch.float32 and type(x) in _PLAIN_TYPES
            and x.layout == torch.strided and not geom.overlapping
            and backends.settings().cpu_kernels):
        kernel = get_fles_kernel()
        if kernel is None:
            return _TORCH
        plan = _Plan('c', kernel, kernel.supports_mode(mode),
                     kernel.supports_gate(gate))
        if (plan.c_stats and plan.c_gate and scale_fn in _OPERATOR_SCALES
                and not forward_ad_active() and all(
                    p.dtype is torch.float32 and p.is_cpu
                    and type(p) in _PLAIN_TYPES for p in params)):
            operator = get_fles_operator()
            if operator is not None:
                return _Plan('operator', operator=operator)
        return plan
    return _TORCH


#: The operator's Python entry while the settings in force send calls to
#: it: set by a call that took it, dropped when
#: :func:`mmact.ops.backends.configure` runs.
_entry: Optional[Callable] = None


def _drop_entry() -> None:
    global _entry
    _entry = None


backends.on_change(_drop_entry)


def operator_entry() -> Optional[Callable]:
    """The C++ operator's Python entry, ``(x, fc1_weight, fc1_bias,
    fc2_weight, fc2_bias, kh, kw, gate, mode)``, once a call took it under
    the settings in force (else None). It takes the calls
    :func:`_implementation` sends to the operator and returns None for the
    others."""
    return _entry


def operator_window(x: Tensor, geom: WindowGeometry, gate: str, mode: str,
                    scale_fn: ScaleFn,
                    params: Sequence[Tensor]) -> Optional[Tuple[int, int]]:
    """The operator's window ``(kh, kw)`` when :func:`fles_fused` on these
    arguments runs the operator, else None: a caller that remembers it per
    input shape can call :func:`operator_entry` directly the next time."""
    plan = _implementation(x, geom, gate, mode, scale_fn, params)
    return geom.window if plan.name == 'operator' else None


def _stage(name: str):
    """The ``torch.profiler`` label of a stage, while a profiler records
    (or a tracer sees it); otherwise nothing: entering a label costs about
    15 us, more than a whole stage on a small map."""
    if is_tracing() or torch.autograd._profiler_enabled():
        return record_function(name)
    return nullcontext()


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


def _fles_forward(x: Tensor, geom: WindowGeometry, gate: str, mode: str,
                  eta: float, scale_fn: ScaleFn, block: int, plan: _Plan,
                  gamma: Optional[Tensor], beta: Optional[Tensor],
                  params: Sequence[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    """``(out, ind, count)``: the output (``x``'s shape), the indicator grid
    and its divisors (what backward needs besides ``x``)."""
    n, c, h, w = x.shape
    planes = n * c
    xf = x.reshape(planes, h, w)
    kernel = plan.kernel
    with _stage('fles.stats'):
        if plan.c_stats:
            ind, count = kernel.stats(xf, geom, mode)
        else:
            sums, count = _indicator_stats(xf, geom, mode, eta, n, gamma, beta,
                                           block, torch.empty_like(xf))
            ind = sums / count
    ind = ind.view(n, c, *geom.grid)
    with _stage('fles.mlp'), _small_op_threads(ind):
        k_ve, k_ho = scale_fn(ind, *params)
    kv = k_ve.reshape(planes, *geom.grid)
    ko = k_ho.reshape(planes, *geom.grid)
    with _stage('fles.apply'):
        if plan.c_gate:
            out = kernel.apply(xf, kv, ko, geom, gate)
        else:
            out = torch.empty_like(xf)
            apply = (_apply_overlapping if geom.overlapping else _apply_tiles)
            apply(xf, kv, ko, geom, gate, block, out)
    return out.view_as(x), ind, count


class _FleSFunction(torch.autograd.Function):
    """Fused FleS: forward and backward save only ``x`` (plus tiny tensors).

    See the module docstring for the method.
    """

    @staticmethod
    def forward(ctx, x: Tensor, geom: WindowGeometry, gate: str, mode: str,
                eta: float, scale_fn: ScaleFn, block: int, plan: _Plan,
                gamma: Optional[Tensor], beta: Optional[Tensor], *params:
                Tensor) -> Tensor:
        out, ind, count = _fles_forward(x, geom, gate, mode, eta, scale_fn,
                                        block, plan, gamma, beta, params)
        ctx.geom, ctx.gate, ctx.mode, ctx.eta = geom, gate, mode, eta
        ctx.scale_fn, ctx.block, ctx.plan = scale_fn, block, plan
        ctx.has_gamma = gamma is not None
        extra = [gamma, beta] if gamma is not None else []
        ctx.save_for_backward(x, ind, count, *extra, *params)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        x, ind, count, *rest = ctx.saved_tensors
        gamma = beta = None
        if ctx.has_gamma:
            gamma, beta, *rest = rest
        params = rest
        geom, block = ctx.geom, ctx.block
        n, c, h, w = x.shape
        planes = n * c
        xf = x.reshape(planes, h, w)
        gf = grad_out.contiguous().reshape(planes, h, w)
        plan = ctx.plan
        with _stage('fles.bwd.mlp'), _small_op_threads(ind):
            k_ve, k_ho, scales_backward = scales_vjp(ctx.scale_fn, ind, params)
        kv = k_ve.detach().reshape(planes, *geom.grid)
        ko = k_ho.detach().reshape(planes, *geom.grid)
        with _stage('fles.bwd.gate'):
            if plan.c_gate:
                grad_x, g_ve, g_ho = plan.kernel.gate_backward(
                    xf, gf, kv, ko, geom, ctx.gate)
            else:
                grad_x = torch.empty_like(xf)
                gate_grads = (
                    _gate_grads_overlapping
                    if geom.overlapping else _gate_grads_tiles)
                g_ve, g_ho = gate_grads(xf, gf, kv, ko, geom, ctx.gate, block,
                                        grad_x)
        with _stage('fles.bwd.mlp'), _small_op_threads(ind):
            g_ind, *param_grads = scales_backward(g_ve, g_ho)
        g_gamma = g_beta = None
        if g_ind is not None:
            with _stage('fles.bwd.indicator'):
                if plan.c_stats:
                    plan.kernel.indicator_backward(xf, grad_x, g_ind, count,
                                                   geom, ctx.mode)
                else:
                    g_gamma, g_beta = _indicator_grads(xf, g_ind, count, geom,
                                                       ctx.mode, ctx.eta, n,
                                                       gamma, beta, block,
                                                       grad_x)
        return (grad_x.view_as(x), None, None, None, None, None, None, None,
                g_gamma, g_beta, *param_grads)


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
    parameters). Not twice differentiable.

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
    x = x.contiguous()
    plan = _implementation(x, geom, gate, mode, scale_fn, params)
    if plan.name == 'operator':
        global _entry
        _entry = plan.operator
        return plan.operator(x, *params, *geom.window, gate, mode)
    if plan.name == 'triton':
        from .triton_path import fles_triton
        return fles_triton(x, geom, params, gate, mode, scale_fn)
    plane = x.shape[-2] * x.shape[-1] * x.element_size()
    block = max(1, block_bytes // max(plane, 1))
    if mode != 'softplus':
        gamma = beta = None
    inputs = (x, gamma, beta, *params)
    if not (torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                            for t in inputs)):
        # Nothing to differentiate (eval, no_grad): no autograd node.
        return _fles_forward(x, geom, gate, mode, float(eta), scale_fn, block,
                             plan, gamma, beta, params)[0]
    return _FleSFunction.apply(x, geom, gate, mode, float(eta), scale_fn,
                               block, plan, gamma, beta, *params)
