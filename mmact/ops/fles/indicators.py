"""FleS indicators: the per-window "effective mean response" of each channel.

Variants (FleS paper, Eq. 5, App. D, E.15): positive-only (default),
softplus-based, quasi-linear and the positive-and-negative mean (ablation).
"""
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from .geometry import WindowGeometry, window_area, window_sum

__all__ = [
    'FLES_INDICATORS', 'check_indicator', 'indicator_transform',
    'indicator_transform_grad', 'fles_indicator', 'float_mask'
]

#: Indicator variants (FleS paper, Eq. 5, E.15, App. D / Tab. 4 P&N).
FLES_INDICATORS = ('positive', 'softplus', 'quasi_linear', 'mean')


def check_indicator(mode: str) -> None:
    """Raise a ValueError naming the accepted indicators if ``mode`` is
    unknown."""
    if mode not in FLES_INDICATORS:
        raise ValueError(f'unknown FleS indicator {mode!r}; '
                         f'choose one of {FLES_INDICATORS}')


def _channel_view(p: Tensor, x: Tensor) -> Tensor:
    """(C,) -> broadcastable against (N, C, H, W)."""
    return p.view(1, -1, *([1] * (x.dim() - 2)))


def float_mask(x: Tensor,
               at_zero: float,
               out: Optional[Tensor] = None) -> Tensor:
    """Float ``x > 0`` (``at_zero=0``) or ``x >= 0`` (``at_zero=1``),
    written straight into a float tensor."""
    if out is None:
        out = torch.empty_like(x)
    return torch.ge(x, 0, out=out) if at_zero else torch.gt(x, 0, out=out)


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

    Args:
        x: ``(N, C, H, W)`` (or ``(n, H, W)`` for modes without gamma).
        mode: one of :data:`FLES_INDICATORS`.
        gamma, beta: ``(C,)`` parameters of the softplus indicator.
        eta: threshold of the quasi-linear indicator.
    """
    check_indicator(mode)
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


def indicator_transform_grad(x: Tensor, mode: str, eta: float) -> Tensor:
    """f'(x) of the ``positive`` and ``quasi_linear`` indicator transforms
    (relu'(0) = 0, as in autograd)."""
    if mode == 'positive':
        return float_mask(x, 0.0)
    low = torch.exp(torch.clamp(x / eta - 1.0, max=0.0))
    return torch.where(x >= eta, torch.ones_like(x), low)


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

    Args:
        x: ``(N, C, H, W)``.
        geom: the window grid.
        mode, gamma, beta, eta: see :func:`indicator_transform`.
    """
    values = window_sum(indicator_transform(x, mode, gamma, beta, eta), geom)
    if mode == 'positive':
        count = window_sum((x >= 0).to(values.dtype), geom)
        return values / count.clamp_min(1.0)
    return values / window_area(geom, x.device, values.dtype)
