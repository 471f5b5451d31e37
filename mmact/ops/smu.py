"""SMU, the smooth maximum unit (Biswas et al., Smooth Maximum Unit: Smooth
Activation Function for Deep Networks Using Smoothing Maximum Technique,
CVPR 2022).

SMU smooths ``max(x, alpha x) = ((1 + a) x + (1 - a) |x|) / 2`` by replacing
``|x|`` with ``x erf(mu x)``::

    SMU(x; a, mu) = ((1 + a) x + (1 - a) x erf(mu (1 - a) x)) / 2

``a`` (alpha, 0.25 in the paper) is fixed, ``mu`` is learnable; large ``mu``
tends to Leaky ReLU with slope ``a``. With ``c = 1 - a`` and
``u = mu c x`` the derivatives are::

    dSMU/dx  = ((1 + a) + c erf(u) + (2 / sqrt(pi)) c u exp(-u^2)) / 2
    dSMU/dmu = (c x)^2 exp(-u^2) / sqrt(pi)

The formula is :func:`composite`; the ``torch`` row of the table
(:mod:`mmact.ops.table`) saves only the input and ``mu``. Half-precision
inputs are evaluated in float32 and returned in their own dtype.
"""
import math
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .checks import check_float, check_input, compute_dtype, scalar_param
from .table import Implementation, Operator, call

__all__ = ['smu', 'composite', 'grads', 'OPERATOR']

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)


def composite(x: Tensor, mu: Tensor, alpha: float) -> Tensor:
    """SMU in standard ops.

    Args:
        x (Tensor): The input.
        mu (Tensor): The smoothing parameter (one value).
        alpha (float): The fixed negative slope.
    """
    z = x.to(compute_dtype(x))
    c = 1.0 - alpha
    u = z * (mu.reshape(()).to(z.dtype) * c)
    return (0.5 * z * ((1.0 + alpha) + c * torch.erf(u))).to(x.dtype)


def grads(grad_out: Tensor, needs: Sequence[bool], x: Tensor, mu: Tensor,
          alpha: float) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """``(grad_x, grad_mu)``, None where not in ``needs``.

    Args:
        grad_out (Tensor): The gradient of the output.
        needs (Sequence[bool]): Which of ``(x, mu)`` need one.
        x, mu, alpha: As :func:`composite`.
    """
    need_x, need_mu = needs
    c = 1.0 - alpha
    z = x.to(compute_dtype(x))
    m = mu.reshape(()).to(z.dtype)
    go = grad_out.to(z.dtype)
    u = z * (m * c)
    gauss = torch.mul(u, u).neg_().exp_()  # exp(-u^2)
    grad_x = grad_mu = None
    if need_mu:
        cx2 = torch.mul(z, c).square_()
        grad_mu = torch.dot(go.reshape(-1),
                            (cx2 * gauss).reshape(-1)) * _INV_SQRT_PI
        grad_mu = grad_mu.to(mu.dtype).reshape(mu.shape)
    if need_x:
        slope = gauss.mul_(u).mul_(_TWO_OVER_SQRT_PI * c)
        slope.add_(u.erf_().mul_(c)).add_(1.0 + alpha).mul_(0.5)
        grad_x = slope.mul_(go).to(x.dtype)
    return grad_x, grad_mu


#: SMU's table: the composite, and ``torch`` (:func:`grads` written out).
OPERATOR = Operator('smu', composite, Implementation(composite, grads))


def smu(x: Tensor,
        mu: Union[Tensor, float] = 1e6,
        alpha: float = 0.25) -> Tensor:
    """SMU ``((1 + a) x + (1 - a) x erf(mu (1 - a) x)) / 2``.

    Args:
        x (Tensor): Floating-point input.
        mu (Tensor | float): Smoothing parameter; a float or a one-value
            tensor (learnable). Defaults to 1e6, the authors' initial value
            (SMU then starts as Leaky ReLU with slope ``alpha``).
        alpha (float): Slope of the negative part of the approximated
            ``max(x, alpha x)``, fixed. Defaults to 0.25 (paper).

    Returns:
        Tensor: Same shape and dtype as ``x``.
    """
    check_input(x, 'smu')
    alpha = check_float(alpha, 'alpha', 'smu')
    mu = scalar_param(mu, 'mu', x, 'smu')
    return call(OPERATOR, (x.contiguous(), mu), (alpha, ))
