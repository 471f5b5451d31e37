"""IGLU and IGLU-APPROX (paper 002, Eq. 8 and 11; DESIGN §2).

::

    IGLU(x; s)        = x * (1/2 + arctan(s x) / pi)
    IGLU-APPROX(x; s) = (x / 2) * (1 + 2 relu(s x)) / (1 + |s x|)

Half-precision inputs are evaluated in float32. The gate of IGLU is the Cauchy CDF with scale ``1 / s``; large ``s`` tends to
ReLU, ``s -> 0`` to ``x / 2``. IGLU-APPROX replaces arctan by the rational
``(pi/2) * u / (1 + |u|)`` and needs no transcendental function.
"""
import math
from typing import Union

import torch
from torch import Tensor

from .apa import _check_input, _compute_dtype

__all__ = ['iglu', 'iglu_approx']


def _sigma(sigma: Union[Tensor, float], x: Tensor) -> Union[Tensor, float]:
    if isinstance(sigma, Tensor):
        if sigma.numel() != 1:
            raise ValueError('sigma must hold a single value, got '
                             f'{sigma.numel()} values')
        return sigma.reshape(()).to(x.dtype)
    return float(sigma)


def iglu(x: Tensor, sigma: Union[Tensor, float] = 1.0) -> Tensor:
    """IGLU ``x * (1/2 + arctan(sigma x) / pi)``.

    Args:
        x (Tensor): Floating-point input.
        sigma (Tensor | float): Gate sharpness (> 0 in the paper); a float
            or a one-value tensor (learnable). Defaults to 1.0.

    Returns:
        Tensor: Same shape and dtype as ``x``.
    """
    _check_input(x, 'iglu')
    z = x.to(_compute_dtype(x))  # half inputs are evaluated in float32
    gate = 0.5 + torch.atan(z * _sigma(sigma, z)) * (1.0 / math.pi)
    return (z * gate).to(x.dtype)


def iglu_approx(x: Tensor, sigma: Union[Tensor, float] = 1.0) -> Tensor:
    """IGLU-APPROX ``(x / 2) * (1 + 2 relu(sigma x)) / (1 + |sigma x|)``.

    Args:
        x (Tensor): Floating-point input.
        sigma (Tensor | float): Gate sharpness (> 0 in the paper); a float
            or a one-value tensor (learnable). Defaults to 1.0.

    Returns:
        Tensor: Same shape and dtype as ``x``.
    """
    _check_input(x, 'iglu_approx')
    z = x.to(_compute_dtype(x))  # half inputs are evaluated in float32
    u = z * _sigma(sigma, z)
    gate = (0.5 + torch.relu(u)) / (1 + u.abs())
    return (z * gate).to(x.dtype)
