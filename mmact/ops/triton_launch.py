"""Launching a Triton kernel at the least host cost the installed Triton
allows.

``kernel[grid](*args, **constexprs)`` (``JITFunction.run``) binds the
arguments, computes the specialization key and looks the compiled kernel
up on every call (about 9-13 us on Triton 3.x). A :class:`Launch` is one
kernel with its grid and constexprs fixed, what a launcher caches per
shape, strides, dtypes and flags. Its first call compiles through
``JITFunction.run``; later calls go to the compiled kernel's own launcher
(``CompiledKernel[grid]``) where this Triton's calling convention is
pinned (:func:`direct_mode`):

================  ====================================================
Triton            later calls
================  ====================================================
2.1 - 2.x         ``CompiledKernel[grid](*runtime args)``
3.6 and later     ``CompiledKernel[grid](*runtime args, *constexprs)``
3.0 - 3.5         ``JITFunction.run`` (the convention is not pinned)
interpreter       ``JITFunction.run`` (``TRITON_INTERPRET=1``)
================  ====================================================

A caller's cache key must hold what Triton specializes a kernel on: the
integer arguments (derived from shapes here), the dtypes of the tensors,
their device, and whether each tensor a caller did not allocate itself
starts 16-byte aligned (:func:`aligned`).

While a profiler records, each launch is the range ``triton::<kernel>``
(a test counts kernels with it and tells the interpreter's own torch ops,
which run inside it, from the launcher's).
"""
import os
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from torch import Tensor
from torch.profiler import record_function

from ..compat import triton_version

__all__ = ['Launch', 'direct_mode', 'aligned', 'DIRECT_MODE']


def direct_mode(version: Tuple[int, ...],
                interpreted: bool = False) -> Optional[str]:
    """How a compiled kernel is called directly on Triton ``version``.

    Args:
        version (tuple[int, ...]): The Triton version.
        interpreted (bool): Whether Triton's interpreter runs the kernels.

    Returns:
        str | None: ``'runtime'`` (the runner takes the runtime arguments:
        Triton 2.x), ``'all'`` (runtime arguments then the constexprs, in
        signature order: Triton >= 3.6), or None (``JITFunction.run`` on
        every call).
    """
    if interpreted or not version:
        return None
    if (2, 1) <= version < (3, 0):
        return 'runtime'
    if version >= (3, 6):
        return 'all'
    return None


#: :func:`direct_mode` of the installed Triton, decided at import.
DIRECT_MODE = direct_mode(triton_version(),
                          os.environ.get('TRITON_INTERPRET', '') == '1')


def aligned(t: Tensor) -> bool:
    """Whether ``t``'s data starts 16-byte aligned (Triton specializes
    pointer arguments on it)."""
    return t.data_ptr() % 16 == 0


class Launch:
    """One Triton kernel with its grid and constexprs fixed.

    Args:
        kernel: The ``@triton.jit`` function.
        grid (tuple[int, ...]): Programs along up to three axes.
        constexprs (dict): The kernel's constexpr arguments (after its
            runtime arguments in its signature).
        mode (str, optional): :func:`direct_mode`; defaults to the
            installed Triton's (:data:`DIRECT_MODE`).
    """

    __slots__ = ('kernel', 'grid', 'constexprs', 'mode', 'label', 'runner',
                 'tail')

    def __init__(self,
                 kernel,
                 grid: Tuple[int, ...],
                 constexprs: Dict[str, Any],
                 mode: Optional[str] = DIRECT_MODE) -> None:
        self.kernel = kernel
        self.grid = tuple(grid) + (1, ) * (3 - len(grid))
        self.constexprs = constexprs
        self.mode = mode
        self.label = 'triton::' + getattr(kernel, '__name__', 'kernel')
        self.runner: Optional[Callable] = None
        self.tail: tuple = ()

    def __call__(self, *args) -> None:
        """Launch on the runtime arguments ``args`` (signature order)."""
        if torch.autograd._profiler_enabled():
            with record_function(self.label):
                self._launch(args)
        else:
            self._launch(args)

    def _launch(self, args: tuple) -> None:
        runner = self.runner
        if runner is not None:
            runner(*args, *self.tail)
            return
        compiled = self.kernel[self.grid](*args, **self.constexprs)
        if self.mode is not None and compiled is not None:
            self.runner = compiled[self.grid]
            if self.mode == 'all':
                self.tail = tuple(
                    self.constexprs[name] for name in self.kernel.arg_names
                    if name in self.constexprs)
