"""Gradients that refuse to be differentiated again.

A backward written out (fused kernels, rebuilt inputs) records no graph, so
under ``create_graph=True`` its gradients would be constants and a second
derivative through them would be dropped silently. torch's
``once_differentiable`` guards only the dependence on the incoming gradient,
not on the saved inputs; this guards every gradient, as the C++ operators of
``csrc/apa_op.cpp`` do.
"""
from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor

__all__ = ['refuse_second_derivative']


def refuse_second_derivative(
        what: str,
        grads: Sequence[Optional[Tensor]]) -> Tuple[Optional[Tensor], ...]:
    """``grads`` (computed without a graph) hanging off a node that raises
    ``RuntimeError: {what} cannot be differentiated twice ...`` when a
    second derivative reaches it.

    Args:
        what: names the operation in the error.
        grads: the backward's results; None entries stay None.
    """
    error = torch._C._functions.DelayedError(
        f'{what} cannot be differentiated twice (its backward is written '
        'out, not recorded by autograd)', len(grads))
    return error(
        *[None if g is None else g.detach().requires_grad_() for g in grads])
