"""AReLU (Chen et al., AReLU, 2020, Sec. 3.3; docs/design.md §2).

::

    f(x) = C(alpha) * x             x < 0,   C clamps to [0.01, 0.99]
    f(x) = (1 + sigmoid(beta)) * x  x >= 0

A ``torch.autograd.Function`` that saves only the input (and the two
scalars); ``d f / d alpha = sum_{x<0} x`` (zero outside the clamp range, as in
the paper) and ``d f / d beta = sigmoid'(beta) * sum_{x>=0} x``.
"""
from typing import Union

import torch
from torch import Tensor

from ..compat import needs_input_grad
from .checks import check_input, compute_dtype

__all__ = ['arelu']


def _scalar(p: Union[Tensor, float], name: str, x: Tensor) -> Tensor:
    if not isinstance(p, Tensor):
        p = torch.tensor(float(p), device=x.device)
    if p.numel() != 1:
        raise ValueError(f'{name} must hold a single value, got {p.numel()}')
    return p


def _scales(alpha: Tensor, beta: Tensor, dtype: torch.dtype):
    neg = alpha.detach().reshape(()).clamp(0.01, 0.99).to(dtype)
    pos = (1 + torch.sigmoid(beta.detach().reshape(()))).to(dtype)
    return neg, pos


class _AReLUFunction(torch.autograd.Function):

    @staticmethod
    def forward(ctx, x: Tensor, alpha: Tensor, beta: Tensor) -> Tensor:
        ctx.save_for_backward(x, alpha, beta)
        neg, pos = _scales(alpha, beta, x.dtype)
        # x*neg + relu(x)*(pos - neg): x*pos for x >= 0, x*neg for x < 0
        return torch.relu(x).mul_(pos - neg).addcmul_(x, neg)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        x, alpha, beta = ctx.saved_tensors
        need_x, need_a, need_b = needs_input_grad(ctx, 3)
        neg, pos = _scales(alpha, beta, x.dtype)
        grad_x = grad_a = grad_b = None
        if need_x:
            # pos for x >= 0, neg for x < 0, as (pos+neg)/2 +- (pos-neg)/2
            # (pos > 1 > neg); "+ 0.0" maps -0.0 to +0.0 so that x = -0.0
            # counts as x >= 0. (torch.where is several times slower here;
            # no out= either: torch 2.1's torch.compile refuses it.)
            factor = torch.copysign((pos - neg) * 0.5, x.add(0.0))
            grad_x = factor.add_((pos + neg) * 0.5).mul_(grad_out)
        if need_a or need_b:
            acc = compute_dtype(x)
            xa = x.reshape(-1).to(acc)  # sums of half inputs in float32
            go = grad_out.reshape(-1).to(acc)
            s_pos = torch.dot(go, torch.relu(xa))
            if need_b:
                sig = torch.sigmoid(beta.detach().to(acc))
                grad_b = (s_pos * sig * (1 - sig)).to(beta.dtype)
            if need_a:
                s_all = torch.dot(go, xa)
                # alpha inside [0.01, 0.99] (written so that torch 2.1's
                # torch.compile traces it: no comparison with a constant)
                a = alpha.detach()
                inside = (a.clamp(0.01, 0.99) == a).to(acc)
                grad_a = ((s_all - s_pos) * inside).to(alpha.dtype)
                grad_a = grad_a.reshape(alpha.shape)
            if grad_b is not None:
                grad_b = grad_b.reshape(beta.shape)
        return grad_x, grad_a, grad_b


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
    alpha = _scalar(alpha, 'alpha', x)
    beta = _scalar(beta, 'beta', x)
    if torch.onnx.is_in_onnx_export():
        neg = alpha.reshape(()).clamp(0.01, 0.99).to(x.dtype)
        pos = (1 + torch.sigmoid(beta.reshape(()))).to(x.dtype)
        return torch.relu(x) * pos + torch.clamp(x, max=0) * neg
    return _AReLUFunction.apply(x.contiguous(), alpha, beta)
