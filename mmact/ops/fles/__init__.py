"""FleS math: window geometry, gates, indicators, scales and a fused op.

FleS (flexible scaling; see the FleS paper, Eq. 3-7, App. D, E.12-E.18, J) is

    phi(x) = k_ve * rho(k_ho * x) * x,   (k_ve, k_ho) = softplus(MLP(xbar))

where ``xbar`` is a per-channel *indicator* ("effective mean response")
computed over a reference region of each sample: the whole feature map, a
local window, or all tokens.

Conventions:

* Feature maps are ``(N, C, H, W)``. Token inputs ``(B, L, C)`` are handled by
  the module (:class:`mmact.models.activations.FleS`) as a ``(B, C, L, 1)``
  map with a global region.
* A window geometry (:class:`WindowGeometry`, :mod:`.geometry`) describes the
  window grid; border windows are cut at the border.
* Overlapping windows (``stride < window``): every pixel gets the average of
  the scales of all windows that cover it (the indicator of a window is still
  computed from all of its pixels). With ``stride == window`` every pixel is
  covered exactly once and gets its tile's scales.

Modules: :mod:`.geometry` (window grid), :mod:`.gates` (rho),
:mod:`.indicators` (xbar), :mod:`.scales` (k_ve, k_ho and the composite
reference), :mod:`.fused` (memory-lean autograd op).
"""
from .fused import fles_fused
from .gates import FLES_GATES, fles_gate, fles_gate_and_grad
from .geometry import (WindowGeometry, check_window_args, grid_window,
                       window_area, window_coverage, window_expand,
                       window_geometry, window_scatter, window_sum)
from .indicators import FLES_INDICATORS, fles_indicator, indicator_transform
from .scales import (K_HO_MIN, ScaleFn, fles_apply, fles_mlp_scales,
                     fles_proto_scales, fles_reference, fles_scales,
                     fles_shared_mlp_scales, scales_vjp)

__all__ = [
    'FLES_GATES', 'FLES_INDICATORS', 'K_HO_MIN', 'ScaleFn', 'WindowGeometry',
    'check_window_args', 'grid_window', 'window_geometry', 'window_sum',
    'window_scatter', 'window_coverage', 'window_area', 'window_expand',
    'fles_gate', 'fles_gate_and_grad', 'indicator_transform', 'fles_indicator',
    'fles_mlp_scales', 'fles_shared_mlp_scales', 'fles_proto_scales',
    'fles_scales', 'scales_vjp', 'fles_apply', 'fles_reference', 'fles_fused'
]
