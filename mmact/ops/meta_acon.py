"""ACON-C, the activation of Meta-ACON (Ma et al., Activate or Not: Learning
Customized Activation, CVPR 2021).

For a channels-first input ``x`` of shape ``(N, C, ...)``::

    ACON-C(x; p1, p2, beta) = (p1 - p2) x sigmoid(beta (p1 - p2) x) + p2 x

with per-channel ``p1``, ``p2`` and a switching factor ``beta``: one value
per channel (ACON-C) or per sample and channel (Meta-ACON, where a small
network computes ``beta`` from the input; see
:class:`mmact.models.activations.MetaACON`). With ``d = p1 - p2``,
``v = d x``, ``s = sigmoid(beta v)`` and ``g = s + beta v s (1 - s)``::

    dy/dx    = d g + p2
    dy/dp1   = x g
    dy/dp2   = x - x g
    dy/dbeta = v^2 s (1 - s)

The formula is :func:`composite`; the ``torch`` row of the table
(:mod:`mmact.ops.table`) saves only the input and the (small) parameters;
parameter gradients are reduced over every axis but
the channel axis (and the batch axis for a per-sample ``beta``). Half-precision
inputs are evaluated in float32 and returned in their own dtype.
"""
from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor

from .checks import check_input, compute_dtype
from .table import Implementation, Operator, call

__all__ = ['acon_c', 'composite', 'grads', 'OPERATOR']


def _channel_view(p: Tensor, x: Tensor, name: str) -> Tensor:
    """``(C,)`` -> ``(1, C, 1, ...)``."""
    if p.dim() != 1 or p.shape[0] != x.shape[1]:
        raise ValueError(f'acon_c: {name} must have shape ({x.shape[1]},) '
                         f'for an input of shape {tuple(x.shape)}, got '
                         f'{tuple(p.shape)}')
    return p.view(1, -1, *([1] * (x.dim() - 2)))


def _beta_view(beta: Tensor, x: Tensor) -> Tensor:
    """``(C,)`` or ``(N, C)`` -> broadcastable against ``(N, C, ...)``."""
    n, c = x.shape[:2]
    if tuple(beta.shape) == (c, ):
        return beta.view(1, c, *([1] * (x.dim() - 2)))
    if tuple(beta.shape) == (n, c):
        return beta.view(n, c, *([1] * (x.dim() - 2)))
    raise ValueError(f'acon_c: beta must have shape ({c},) or ({n}, {c}) '
                     f'for an input of shape {tuple(x.shape)}, got '
                     f'{tuple(beta.shape)}')


def _reduce_to(t: Tensor, shape: Tuple[int, ...]) -> Tensor:
    """Sum ``(N, C, ...)`` down to ``(C,)`` or ``(N, C)``."""
    t = t.reshape(t.shape[0], t.shape[1], -1).sum(-1)
    return t.sum(0) if len(shape) == 1 else t


def _views(x: Tensor, p1: Tensor, p2: Tensor,
           beta: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(z, d, p2, beta)`` in the compute dtype, broadcastable."""
    z = x.to(compute_dtype(x))
    d = _channel_view(p1 - p2, z, 'p1').to(z.dtype)
    q2 = _channel_view(p2, z, 'p2').to(z.dtype)
    return z, d, q2, _beta_view(beta, z).to(z.dtype)


def composite(x: Tensor, p1: Tensor, p2: Tensor, beta: Tensor) -> Tensor:
    """ACON-C in standard ops.

    Args:
        x (Tensor): Channels-first input ``(N, C, ...)``.
        p1, p2 (Tensor): ``(C,)`` slopes.
        beta (Tensor): ``(C,)`` or ``(N, C)`` switching factor.
    """
    z, d, q2, b = _views(x, p1, p2, beta)
    v = z * d
    return torch.addcmul(v * torch.sigmoid(v * b), z, q2).to(x.dtype)


def grads(grad_out: Tensor, needs: Sequence[bool], x: Tensor, p1: Tensor,
          p2: Tensor, beta: Tensor) -> Tuple[Optional[Tensor], ...]:
    """``(grad_x, grad_p1, grad_p2, grad_beta)``, None where not in
    ``needs``.

    Args:
        grad_out (Tensor): The gradient of the output.
        needs (Sequence[bool]): Which of ``(x, p1, p2, beta)`` need one.
        x, p1, p2, beta: As :func:`composite`.
    """
    need_x, need_p1, need_p2, need_beta = needs
    z, d, q2, b = _views(x, p1, p2, beta)
    go = grad_out.to(z.dtype)
    v = z * d
    s = torch.mul(v, b).sigmoid_()
    ds = s * (1.0 - s)  # sigmoid'(beta v)
    grad_x = grad_p1 = grad_p2 = grad_beta = None
    if need_beta:
        grad_beta = _reduce_to(go * v * v * ds, beta.shape)
        grad_beta = grad_beta.to(beta.dtype)
    # g = dy/dv = s + beta v s (1 - s); gv = grad_out * g
    gv = ds.mul_(v).mul_(b).add_(s).mul_(go)
    if need_p1 or need_p2:
        x_gv = _reduce_to(gv * z, p1.shape)
        if need_p1:
            grad_p1 = x_gv.to(p1.dtype)
        if need_p2:
            grad_p2 = (_reduce_to(go * z, p2.shape) - x_gv).to(p2.dtype)
    if need_x:
        grad_x = gv.mul_(d).addcmul_(go, q2).to(x.dtype)
    return grad_x, grad_p1, grad_p2, grad_beta


#: ACON-C's table: the composite, and ``torch`` (:func:`grads` written
#: out).
OPERATOR = Operator('acon_c', composite, Implementation(composite, grads))


def acon_c(x: Tensor, p1: Tensor, p2: Tensor, beta: Tensor) -> Tensor:
    """ACON-C ``(p1 - p2) x sigmoid(beta (p1 - p2) x) + p2 x``.

    Args:
        x (Tensor): Floating-point channels-first input ``(N, C, ...)``.
        p1 (Tensor): ``(C,)`` slope of the "activated" branch.
        p2 (Tensor): ``(C,)`` slope of the "not activated" branch.
        beta (Tensor): Switching factor, ``(C,)`` (ACON-C) or ``(N, C)``
            (Meta-ACON, per sample).

    Returns:
        Tensor: Same shape and dtype as ``x``.
    """
    check_input(x, 'acon_c')
    if x.dim() < 2:
        raise ValueError('acon_c: input must be channels-first (N, C, ...), '
                         f'got shape {tuple(x.shape)}')
    _channel_view(p1, x, 'p1')
    _channel_view(p2, x, 'p2')
    _beta_view(beta, x)
    return call(OPERATOR, (x.contiguous(), p1, p2, beta), ())
