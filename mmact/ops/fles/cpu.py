"""FleS's fused float32 CPU kernels (``mmact/ops/csrc/fles.c``), reached
through mmact's CPU extension (:mod:`mmact.ops.cpu_build`).

FleS touches every pixel four times per training step; each pass is one
loop over contiguous ``(planes, H, W)`` float32 maps with a
non-overlapping window grid (tiles cut at the border, or one global window):

* ``stats``: per-window sum of relu(x) and count of x >= 0 (``positive``
  indicator) or sum of x (``mean``);
* ``apply``: ``y = k_ve * rho(c k_ho x) * x``;
* ``gate_backward``: ``dL/dx`` with the scales held fixed, and the window
  sums ``sum g x rho(u)`` and ``sum g x^2 rho'(u)`` (``u = c k_ho x``) that
  give the scale gradients;
* ``indicator_backward``: ``dL/dx += f'(x) q`` with the indicator gradient
  ``q`` of the pixel's window (``f'`` = step function for ``positive``, 1
  for ``mean``).

Per-window values are expanded once per band of tile rows into a row of W
floats, so the inner loops run over whole contiguous rows and vectorize;
window sums accumulate per column over a band and are then reduced per
window in double. Gates: sigmoid (``tanh_gate`` is sigmoid with c = 2),
erf (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7) and tanh(softplus).

The whole op on small MLPs is the operator ``mmact::fles`` (one C++
autograd node, :func:`operator_entry`); the passes alone are the operators
``mmact::fles_stats`` / ``fles_apply`` / ``fles_gate_backward`` /
``fles_indicator_backward``, which :mod:`.fused` calls around the torch
MLP.
"""
from typing import Callable, Optional, Tuple

import torch
from torch import Tensor

from ..cpu_build import extension
from .gates import FLES_GATES
from .geometry import WindowGeometry

__all__ = [
    'KERNEL_GATES', 'KERNEL_MODES', 'LOOP_MACS', 'loop_sized',
    'operator_entry', 'stats', 'apply', 'gate_backward', 'indicator_backward'
]

#: Gates and indicator modes the kernels evaluate (others: torch): every
#: gate of :data:`~.gates.GATES` (``csrc/fles_op.cpp`` takes its name).
KERNEL_GATES = FLES_GATES
KERNEL_MODES = ('positive', 'mean')

#: The largest scale MLP the operator runs as loops, as ``n * grid * C * h *
#: 2`` (one layer's multiply-adds for both heads; ``kLoopMacs`` of
#: ``csrc/fles_mlp.h``): where a torch call costs more than the product.
#: Larger MLPs run in torch.
LOOP_MACS = 1 << 16


def loop_sized(x: Tensor, geom: WindowGeometry, hidden: int) -> bool:
    """Whether the operator's loops run the MLP of ``x`` on ``geom`` with
    ``hidden`` units (the rule its Python entry applies).

    Args:
        x (Tensor): The ``(N, C, H, W)`` map.
        geom (WindowGeometry): Its window grid.
        hidden (int): The MLP's hidden width.
    """
    n, c = x.shape[:2]
    return n * geom.grid[0] * geom.grid[1] * c * hidden * 2 <= LOOP_MACS


def operator_entry() -> Optional[Callable]:
    """The operator's Python entry, ``(x, fc1_weight, fc1_bias, fc2_weight,
    fc2_bias, kh, kw, gate, mode, k_ho_min)``, which returns None for a call
    the operator does not take; None when the extension cannot be built or
    the C kernels are switched off."""
    module = extension()
    return None if module is None else module.fles


def stats(xf: Tensor, geom: WindowGeometry,
          mode: str) -> Tuple[Tensor, Tensor]:
    """``(ind, div)``, each ``(planes, nh, nw)``: the indicator and its
    divisor (count of ``x >= 0`` floored at 1 for ``positive``,
    window area for ``mean``).

    Args:
        xf (Tensor): Contiguous float32 ``(planes, H, W)`` maps.
        geom (WindowGeometry): The (non-overlapping) window grid.
        mode (str): ``'positive'`` or ``'mean'``.
    """
    return torch.ops.mmact.fles_stats(xf, *geom.window, mode)


def apply(xf: Tensor, kv: Tensor, ko: Tensor, geom: WindowGeometry,
          gate: str) -> Tensor:
    """``k_ve * rho(k_ho x) * x`` with per-window scales.

    Args:
        xf (Tensor): Contiguous float32 ``(planes, H, W)`` maps.
        kv, ko (Tensor): ``k_ve`` and ``k_ho`` per window, ``(planes, nh, nw)``.
        geom (WindowGeometry): The window grid.
        gate (str): One of :data:`KERNEL_GATES`.
    """
    return torch.ops.mmact.fles_apply(xf, kv, ko, *geom.window, gate)


def gate_backward(xf: Tensor, gf: Tensor, kv: Tensor, ko: Tensor,
                  geom: WindowGeometry,
                  gate: str) -> Tuple[Tensor, Tensor, Tensor]:
    """``(grad_x, g_ve, g_ho)``: the input gradient with the scales held
    fixed, and the gradients of the per-window scales.

    Args:
        xf (Tensor): Contiguous float32 ``(planes, H, W)`` maps.
        gf (Tensor): The output's gradient, ``xf``'s shape.
        kv, ko (Tensor): ``k_ve`` and ``k_ho`` per window.
        geom (WindowGeometry): The window grid.
        gate (str): One of :data:`KERNEL_GATES`.
    """
    return torch.ops.mmact.fles_gate_backward(xf, gf, kv, ko, *geom.window,
                                              gate)


def indicator_backward(xf: Tensor, grad_x: Tensor, g_ind: Tensor, div: Tensor,
                       geom: WindowGeometry, mode: str) -> None:
    """``grad_x += f'(x) * g_ind / div`` of each pixel's window, in place
    (``div`` from :func:`stats`).

    Args:
        xf (Tensor): Contiguous float32 ``(planes, H, W)`` maps.
        grad_x (Tensor): The input gradient, added to in place.
        g_ind (Tensor): The indicator's gradient per window.
        div (Tensor): The divisors from :func:`stats`.
        geom (WindowGeometry): The window grid.
        mode (str): ``'positive'`` or ``'mean'``.
    """
    torch.ops.mmact.fles_indicator_backward(grad_x, xf, g_ind, div,
                                            *geom.window, mode)
