"""FleS math: indicator statistics, window geometry, gates and a fused op.

FleS (flexible scaling, paper 004, Eq. 3-7, App. D, E.12-E.18, J) is

    phi(x) = k_ve * rho(k_ho * x) * x,   (k_ve, k_ho) = softplus(MLP(xbar))

where ``xbar`` is a per-channel *indicator* ("effective mean response")
computed over a reference region of each sample: the whole feature map, a
local window, or all tokens.

Conventions used throughout this module:

* Feature maps are ``(N, C, H, W)``. Token inputs ``(B, L, C)`` are handled by
  the module (:class:`mmact.models.activations.FleS`) as a ``(B, C, L, 1)``
  map with a global region.
* A *window geometry* (:class:`WindowGeometry`) describes the window grid.
  Windows start at ``0, s, 2s, ...`` along each axis; there are
  ``n = ceil((H - k) / s) + 1`` of them, so the grid always covers the map.
  Windows that run past the border are cut at the border and use their own
  element counts (no padding values are ever counted).
* Overlapping windows (``stride < window``): every pixel gets the
  **average of the scales of all windows that cover it** (the indicator of a
  window is still computed from all of its pixels). With ``stride == window``
  every pixel is covered exactly once and gets its tile's scales.
* Everything is computed with pooling / gathers / transposed convolution over
  the whole tensor; there is no Python loop over windows. The fused op
  (:func:`fles_fused`) loops over *blocks of channel planes* only, so that its
  intermediates stay in the CPU cache.
"""
import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

__all__ = [
    'FLES_GATES', 'FLES_INDICATORS', 'WindowGeometry', 'window_geometry',
    'window_sum', 'window_scatter', 'window_coverage', 'window_area',
    'window_expand', 'fles_gate', 'fles_gate_and_grad',
    'indicator_transform', 'fles_indicator', 'fles_mlp_scales',
    'fles_proto_scales', 'fles_scales', 'fles_apply', 'fles_reference',
    'fles_fused'
]

#: Weighting functions rho (paper E.14).
FLES_GATES = ('sigmoid', 'erf', 'tanh_softplus', 'tanh_gate')
#: Indicator variants (paper Eq. 5, E.15, App. D / Tab. 4 P&N ablation).
FLES_INDICATORS = ('positive', 'softplus', 'quasi_linear', 'mean')

#: Numerical floor of k_ho (softplus can underflow to 0 in float32; the fused
#: op divides by k_ho). Below it k_ho receives no gradient.
K_HO_MIN = 1e-6

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)

# --------------------------------------------------------------------------
# Window geometry
# --------------------------------------------------------------------------


def _pair(value, name: str) -> Tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    if (not isinstance(value, (tuple, list)) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool)
                       for v in value)):
        raise TypeError(f'{name} must be an int or a pair of ints, '
                        f'got {value!r}')
    if min(value) <= 0:
        raise ValueError(f'{name} must be positive, got {tuple(value)}')
    return int(value[0]), int(value[1])


def check_window_args(window_size, stride) -> Tuple[Optional[Tuple[int, int]],
                                                      Optional[Tuple[int,
                                                                 int]]]:
    """Validate ``window_size`` / ``stride`` (construction-time checks).

    Returns the normalised pairs. ``stride`` needs a ``window_size`` and may
    not exceed it (a larger stride would leave pixels without a window).
    """
    if window_size is None:
        if stride is not None:
            raise ValueError(f'stride={stride!r} needs a window_size; '
                             'window_size=None uses the whole map')
        return None, None
    window = _pair(window_size, 'window_size')
    if stride is None:
        return window, window
    step = _pair(stride, 'stride')
    if step[0] > window[0] or step[1] > window[1]:
        raise ValueError(f'stride {step} must not exceed window_size '
                         f'{window}: pixels between windows would have no '
                         'scale')
    return window, step


@dataclass(frozen=True)
class WindowGeometry:
    """A window grid on an ``height x width`` map.

    Attributes:
        height, width: map size.
        window: effective ``(kh, kw)`` (after clamping to the map).
        stride: effective ``(sh, sw)``.
        grid: number of windows ``(nh, nw)``.
        clamped: whether the requested window was larger than the map.
    """
    height: int
    width: int
    window: Tuple[int, int]
    stride: Tuple[int, int]
    grid: Tuple[int, int]
    clamped: bool = False

    @property
    def is_global(self) -> bool:
        return self.grid == (1, 1) and self.window == (self.height,
                                                         self.width)

    @property
    def overlapping(self) -> bool:
        return self.stride != self.window and not self.is_global


def window_geometry(height: int,
                    width: int,
                    window_size=None,
                    stride=None) -> WindowGeometry:
    """Window grid for a map (``window_size=None``: one global window).

    A window larger than the map is clamped to the map size (the result has
    ``clamped=True`` so callers can warn); the stride is clamped to the
    clamped window.
    """
    if height <= 0 or width <= 0:
        raise ValueError(f'empty feature map {height}x{width}')
    window, step = check_window_args(window_size, stride)
    if window is None:
        return WindowGeometry(height, width, (height, width),
                              (height, width), (1, 1))
    kh, kw = min(window[0], height), min(window[1], width)
    clamped = (kh, kw) != window
    sh, sw = min(step[0], kh), min(step[1], kw)
    nh = -(-(height - kh) // sh) + 1
    nw = -(-(width - kw) // sw) + 1
    return WindowGeometry(height, width, (kh, kw), (sh, sw), (nh, nw),
                          clamped)


def window_sum(v: Tensor, geom: WindowGeometry) -> Tensor:
    """Sum of ``v`` over every window: ``(..., H, W) -> (..., nh, nw)``.

    ``v`` may be 3-D ``(n, H, W)`` or 4-D ``(N, C, H, W)``. Border windows sum
    only their in-map elements.
    """
    if geom.is_global:
        return v.sum(dim=(-2, -1), keepdim=True)
    return F.avg_pool2d(
        v, geom.window, geom.stride, ceil_mode=True, divisor_override=1)


def window_scatter(k: Tensor, geom: WindowGeometry) -> Tensor:
    """Sum over all windows covering a pixel: ``(..., nh, nw) -> (..., H, W)``.

    This is the adjoint of :func:`window_sum`. For tiles it is a gather
    (nearest upsampling, cropped to the map); for overlapping windows it is a
    transposed convolution with a ones kernel.

    Args:
        k: ``(n, nh, nw)`` or ``(N, C, nh, nw)``.
    """
    if geom.is_global:
        return k.expand(*k.shape[:-2], geom.height, geom.width)
    lead = k.shape[:-2]
    if not geom.overlapping:
        kh, kw = geom.window
        rows = torch.arange(geom.height, device=k.device) // kh
        cols = torch.arange(geom.width, device=k.device) // kw
        index = (rows[:, None] * geom.grid[1] + cols[None, :]).reshape(-1)
        flat = k.reshape(-1, geom.grid[0] * geom.grid[1])
        out = flat.index_select(1, index)
        return out.view(*lead, geom.height, geom.width)
    kh, kw = geom.window
    ones = k.new_ones(1, 1, kh, kw)
    out = F.conv_transpose2d(
        k.reshape(-1, 1, *geom.grid), ones, stride=geom.stride)
    out = out[..., :geom.height, :geom.width]
    return out.reshape(*lead, geom.height, geom.width)


def window_coverage(geom: WindowGeometry,
                    device=None,
                    dtype=torch.float32) -> Tensor:
    """Number of windows covering each pixel, ``(H, W)``."""
    ones = torch.ones(1, *geom.grid, device=device, dtype=dtype)
    return window_scatter(ones, geom)[0]


def window_area(geom: WindowGeometry,
                device=None,
                dtype=torch.float32) -> Tensor:
    """Number of in-map pixels of each window, ``(nh, nw)``."""
    ones = torch.ones(1, geom.height, geom.width, device=device, dtype=dtype)
    return window_sum(ones, geom)[0]


def window_expand(k: Tensor, geom: WindowGeometry) -> Tensor:
    """Per-pixel value of window quantities ``(..., nh, nw) -> (..., H, W)``.

    Each pixel gets the value of its window; with overlapping windows the
    average over all windows covering it.
    """
    out = window_scatter(k, geom)
    if geom.overlapping:
        out = out / window_coverage(geom, k.device, k.dtype)
    return out


# --------------------------------------------------------------------------
# Gates rho
# --------------------------------------------------------------------------


def _check_gate(gate: str) -> None:
    if gate not in FLES_GATES:
        raise ValueError(f'unknown FleS gate {gate!r}; '
                         f'choose one of {FLES_GATES}')


def fles_gate(z: Tensor, gate: str = 'sigmoid') -> Tensor:
    """Weighting function rho(z) (paper E.14).

    ``sigmoid`` (FleS default, SiLU-like), ``erf`` (0.5 (1 + erf(z/sqrt 2)),
    GELU-like), ``tanh_softplus`` (tanh(softplus(z)), Mish-like) and
    ``tanh_gate`` (0.5 (tanh(z) + 1) = sigmoid(2z)).
    """
    _check_gate(gate)
    if gate == 'sigmoid':
        return torch.sigmoid(z)
    if gate == 'erf':
        return 0.5 * (1.0 + torch.erf(z * _INV_SQRT2))
    if gate == 'tanh_softplus':
        return torch.tanh(F.softplus(z))
    return 0.5 * (torch.tanh(z) + 1.0)


def fles_gate_and_grad(z: Tensor, gate: str = 'sigmoid'
                       ) -> Tuple[Tensor, Tensor]:
    """``(rho(z), rho'(z))`` with analytic derivatives (no autograd)."""
    _check_gate(gate)
    if gate == 'sigmoid':
        r = torch.sigmoid(z)
        return r, r * (1.0 - r)
    if gate == 'tanh_gate':
        r = torch.sigmoid(2.0 * z)
        return r, 2.0 * r * (1.0 - r)
    if gate == 'erf':
        r = 0.5 * (1.0 + torch.erf(z * _INV_SQRT2))
        return r, torch.exp(-0.5 * z * z) * _INV_SQRT2PI
    t = torch.tanh(F.softplus(z))
    return t, (1.0 - t * t) * torch.sigmoid(z)


# --------------------------------------------------------------------------
# Indicators
# --------------------------------------------------------------------------


def _check_indicator(mode: str) -> None:
    if mode not in FLES_INDICATORS:
        raise ValueError(f'unknown FleS indicator {mode!r}; '
                         f'choose one of {FLES_INDICATORS}')


def _channel_view(p: Tensor, x: Tensor) -> Tensor:
    """(C,) -> broadcastable against (N, C, H, W)."""
    return p.view(1, -1, *([1] * (x.dim() - 2)))


def indicator_transform(x: Tensor,
                        mode: str = 'positive',
                        gamma: Optional[Tensor] = None,
                        beta: Optional[Tensor] = None,
                        eta: float = 0.1) -> Tensor:
    """Elementwise value that the indicator averages, for ``(N, C, H, W)``.

    * ``positive``: relu(x) (divided later by the count of x >= 0, Eq. 5).
    * ``softplus``: softplus(gamma_c x + beta_c) (Eq. 65).
    * ``quasi_linear``: x if x >= eta else eta exp(x / eta - 1) (Eq. 66).
    * ``mean``: x (positive-and-negative mean, ablation).
    """
    _check_indicator(mode)
    if mode == 'positive':
        return F.relu(x)
    if mode == 'softplus':
        if gamma is None or beta is None:
            raise ValueError('the softplus indicator needs gamma and beta')
        return F.softplus(_channel_view(gamma, x) * x + _channel_view(beta, x))
    if mode == 'quasi_linear':
        # exp argument clamped at 0 in the linear branch (never selected).
        low = eta * torch.exp(torch.clamp(x / eta - 1.0, max=0.0))
        return torch.where(x >= eta, x, low)
    return x


def fles_indicator(x: Tensor,
                   geom: WindowGeometry,
                   mode: str = 'positive',
                   gamma: Optional[Tensor] = None,
                   beta: Optional[Tensor] = None,
                   eta: float = 0.1) -> Tensor:
    """Per-window, per-channel indicator ``(N, C, H, W) -> (N, C, nh, nw)``.

    ``positive``: sum(relu(x)) / max(count(x >= 0), 1) in each window; the
    other variants: mean of :func:`indicator_transform` over the window's
    in-map pixels. Differentiable (composite autograd).
    """
    values = window_sum(indicator_transform(x, mode, gamma, beta, eta), geom)
    if mode == 'positive':
        count = window_sum((x >= 0).to(values.dtype), geom)
        return values / count.clamp_min(1.0)
    return values / window_area(geom, x.device, values.dtype)


# --------------------------------------------------------------------------
# Scales
# --------------------------------------------------------------------------


def fles_mlp_scales(ind: Tensor, fc1_weight: Tensor, fc1_bias: Tensor,
                    fc2_weight: Tensor,
                    fc2_bias: Tensor) -> Tuple[Tensor, Tensor]:
    """``(k_ve, k_ho)`` from two MLPs scanned over the window grid.

    Each MLP is ``Linear(C, h) -> ReLU -> Linear(h, C)`` followed by softplus,
    applied at every window (a 1x1 convolution on the grid).

    Args:
        ind: ``(N, C, nh, nw)`` indicators.
        fc1_weight: ``(2, h, C)``; fc1_bias: ``(2, h)``;
        fc2_weight: ``(2, C, h)``; fc2_bias: ``(2, C)``. Index 0 is the
            vertical (k_ve) MLP, index 1 the horizontal (k_ho) MLP.

    Returns:
        Two ``(N, C, nh, nw)`` tensors, both positive (``k_ho`` is floored
        at :data:`K_HO_MIN`).
    """
    n, c, gh, gw = ind.shape
    flat = ind.reshape(n, c, gh * gw)
    hidden = torch.einsum('khc,ncg->knhg', fc1_weight, flat)
    hidden = F.relu(hidden + fc1_bias[:, None, :, None])
    out = torch.einsum('kch,knhg->kncg', fc2_weight, hidden)
    out = F.softplus(out + fc2_bias[:, None, :, None])
    out = out.reshape(2, n, c, gh, gw)
    return out[0], out[1].clamp_min(K_HO_MIN)


def fles_proto_scales(x: Tensor, alpha: Tensor,
                      gamma: Tensor) -> Tuple[Tensor, Tensor]:
    """FleS-Proto scales (Eq. 4-6): batch statistics, ablation only.

    The positive-only indicator is taken over the *whole mini-batch* and
    spatial extent per channel, normalised by its mean over channels (Eq. 6),
    and mapped by ``softplus(alpha * mu + gamma)`` with per-layer scalars
    (index 0: k_ve, 1: k_ho). A sample's output therefore depends on the
    other samples of the batch, in training and in eval.

    Args:
        x: ``(N, C, H, W)``.
        alpha, gamma: ``(2,)``.

    Returns:
        ``(k_ve, k_ho)`` of shape ``(1, C, 1, 1)``.
    """
    dims = (0, 2, 3)
    total = F.relu(x).sum(dim=dims)
    count = (x >= 0).to(total.dtype).sum(dim=dims).clamp_min(1.0)
    ind = total / count
    mu = ind / ind.mean().clamp_min(torch.finfo(ind.dtype).tiny)
    k = F.softplus(alpha[:, None] * mu[None] + gamma[:, None])
    return k[0].view(1, -1, 1, 1), k[1].view(1, -1, 1, 1)


def fles_apply(x: Tensor, k_ve: Tensor, k_ho: Tensor,
               gate: str = 'sigmoid') -> Tensor:
    """``k_ve * rho(k_ho * x) * x`` with broadcastable per-pixel scales."""
    return k_ve * fles_gate(k_ho * x, gate) * x


ScaleFn = Callable[..., Tuple[Tensor, Tensor]]


def fles_scales(x: Tensor,
                geom: WindowGeometry,
                params: Sequence[Tensor],
                mode: str = 'positive',
                gamma: Optional[Tensor] = None,
                beta: Optional[Tensor] = None,
                eta: float = 0.1,
                scale_fn: ScaleFn = fles_mlp_scales) -> Tuple[Tensor, Tensor]:
    """Per-window ``(k_ve, k_ho)``, each ``(N, C, nh, nw)``, of ``x``.

    ``params`` are passed to ``scale_fn(ind, *params)``.
    """
    return scale_fn(fles_indicator(x, geom, mode, gamma, beta, eta), *params)


def fles_reference(x: Tensor,
                   geom: WindowGeometry,
                   params: Sequence[Tensor],
                   gate: str = 'sigmoid',
                   mode: str = 'positive',
                   gamma: Optional[Tensor] = None,
                   beta: Optional[Tensor] = None,
                   eta: float = 0.1,
                   scale_fn: ScaleFn = fles_mlp_scales) -> Tensor:
    """Composite (autograd) FleS on ``(N, C, H, W)``; any memory layout.

    ``params`` are passed to ``scale_fn(ind, *params)``.
    """
    k_ve, k_ho = fles_scales(x, geom, params, mode, gamma, beta, eta,
                             scale_fn)
    return fles_apply(x, window_expand(k_ve, geom), window_expand(k_ho, geom),
                      gate)


# --------------------------------------------------------------------------
# Fused op (saves only the input; blocked over channel planes)
# --------------------------------------------------------------------------


def _transform_grad(x: Tensor, mode: str, eta: float) -> Tensor:
    """f'(x) of the ``positive`` and ``quasi_linear`` indicator transforms
    (relu'(0) = 0, as in autograd)."""
    if mode == 'positive':
        return _mask(x, 0.0)
    low = torch.exp(torch.clamp(x / eta - 1.0, max=0.0))
    return torch.where(x >= eta, torch.ones_like(x), low)


# For each gate a native fused kernel ``base`` (in-place form, backward
# ``g * base'(u)``) and a constant c with rho(z) = base(c z) / (c z), so that
# k_ve * rho(k_ho x) * x = k_ve / (c k_ho) * base(c k_ho x).
_BASE = {
    'sigmoid': (lambda u: F.silu(u, inplace=True),
                torch.ops.aten.silu_backward, 1.0),
    'tanh_gate': (lambda u: F.silu(u, inplace=True),
                  torch.ops.aten.silu_backward, 2.0),
    'erf': (torch.ops.aten.gelu_, lambda g, u: torch.ops.aten.gelu_backward(
        g, u, approximate='none'), 1.0),
    'tanh_softplus': (lambda u: F.mish(u, inplace=True),
                      torch.ops.aten.mish_backward, 1.0),
}


class _Tiling:
    """Broadcast per-window values over pixels without materialising them.

    For tiles (and the global window) the window grid ``(n, nh, nw)`` is
    first expanded along the columns only (``(n, nh, W)``, small), then a
    ``(n, H, W)`` block is viewed per band of tile rows as
    ``(n, th, eh, W)`` against ``(n, th, 1, W)``: one broadcasting kernel
    per band (full tile rows, then the cut bottom row), contiguous inner loop.
    """

    def __init__(self, geom: WindowGeometry):
        kh, kw = geom.window
        qh, rh = divmod(geom.height, kh)
        self.kw, self.width = kw, geom.width
        self.is_global = geom.is_global
        self.bands = []  # (pixel rows, (tiles, tile height), grid rows)
        if qh:
            self.bands.append((slice(0, qh * kh), (qh, kh), slice(0, qh)))
        if rh:
            self.bands.append((slice(qh * kh, geom.height), (1, rh),
                               slice(qh, qh + 1)))

    def _expand_cols(self, k: Tensor) -> Tensor:
        if self.is_global:
            return k  # (n, 1, 1) broadcasts over (n, 1, H, W) views
        n, nh, nw = k.shape
        wide = k[..., None].expand(n, nh, nw, self.kw).reshape(
            n, nh, nw * self.kw)
        return wide[..., :self.width]

    def mul(self, t: Tensor, k: Tensor, out: Tensor) -> Tensor:
        """``out = t * expand(k)`` (``out`` may be ``t``)."""
        kc = self._expand_cols(k)
        for rows, shape, grid_rows in self.bands:
            torch.mul(
                t[:, rows].unflatten(1, shape),
                kc[:, grid_rows, None],
                out=out[:, rows].unflatten(1, shape))
        return out

    def addcmul_(self, out: Tensor, t: Optional[Tensor], k: Tensor) -> Tensor:
        """``out += t * expand(k)`` (``t=None``: ``out += expand(k)``)."""
        kc = self._expand_cols(k)
        for rows, shape, grid_rows in self.bands:
            view = out[:, rows].unflatten(1, shape)
            if t is None:
                view.add_(kc[:, grid_rows, None])
            else:
                view.addcmul_(t[:, rows].unflatten(1, shape),
                              kc[:, grid_rows, None])
        return out


def _window_dot(a: Tensor, b: Tensor, geom: WindowGeometry) -> Tensor:
    """Window sums of ``a * b`` for 3-D blocks (global: no temporary)."""
    if geom.is_global:
        n = a.shape[0]
        return torch.linalg.vecdot(a.reshape(n, -1),
                                   b.reshape(n, -1)).view(n, 1, 1)
    return window_sum(a * b, geom)


def _mask(x: Tensor, at_zero: float, out: Optional[Tensor] = None) -> Tensor:
    """Float ``x > 0`` (``at_zero=0``) or ``x >= 0`` (``at_zero=1``),
    written straight into a float tensor."""
    if out is None:
        out = torch.empty_like(x)
    return torch.ge(x, 0, out=out) if at_zero else torch.gt(x, 0, out=out)


class _FleSFunction(torch.autograd.Function):
    """Fused FleS: forward and backward save only ``x`` (plus tiny tensors).

    The indicator and the gate are evaluated block by block over ``N*C``
    channel planes (each block ~``block_bytes``), so intermediates stay in
    cache. Derivatives of the gate are analytic; the scale MLP is re-run in
    backward on the (small) indicator grid and differentiated with autograd.

    With tiles or a global window the scales are constant per window: they
    are broadcast over tile views (:class:`_Tiling`) and the gate is
    evaluated through the fused native kernels (SiLU / GELU / Mish):
    ``y = k_ve / (c k_ho) * base(c k_ho x)``; the window gradients follow
    from ``d/dk_ve = sum g base(u) / (c k_ho)`` and
    ``d/dk_ho = k_ve / (c k_ho^2) * sum g (u base'(u) - base(u))``.
    Overlapping windows use per-pixel averaged scales and direct formulas.
    """

    @staticmethod
    def forward(ctx, x: Tensor, geom: WindowGeometry, gate: str, mode: str,
                eta: float, scale_fn: ScaleFn, block: int,
                gamma: Optional[Tensor], beta: Optional[Tensor],
                *params: Tensor) -> Tensor:
        n, c, h, w = x.shape
        nh, nw = geom.grid
        planes = n * c
        xf = x.reshape(planes, h, w)
        out = torch.empty_like(xf)
        sums = x.new_empty(planes, nh, nw)
        gam = bet = None
        if mode == 'softplus':
            gam = gamma.repeat(n).view(planes, 1, 1)
            bet = beta.repeat(n).view(planes, 1, 1)
        if mode == 'positive':
            count = x.new_empty(planes, nh, nw)
        else:
            count = window_area(geom, x.device, x.dtype)
        for i in range(0, planes, block):
            sl = slice(i, i + block)
            xs, buf = xf[sl], out[sl]
            if mode == 'positive':
                torch.clamp(xs, min=0, out=buf)
                sums[sl] = window_sum(buf, geom)
                count[sl] = window_sum(_mask(xs, 1.0, out=buf), geom)
            elif mode == 'softplus':
                torch.mul(xs, gam[sl], out=buf).add_(bet[sl])
                sums[sl] = window_sum(F.softplus(buf), geom)
            elif mode == 'quasi_linear':
                sums[sl] = window_sum(
                    indicator_transform(xs, mode, eta=eta), geom)
            else:
                sums[sl] = window_sum(xs, geom)
        if mode == 'positive':
            count.clamp_(min=1.0)
        ind = (sums / count).view(n, c, nh, nw)
        k_ve, k_ho = scale_fn(ind, *params)
        kv = k_ve.reshape(planes, nh, nw)
        ko = k_ho.reshape(planes, nh, nw)
        if geom.overlapping:
            cover = window_coverage(geom, x.device, x.dtype)
            for i in range(0, planes, block):
                sl = slice(i, i + block)
                xs, buf = xf[sl], out[sl]
                torch.mul(xs, window_scatter(ko[sl], geom) / cover, out=buf)
                _gate_inplace(buf, gate)
                buf.mul_(xs).mul_(window_scatter(kv[sl], geom) / cover)
        else:
            tiling = _Tiling(geom)
            base, _, cst = _BASE[gate]
            ko_c = ko * cst
            ratio = kv / ko_c
            for i in range(0, planes, block):
                sl = slice(i, i + block)
                xs, buf = xf[sl], out[sl]
                tiling.mul(xs, ko_c[sl], buf)
                base(buf)
                tiling.mul(buf, ratio[sl], buf)
        ctx.geom, ctx.gate, ctx.mode, ctx.eta = geom, gate, mode, eta
        ctx.scale_fn, ctx.block = scale_fn, block
        ctx.has_gamma = gamma is not None
        extra = [gamma, beta] if gamma is not None else []
        ctx.save_for_backward(x, ind, count, *extra, *params)
        return out.view_as(x)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        geom, gate, mode, eta = ctx.geom, ctx.gate, ctx.mode, ctx.eta
        block = ctx.block
        saved = ctx.saved_tensors
        x, ind, count = saved[:3]
        rest = saved[3:]
        gamma = beta = None
        if ctx.has_gamma:
            gamma, beta, rest = rest[0], rest[1], rest[2:]
        params = rest
        n, c, h, w = x.shape
        nh, nw = geom.grid
        planes = n * c
        xf = x.reshape(planes, h, w)
        gf = grad_out.contiguous().reshape(planes, h, w)

        with torch.enable_grad():
            ind_leaf = ind.detach().requires_grad_()
            leaves = [p.detach().requires_grad_() for p in params]
            k_ve, k_ho = ctx.scale_fn(ind_leaf, *leaves)
        kv = k_ve.detach().reshape(planes, nh, nw)
        ko = k_ho.detach().reshape(planes, nh, nw)

        grad_x = torch.empty_like(xf)
        tiling = None
        if geom.overlapping:
            g_ve = x.new_empty(planes, nh, nw)
            g_ho = x.new_empty(planes, nh, nw)
            cover = window_coverage(geom, x.device, x.dtype)
            for i in range(0, planes, block):
                sl = slice(i, i + block)
                xs, gs = xf[sl], gf[sl]
                kom = window_scatter(ko[sl], geom) / cover
                kvm = window_scatter(kv[sl], geom) / cover
                u = xs * kom
                r, dr = fles_gate_and_grad(u, gate)
                a = gs * xs
                # pixel gradients of the averaged scales, then E^T
                g_ve[sl] = window_sum(a * r / cover, geom)
                g_ho[sl] = window_sum(
                    a.mul_(xs).mul_(dr).mul_(kvm).div_(cover), geom)
                # dy/dx = k_ve * (rho(u) + u * rho'(u))
                torch.addcmul(r, u, dr, out=grad_x[sl]).mul_(kvm).mul_(gs)
        else:
            tiling = _Tiling(geom)
            base, base_grad, cst = _BASE[gate]
            ko_c = ko * cst
            s_hu = x.new_empty(planes, nh, nw)
            s_gb = x.new_empty(planes, nh, nw)
            for i in range(0, planes, block):
                sl = slice(i, i + block)
                xs, gs = xf[sl], gf[sl]
                u = tiling.mul(xs, ko_c[sl], torch.empty_like(xs))
                hb = base_grad(gs, u)  # g * base'(u)
                s_hu[sl] = _window_dot(hb, u, geom)
                s_gb[sl] = _window_dot(base(u), gs, geom)
                tiling.mul(hb, kv[sl], grad_x[sl])
            g_ve = s_gb / ko_c
            g_ho = (s_hu - s_gb).mul_(kv).div_(ko_c * ko)

        inputs = [ind_leaf] + leaves
        grads = torch.autograd.grad((k_ve, k_ho), inputs,
                                    (g_ve.view_as(k_ve), g_ho.view_as(k_ho)),
                                    allow_unused=True)
        g_ind = grads[0]
        param_grads = list(grads[1:])
        g_gamma = g_beta = None
        if g_ind is not None:
            # d ind_w / d x_p = f'(x_p) / count_w for every window w
            # containing p: grad_x += f'(x) * scatter(g_ind / count)
            q = g_ind.reshape(planes, nh, nw) / count

            def add_scattered(dst, t, sl):
                if tiling is not None:
                    return tiling.addcmul_(dst, t, q[sl])
                qm = window_scatter(q[sl], geom)
                return dst.add_(qm) if t is None else dst.addcmul_(t, qm)

            if mode == 'softplus':
                gam = gamma.repeat(n).view(planes, 1, 1)
                bet = beta.repeat(n).view(planes, 1, 1)
                acc_gamma = x.new_zeros(planes)
                acc_beta = x.new_zeros(planes)
            for i in range(0, planes, block):
                sl = slice(i, i + block)
                xs = xf[sl]
                if mode == 'softplus':
                    sig = torch.sigmoid(gam[sl] * xs + bet[sl])
                    t = add_scattered(torch.zeros_like(xs), sig, sl)
                    acc_beta[sl] = t.sum(dim=(-2, -1))
                    acc_gamma[sl] = torch.linalg.vecdot(
                        t.reshape(t.shape[0], -1), xs.reshape(t.shape[0], -1))
                    grad_x[sl].addcmul_(t, gam[sl])
                elif mode == 'mean':
                    add_scattered(grad_x[sl], None, sl)
                else:
                    add_scattered(grad_x[sl], _transform_grad(xs, mode, eta),
                                  sl)
            if mode == 'softplus':
                g_gamma = acc_gamma.view(n, c).sum(0)
                g_beta = acc_beta.view(n, c).sum(0)
        return (grad_x.view_as(x), None, None, None, None, None, None,
                g_gamma, g_beta, *param_grads)


def _gate_inplace(u: Tensor, gate: str) -> Tensor:
    """rho(u) written into ``u``."""
    if gate == 'sigmoid':
        return u.sigmoid_()
    if gate == 'tanh_gate':
        return u.mul_(2.0).sigmoid_()
    if gate == 'erf':
        return u.mul_(_INV_SQRT2).erf_().add_(1.0).mul_(0.5)
    return u.copy_(torch.tanh(F.softplus(u)))


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

    Same result as :func:`fles_reference` (up to rounding); saves only ``x``
    for backward (plus the tiny indicator grid and parameters). Not twice
    differentiable.

    Args:
        block_bytes: target size of one block of channel planes.
    """
    _check_gate(gate)
    _check_indicator(mode)
    if x.dim() != 4:
        raise ValueError(f'fles_fused expects (N, C, H, W), got {x.shape}')
    x = x.contiguous()
    plane = x.shape[-2] * x.shape[-1] * x.element_size()
    block = max(1, block_bytes // max(plane, 1))
    if mode != 'softplus':
        gamma = beta = None
    return _FleSFunction.apply(x, geom, gate, mode, float(eta), scale_fn,
                               block, gamma, beta, *params)
