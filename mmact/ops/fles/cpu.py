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

One operator, per-device kernels: with ``MMACT_CUDA_KERNELS=1`` the same
node takes CUDA maps (:func:`cuda_declines`, :func:`cuda_routed`): the pass
operators' CUDA kernels (``csrc/fles_cuda.cu``, :mod:`mmact.ops.cuda_build`)
around the MLP's ATen calls, any MLP size, float32 / float16 / bfloat16,
NCHW or channels-last.
"""
import warnings
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .. import backends, cuda_build
from ..cpu_build import extension, load_extension
from .gates import FLES_GATES
from .geometry import WindowGeometry

__all__ = [
    'KERNEL_GATES', 'KERNEL_MODES', 'LOOP_MACS', 'CUDA_DTYPES', 'loop_sized',
    'operator_entry', 'cuda_routed', 'cuda_route', 'cuda_entry',
    'cuda_declines', 'warn_declined', 'stats', 'apply', 'gate_backward',
    'indicator_backward'
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

#: Map dtypes the CUDA kernels read and write (computed in float32).
CUDA_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_PLAIN_TYPES = (Tensor, torch.nn.Parameter)
# 'cuda': whether CUDA calls go to the operator, once a CUDA call asked
_state: Dict[str, Any] = {}


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


def cuda_routed() -> bool:
    """Whether CUDA maps go to the operator: ``MMACT_CUDA_KERNELS=1`` and
    the CUDA kernels loaded (:func:`mmact.ops.cuda_build.library`, built by
    the first call that asks); the entry is told so
    (``fles_routes``)."""
    if 'cuda' not in _state:
        module = (load_extension()
                  if cuda_build.library() is not None else None)
        if module is not None:
            module.fles_routes(True)
        _state['cuda'] = module is not None
    return _state['cuda']


def cuda_route() -> Optional[bool]:
    """What :func:`cuda_routed` decided under the settings in force, or
    None while no CUDA map has asked (nothing built or loaded)."""
    return _state.get('cuda')


def cuda_entry() -> Callable:
    """The operator's Python entry for CUDA maps (:func:`cuda_routed` was
    true): the extension's, loaded whether or not the C kernels are on."""
    return load_extension().fles


def _unroute() -> None:
    """New settings: the entry takes no CUDA call until asked again."""
    if _state.pop('cuda', False):
        load_extension().fles_routes(False)


backends.on_change(_unroute)


def cuda_declines(x: Tensor, geom: WindowGeometry, gate: str, mode: str,
                  scale_fn_ok: bool,
                  params: Sequence[Tensor]) -> Optional[str]:
    """Why the operator's CUDA kernels do not take FleS on the CUDA map
    ``x``, or None when they do (then :func:`cuda_routed` says whether they
    are loaded). The table runs the next row and warns with the reason.
    A window larger than the map is not a reason: ``geom`` holds it
    clamped to the map (:func:`~.geometry.window_geometry`), as every row
    takes it.

    Args:
        x (Tensor): The ``(N, C, H, W)`` map, on CUDA.
        geom (WindowGeometry): Its window grid.
        gate (str): The gate.
        mode (str): The indicator.
        scale_fn_ok (bool): Whether the scale function is an MLP layout of
            :mod:`.scales` (the operator's).
        params (Sequence[Tensor]): The MLP's parameters.
    """
    if geom.overlapping:
        return 'overlapping windows (stride < window)'
    if gate not in KERNEL_GATES:
        return f'gate {gate!r}'
    if mode not in KERNEL_MODES:
        return f'indicator {mode!r}'
    if not scale_fn_ok:
        return 'a scale function other than the MLP layouts'
    if x.dtype not in CUDA_DTYPES:
        return f'a {x.dtype} map'
    if not (x.layout == torch.strided and type(x) in _PLAIN_TYPES and
            (x.is_contiguous()
             or x.is_contiguous(memory_format=torch.channels_last))):
        return 'a map neither NCHW nor channels-last contiguous'
    for p in params:
        if (p.dtype is not torch.float32 or p.device != x.device
                or type(p) not in _PLAIN_TYPES):
            return (f'MLP parameters {p.dtype} on {p.device} (float32 on '
                    'the map\'s device wanted)')
    return None


def warn_declined(reason: str, row: str) -> None:
    """The one warning of a CUDA call the kernels decline.

    Args:
        reason (str): From :func:`cuda_declines`.
        row (str): The row that runs instead.
    """
    warnings.warn(f'mmact: FleS\'s CUDA kernels (MMACT_CUDA_KERNELS=1) do '
                  f'not take {reason}; the {row} row runs')


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
