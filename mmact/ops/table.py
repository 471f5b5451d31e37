"""The pattern every operator follows: a table of implementations whose
first row is the ``composite``, and one ``autograd.Function`` for the
implementations with a written-out backward.

An operator's formula is written once in standard torch ops (its
``composite``): tracers (``torch.compile``, ``torch.jit``, ONNX export),
forward-mode AD and a second derivative go through those ops. A fused
implementation evaluates the same math with a backward written out
(:class:`Implementation`) and runs inside :class:`FusedFunction`, which
saves the operator's tensors only and refuses a second derivative
(:func:`~.second_derivative.differentiable_once`).
``backends.configure(composite=True)`` (or ``MMACT_COMPOSITE=1``) sends
every call to the composite, for gradient penalties.

The elementwise operators without kernels of their own (AReLU, IGLU,
SMU, ACON-C) have the two rows of :func:`implementation`; APA / AGLU
(:mod:`mmact.ops.apa.dispatch`) and FleS (:mod:`mmact.ops.fles.dispatch`)
put their kernels' rows below the same composite row.
"""
from typing import Callable, NamedTuple, Sequence

import torch
from torch import Tensor

from ..compat import forward_ad_active, is_tracing, needs_input_grad
from . import backends
from .second_derivative import differentiable_once

__all__ = [
    'Implementation', 'Operator', 'wants_composite', 'implementation',
    'FusedFunction', 'run', 'call'
]


class Implementation(NamedTuple):
    """A forward and its written-out backward, on an operator's tensors
    ``t1, ..., tk`` followed by its options ``o1, ...`` (Python values):
    ``forward(t1, ..., tk, o1, ...) -> Tensor`` and
    ``grads(grad_out, needs, t1, ..., tk, o1, ...)`` returning one
    gradient per tensor (None where ``needs``, one bool per tensor, is
    False); both run without a graph."""
    forward: Callable
    grads: Callable


class Operator(NamedTuple):
    """An elementwise operator without kernels of its own: its name (for
    messages), its composite (the formula in differentiable standard ops,
    same arguments as the implementation) and its ``torch`` row."""
    name: str
    composite: Callable
    torch: Implementation


def wants_composite() -> bool:
    """The composite row, first in every table: a tracer sees the call
    (``torch.compile``, ``torch.jit``, ONNX export, fake tensors, dispatch
    modes), a forward-mode AD level is open, or the settings ask for it
    (``composite=True``)."""
    return (is_tracing() or forward_ad_active()
            or backends.settings().composite)


def implementation() -> str:
    """Which row of an elementwise operator's table runs the call:

    =============================================  =============
    call                                           runs
    =============================================  =============
    traced, forward-mode AD, ``composite=True``    ``composite``
    anything else                                  ``torch``
    =============================================  =============

    Returns:
        str: ``'composite'`` or ``'torch'``.
    """
    return 'composite' if wants_composite() else 'torch'


class FusedFunction(torch.autograd.Function):
    """The one ``autograd.Function`` of the operators: runs an
    :class:`Implementation`, saves the tensors only (recomputing in
    backward what it needs) and refuses a second derivative."""

    @staticmethod
    def forward(ctx, impl: Implementation, name: str, options: tuple, *tensors:
                Tensor) -> Tensor:
        ctx.save_for_backward(*tensors)
        ctx.impl, ctx.op, ctx.options = impl, name, options  # not ctx.name
        return impl.forward(*tensors, *options)

    @staticmethod
    @differentiable_once
    def backward(ctx, grad_out: Tensor):
        tensors = ctx.saved_tensors
        needs = needs_input_grad(ctx, 3 + len(tensors))[3:]
        grads = ctx.impl.grads(grad_out, needs, *tensors, *ctx.options)
        return (None, None, None, *grads)


def run(impl: Implementation, name: str, tensors: Sequence[Tensor],
        options: tuple) -> Tensor:
    """``impl`` on ``tensors``: in :class:`FusedFunction` where a gradient
    is wanted, else its forward alone (no autograd node).

    Args:
        impl (Implementation): The row that runs.
        name (str): The operator's name (in the second-derivative error).
        tensors (Sequence[Tensor]): The operator's tensors.
        options (tuple): Its other arguments.
    """
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return FusedFunction.apply(impl, name, options, *tensors)
    return impl.forward(*tensors, *options)


def call(op: Operator, tensors: Sequence[Tensor], options: tuple) -> Tensor:
    """``op`` on checked arguments, by its table's row
    (:func:`implementation`).

    Args:
        op (Operator): The operator.
        tensors (Sequence[Tensor]): Its tensors, the input first.
        options (tuple): Its other arguments.
    """
    if wants_composite():
        return op.composite(*tensors, *options)
    return run(op.torch, op.name, tensors, options)
