"""AReLU (Chen et al., AReLU, 2020, Sec. 3.3; docs/design/operators.md).

::

    f(x) = C(alpha) * x             x < 0,   C clamps to [0.01, 0.99]
    f(x) = (1 + sigmoid(beta)) * x  x >= 0

The formula is :func:`composite`; the ``torch`` row of the table
(:mod:`mmact.ops.table`) saves only the input (and the two scalars), with
``d f / d alpha = sum_{x<0} x`` (zero outside the clamp range, as in the
paper) and ``d f / d beta = sigmoid'(beta) * sum_{x>=0} x``.
"""
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .checks import check_input, compute_dtype, scalar_param
from .table import Implementation, Operator, call

__all__ = ['arelu', 'composite', 'grads', 'OPERATOR']


def _scales(alpha: Tensor, beta: Tensor,
            dtype: torch.dtype) -> Tuple[Tensor, Tensor]:
    """``(C(alpha), 1 + sigmoid(beta))`` in ``dtype``."""
    neg = alpha.reshape(()).clamp(0.01, 0.99).to(dtype)
    pos = (1 + torch.sigmoid(beta.reshape(()))).to(dtype)
    return neg, pos


def composite(x: Tensor, alpha: Tensor, beta: Tensor) -> Tensor:
    """AReLU in standard ops: ``x * neg + relu(x) * (pos - neg)``.

    Args:
        x (Tensor): The input.
        alpha (Tensor): The raw negative-side scale (one value).
        beta (Tensor): The positive-side logit (one value).
    """
    neg, pos = _scales(alpha, beta, x.dtype)
    return torch.addcmul(x * neg, torch.relu(x), pos - neg)


def grads(grad_out: Tensor, needs: Sequence[bool], x: Tensor, alpha: Tensor,
          beta: Tensor) -> Tuple[Optional[Tensor], ...]:
    """``(grad_x, grad_alpha, grad_beta)``, None where not in ``needs``.

    Args:
        grad_out (Tensor): The gradient of the output.
        needs (Sequence[bool]): Which of ``(x, alpha, beta)`` need one.
        x, alpha, beta: As :func:`composite`.
    """
    need_x, need_a, need_b = needs
    neg, pos = _scales(alpha, beta, x.dtype)
    grad_x = grad_a = grad_b = None
    if need_x:
        # pos for x >= 0, neg for x < 0, as (pos+neg)/2 +- (pos-neg)/2
        # (pos > 1 > neg); "+ 0.0" maps -0.0 to +0.0 so that x = -0.0
        # counts as x >= 0. (torch.where is several times slower here.)
        factor = torch.copysign((pos - neg) * 0.5, x.add(0.0))
        grad_x = factor.add_((pos + neg) * 0.5).mul_(grad_out)
    if need_a or need_b:
        acc = compute_dtype(x)
        xa = x.reshape(-1).to(acc)  # sums of half inputs in float32
        go = grad_out.reshape(-1).to(acc)
        s_pos = torch.dot(go, torch.relu(xa))
        if need_b:
            sig = torch.sigmoid(beta.to(acc))
            grad_b = (s_pos * sig * (1 - sig)).to(beta.dtype)
            grad_b = grad_b.reshape(beta.shape)
        if need_a:
            s_all = torch.dot(go, xa)
            # alpha inside [0.01, 0.99] (no comparison with a constant:
            # torch 2.1's torch.compile traces this)
            inside = (alpha.clamp(0.01, 0.99) == alpha).to(acc)
            grad_a = ((s_all - s_pos) * inside).to(alpha.dtype)
            grad_a = grad_a.reshape(alpha.shape)
    return grad_x, grad_a, grad_b


#: AReLU's table: the composite, and ``torch`` (:func:`grads` written out).
OPERATOR = Operator('arelu', composite, Implementation(composite, grads))


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
    check_input(x, 'arelu')
    alpha = scalar_param(alpha, 'alpha', x, 'arelu')
    beta = scalar_param(beta, 'beta', x, 'arelu')
    return call(OPERATOR, (x.contiguous(), alpha, beta), ())
