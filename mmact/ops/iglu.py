"""IGLU and IGLU-APPROX (Kang et al., IGLU, Eq. 8 and 11; docs/design.md §2).

::

    IGLU(x; s)        = x * (1/2 + arctan(s x) / pi)
    IGLU-APPROX(x; s) = (x / 2) * (1 + 2 relu(s x)) / (1 + |s x|)

Half-precision inputs are evaluated in float32. The gate of IGLU is the
Cauchy CDF with scale ``1 / s``; large ``s`` tends to ReLU, ``s -> 0`` to
``x / 2``. IGLU-APPROX replaces arctan by the rational
``(pi/2) * u / (1 + |u|)`` and needs no transcendental function. Both are
``torch.autograd.Function`` s that save only the input.
"""
import math
from typing import Union

import torch
from torch import Tensor

from ..compat import needs_input_grad
from .checks import check_input, compute_dtype

__all__ = ['iglu', 'iglu_approx']


def _sigma(sigma: Union[Tensor, float], x: Tensor) -> Tensor:
    if not isinstance(sigma, Tensor):
        return torch.tensor(float(sigma), device=x.device)
    if sigma.numel() != 1:
        raise ValueError('sigma must hold a single value, got '
                         f'{sigma.numel()} values')
    return sigma


# Both Functions save only the input (and sigma) and recompute the gate:
#   IGLU:    g = 1/2 + atan(u)/pi,         g'(u) = 1 / (pi (1 + u^2))
#   APPROX:  g = (1/2 + relu(u)) / (1+|u|), g'(u) = 1 / (2 (1 + |u|)^2)
# with u = s x:  dy/dx = g + s x g'(u),  dy/ds = x^2 g'(u).


class _IGLUFunction(torch.autograd.Function):

    @staticmethod
    def forward(ctx, x: Tensor, sigma: Tensor, approx: bool) -> Tensor:
        ctx.save_for_backward(x, sigma)
        ctx.approx = approx
        z = x.to(compute_dtype(x))  # half inputs are evaluated in float32
        u = z * sigma.detach().reshape(()).to(z.dtype)
        if approx:
            gate = torch.relu(u).add_(0.5).div_(u.abs_().add_(1))
        else:
            gate = u.atan_().mul_(1.0 / math.pi).add_(0.5)
        return gate.mul_(z).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        x, sigma = ctx.saved_tensors
        need_x, need_s = needs_input_grad(ctx, 2)
        z = x.to(compute_dtype(x))
        s = sigma.detach().reshape(()).to(z.dtype)
        go = grad_out.to(z.dtype)
        u = z * s
        if ctx.approx:
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
        return grad_x, grad_s, None


def _apply(x: Tensor, sigma: Union[Tensor, float], approx: bool,
           op: str) -> Tensor:
    check_input(x, op)
    sigma = _sigma(sigma, x)
    if torch.onnx.is_in_onnx_export():
        z = x.to(compute_dtype(x))
        u = z * sigma.reshape(()).to(z.dtype)
        if approx:
            gate = (0.5 + torch.relu(u)) / (1 + u.abs())
        else:
            gate = 0.5 + torch.atan(u) * (1.0 / math.pi)
        return (z * gate).to(x.dtype)
    return _IGLUFunction.apply(x.contiguous(), sigma, approx)


def iglu(x: Tensor, sigma: Union[Tensor, float] = 1.0) -> Tensor:
    """IGLU ``x * (1/2 + arctan(sigma x) / pi)``.

    Args:
        x (Tensor): Floating-point input.
        sigma (Tensor | float): Gate sharpness (> 0 in the paper); a float
            or a one-value tensor (learnable). Defaults to 1.0.

    Returns:
        Tensor: Same shape and dtype as ``x``.
    """
    return _apply(x, sigma, False, 'iglu')


def iglu_approx(x: Tensor, sigma: Union[Tensor, float] = 1.0) -> Tensor:
    """IGLU-APPROX ``(x / 2) * (1 + 2 relu(sigma x)) / (1 + |sigma x|)``.

    Args:
        x (Tensor): Floating-point input.
        sigma (Tensor | float): Gate sharpness (> 0 in the paper); a float
            or a one-value tensor (learnable). Defaults to 1.0.

    Returns:
        Tensor: Same shape and dtype as ``x``.
    """
    return _apply(x, sigma, True, 'iglu_approx')
