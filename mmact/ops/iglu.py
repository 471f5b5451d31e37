"""IGLU and IGLU-APPROX (Kang et al., IGLU, Eq. 8 and 11; math in
docs/design/operators.md).

::

    IGLU(x; s)        = x * (1/2 + arctan(s x) / pi)
    IGLU-APPROX(x; s) = (x / 2) * (1 + 2 relu(s x)) / (1 + |s x|)

Half-precision inputs are evaluated in float32. The gate of IGLU is the
Cauchy CDF with scale ``1 / s``; large ``s`` tends to ReLU, ``s -> 0`` to
``x / 2``. IGLU-APPROX replaces arctan by the rational
``(pi/2) * u / (1 + |u|)`` and needs no transcendental function. The
formula is :func:`composite`; the ``torch`` row of the table
(:mod:`mmact.ops.table`) saves only the input (and sigma) and recomputes
the gate in backward::

    IGLU:    g = 1/2 + atan(u)/pi,          g'(u) = 1 / (pi (1 + u^2))
    APPROX:  g = (1/2 + relu(u)) / (1+|u|), g'(u) = 1 / (2 (1 + |u|)^2)

with ``u = s x``: ``dy/dx = g + s x g'(u)``, ``dy/ds = x^2 g'(u)``.
"""
import math
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .checks import check_input, compute_dtype, scalar_param
from .table import Implementation, Operator, call

__all__ = ['iglu', 'iglu_approx', 'composite', 'grads', 'OPERATORS']


def _gate(u: Tensor, approx: bool) -> Tensor:
    if approx:
        return (0.5 + torch.relu(u)) / (1 + u.abs())
    return 0.5 + torch.atan(u) * (1.0 / math.pi)


def composite(x: Tensor, sigma: Tensor, approx: bool) -> Tensor:
    """IGLU (``approx=False``) or IGLU-APPROX in standard ops.

    Args:
        x (Tensor): The input.
        sigma (Tensor): The gate sharpness (one value).
        approx (bool): IGLU-APPROX instead of IGLU.
    """
    z = x.to(compute_dtype(x))  # half inputs are evaluated in float32
    u = z * sigma.reshape(()).to(z.dtype)
    return (z * _gate(u, approx)).to(x.dtype)


def grads(grad_out: Tensor, needs: Sequence[bool], x: Tensor, sigma: Tensor,
          approx: bool) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """``(grad_x, grad_sigma)``, None where not in ``needs``.

    Args:
        grad_out (Tensor): The gradient of the output.
        needs (Sequence[bool]): Which of ``(x, sigma)`` need one.
        x, sigma, approx: As :func:`composite`.
    """
    need_x, need_s = needs
    z = x.to(compute_dtype(x))
    s = sigma.reshape(()).to(z.dtype)
    go = grad_out.to(z.dtype)
    u = z * s
    if approx:
        gate = torch.relu(u).add_(0.5)
        q = u.abs_().add_(1).reciprocal_()
        gate.mul_(q)
        dg = q.mul_(q).mul_(0.5)  # g'(u)
    else:
        gate = torch.atan(u).mul_(1.0 / math.pi).add_(0.5)
        dg = u.mul_(u).add_(1).reciprocal_().mul_(1.0 / math.pi)
    xdg = dg.mul_(z)  # x g'(u)
    grad_x = grad_s = None
    if need_s:
        grad_s = torch.dot(torch.mul(go, z).reshape(-1), xdg.reshape(-1))
        grad_s = grad_s.to(sigma.dtype).reshape(sigma.shape)
    if need_x:
        grad_x = gate.addcmul_(xdg, s).mul_(go).to(x.dtype)
    return grad_x, grad_s


_TORCH = Implementation(composite, grads)
#: The tables of IGLU and IGLU-APPROX: the composite, and ``torch``.
OPERATORS = {
    approx: Operator(name, composite, _TORCH)
    for approx, name in ((False, 'iglu'), (True, 'iglu_approx'))
}


def _apply(x: Tensor, sigma: Union[Tensor, float], approx: bool) -> Tensor:
    op = OPERATORS[approx]
    check_input(x, op.name)
    sigma = scalar_param(sigma, 'sigma', x, op.name)
    return call(op, (x.contiguous(), sigma), (approx, ))


def iglu(x: Tensor, sigma: Union[Tensor, float] = 1.0) -> Tensor:
    """IGLU ``x * (1/2 + arctan(sigma x) / pi)``.

    Args:
        x (Tensor): Floating-point input.
        sigma (Tensor | float): Gate sharpness (> 0 in the paper); a float
            or a one-value tensor (learnable). Defaults to 1.0.

    Returns:
        Tensor: Same shape and dtype as ``x``.
    """
    return _apply(x, sigma, False)


def iglu_approx(x: Tensor, sigma: Union[Tensor, float] = 1.0) -> Tensor:
    """IGLU-APPROX ``(x / 2) * (1 + 2 relu(sigma x)) / (1 + |sigma x|)``.

    Args:
        x (Tensor): Floating-point input.
        sigma (Tensor | float): Gate sharpness (> 0 in the paper); a float
            or a one-value tensor (learnable). Defaults to 1.0.

    Returns:
        Tensor: Same shape and dtype as ``x``.
    """
    return _apply(x, sigma, True)
