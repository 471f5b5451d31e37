"""Labels in ``torch.profiler`` traces.

The C++ operators show in a trace as ``mmact::<op>`` (the dispatcher records
them); the Triton launchers show as ``mmact::triton_<launcher>`` ranges
(:func:`labelled`), so a trace (and a test, through the profiler) tells which
kernels a call launched on any device, the Triton interpreter's included;
FleS's Python stages show as ``fles.*`` (:func:`label`). A label is entered
only while a profiler records (or a tracer sees the call): entering one costs
8-15 us, more than a whole small call; otherwise the cost is one check.
"""
import functools
from contextlib import nullcontext
from typing import Callable, ContextManager, TypeVar

import torch
from torch.profiler import record_function

from ..compat import is_tracing

__all__ = ['label', 'labelled']

F = TypeVar('F', bound=Callable)


def label(name: str) -> ContextManager:
    """The ``torch.profiler`` range ``name`` while a profiler records (or a
    tracer sees it); otherwise nothing."""
    if is_tracing() or torch.autograd._profiler_enabled():
        return record_function(name)
    return nullcontext()


def labelled(name: str) -> Callable[[F], F]:
    """Decorator: each call of the function is the profiler range ``name``
    while a profiler records (launchers, which tracers never reach)."""

    recording = torch.autograd._profiler_enabled

    def decorate(fn: F) -> F:

        @functools.wraps(fn)
        def call(*args, **kwargs):
            if recording():
                with record_function(name):
                    return fn(*args, **kwargs)
            return fn(*args, **kwargs)

        return call

    return decorate
