"""FleS's pixel passes in torch ops, blocked over channel planes (each block
about ``block_bytes``) so that intermediates stay in cache: the fused op's
path where no C or Triton kernel covers the gate, indicator or window grid
(:mod:`.fused`).

With tiles or a global window the scales are constant per window: they are
broadcast over tile views (:class:`~.tiling.Tiling`) and the gate is
evaluated through the fused native kernels (SiLU / GELU / Mish):
``y = k_ve / (c k_ho) * base(c k_ho x)``; the window gradients follow from
``d/dk_ve = sum g base(u) / (c k_ho)`` and
``d/dk_ho = k_ve / (c k_ho^2) * sum g (u base'(u) - base(u))``.
Overlapping windows use per-pixel averaged scales and direct formulas.

The functions share their arguments:

- ``xf`` (Tensor): the ``(planes, H, W)`` maps (``planes = N * C``);
  ``gf``: the output's gradient, ``xf``'s shape;
- ``kv``, ``ko`` (Tensor): ``k_ve`` and ``k_ho`` per window,
  ``(planes, nh, nw)``;
- ``geom`` (WindowGeometry): the window grid; ``gate`` (str): the gate;
- ``mode``, ``eta``, ``gamma``, ``beta``: the indicator
  (:mod:`.indicators`); ``n`` (int): the batch size;
- ``block`` (int): planes per block;
- ``out``, ``grad_x``, ``buf`` (Tensor): ``xf``-shaped outputs written in
  place (``buf``: scratch).
"""
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .gates import check_gate, fles_gate_and_grad
from .geometry import (WindowGeometry, window_area, window_coverage,
                       window_scatter, window_sum)
from .indicators import (float_mask, indicator_transform,
                         indicator_transform_grad)
from .tiling import Tiling, window_dot

__all__ = [
    'indicator_stats', 'apply_overlapping', 'apply_tiles',
    'gate_grads_overlapping', 'gate_grads_tiles', 'indicator_grads'
]


def _blocks(planes: int, block: int):
    for i in range(0, planes, block):
        yield slice(i, i + block)


def _per_plane(p: Tensor, n: int) -> Tensor:
    """(C,) channel parameter -> (N*C, 1, 1) per channel plane."""
    return p.repeat(n).view(-1, 1, 1)


def indicator_stats(xf: Tensor, geom: WindowGeometry, mode: str, eta: float,
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


def apply_overlapping(xf: Tensor, kv: Tensor, ko: Tensor, geom: WindowGeometry,
                      gate: str, block: int, out: Tensor) -> None:
    """``out = k_ve * rho(k_ho x) * x`` with per-pixel averaged scales."""
    cover = window_coverage(geom, xf.device, xf.dtype)
    for sl in _blocks(xf.shape[0], block):
        xs, buf = xf[sl], out[sl]
        torch.mul(xs, window_scatter(ko[sl], geom) / cover, out=buf)
        check_gate(gate).inplace(buf)
        buf.mul_(xs).mul_(window_scatter(kv[sl], geom) / cover)


def apply_tiles(xf: Tensor, kv: Tensor, ko: Tensor, geom: WindowGeometry,
                gate: str, block: int, out: Tensor) -> None:
    """``out = k_ve / (c k_ho) * base(c k_ho x)`` on tiles / global."""
    tiling = Tiling(geom)
    row = check_gate(gate)
    base, ko_c = row.base, ko * row.c
    ratio = kv / ko_c
    for sl in _blocks(xf.shape[0], block):
        buf = out[sl]
        tiling.mul(xf[sl], ko_c[sl], buf)
        base(buf)
        tiling.mul(buf, ratio[sl], buf)


def gate_grads_overlapping(xf: Tensor, gf: Tensor, kv: Tensor, ko: Tensor,
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


def gate_grads_tiles(xf: Tensor, gf: Tensor, kv: Tensor, ko: Tensor,
                     geom: WindowGeometry, gate: str, block: int,
                     grad_x: Tensor) -> Tuple[Tensor, Tensor]:
    """Gradients through the gate on tiles / global (native kernels)."""
    planes = xf.shape[0]
    tiling = Tiling(geom)
    row = check_gate(gate)
    base, base_grad, cst = row.base, row.base_grad, row.c
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


def indicator_grads(
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
