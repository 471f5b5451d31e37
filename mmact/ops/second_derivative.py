"""Gradients that refuse to be differentiated again: the one rule of every
written-out backward.

A backward written out (fused kernels, rebuilt inputs) records no graph, so
under ``create_graph=True`` its gradients would be constants and a second
derivative through them would be dropped silently. torch's
``once_differentiable`` guards only the dependence on the incoming gradient,
not on the saved inputs; this guards every gradient, as the C++ operators of
``csrc/apa_op.cpp`` and ``csrc/fles_op.cpp`` do. Who needs a second
derivative (a gradient penalty) runs the operators' composite:
``mmact.ops.backends.using(composite=True)`` or ``MMACT_COMPOSITE=1``.
"""
import functools
from typing import Callable, Optional, Sequence, Tuple

import torch
from torch import Tensor

__all__ = ['refuse_second_derivative', 'differentiable_once']


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
        'out, not recorded by autograd; run the composite for a second '
        'derivative: mmact.ops.backends.using(composite=True))', len(grads))
    return error(
        *[None if g is None else g.detach().requires_grad_() for g in grads])


def differentiable_once(backward: Callable) -> Callable:
    """Decorates an ``autograd.Function``'s written-out ``backward``: it
    runs without a graph, and under ``create_graph=True`` its gradients
    refuse a second derivative, naming ``mmact.ops.{ctx.op}``.

    Args:
        backward: ``backward(ctx, *grad_outputs)``; ``ctx.op`` names the
            operator.
    """

    @functools.wraps(backward)
    def wrapped(ctx, *grad_outputs):
        create_graph = torch.is_grad_enabled()
        with torch.no_grad():
            grads = backward(ctx, *grad_outputs)
        if not create_graph:
            return grads
        return refuse_second_derivative(f'mmact.ops.{ctx.op}', grads)

    return wrapped
