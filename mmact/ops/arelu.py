"""AReLU (paper 001, Sec. 3.3; DESIGN §2).

::

    f(x) = C(alpha) * x             x < 0,   C clamps to [0.01, 0.99]
    f(x) = (1 + sigmoid(beta)) * x  x >= 0
"""
from typing import Union

import torch
from torch import Tensor

from .apa import _check_input

__all__ = ['arelu']


def _scalar(p: Union[Tensor, float], name: str, x: Tensor) -> Tensor:
    if not isinstance(p, Tensor):
        p = torch.tensor(float(p), device=x.device)
    if p.numel() != 1:
        raise ValueError(f'{name} must hold a single value, got {p.numel()}')
    return p.reshape(()).to(x.dtype)


def arelu(x: Tensor,
          alpha: Union[Tensor, float] = 0.90,
          beta: Union[Tensor, float] = 2.0) -> Tensor:
    """Attention-based ReLU.

    The clamp of ``alpha`` passes no gradient outside [0.01, 0.99], as in
    the paper.

    Args:
        x (Tensor): Floating-point input.
        alpha (Tensor | float): Negative-side scale before clamping.
            Defaults to 0.90.
        beta (Tensor | float): Positive-side amplification logit.
            Defaults to 2.0.

    Returns:
        Tensor: Same shape and dtype as ``x``.
    """
    _check_input(x, 'arelu')
    neg = _scalar(alpha, 'alpha', x).clamp(0.01, 0.99)
    pos = 1 + torch.sigmoid(_scalar(beta, 'beta', x))
    return torch.relu(x) * pos + torch.clamp(x, max=0) * neg
