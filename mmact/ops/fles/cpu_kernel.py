"""Fused float32 CPU kernels for the pixel passes of FleS on tiles.

FleS touches every pixel four times per training step; each pass is one
loop here, for contiguous ``(planes, H, W)`` float32 maps with a
non-overlapping window grid (tiles cut at the border, or one global window):

* ``stats``: per-window sum of relu(x) and count of x >= 0 (``positive``
  indicator) or sum of x (``mean``);
* ``apply``: ``y = k_ve * rho(c k_ho x) * x``;
* ``gate_bwd``: ``dL/dx`` with the scales held fixed, and the window sums
  ``sum g x rho(u)`` and ``sum g x^2 rho'(u)`` (``u = c k_ho x``) that give
  the scale gradients;
* ``ind_bwd``: ``dL/dx += f'(x) q`` with the indicator gradient ``q`` of the
  pixel's window (``f'`` = step function for ``positive``, 1 for ``mean``).

Per-window values are expanded once per band of tile rows into a row of W
floats, so the inner loops run over whole contiguous rows and vectorize;
window sums accumulate per column over a band and are then reduced per
window in double. With one window per row (a global window, whole-row
tiles) a band is one contiguous run with one scale pair, taken in a single
loop that sums in double. An entry whose row buffers cannot be allocated
returns -1, raised here as ``MemoryError`` (the operator raises a
``RuntimeError`` naming the pass). Gates: sigmoid (``tanh_gate`` is
sigmoid with c = 2), erf (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7)
and tanh(softplus).
The source (``mmact/ops/csrc/fles.c``, entries declared in ``fles.h``) is
built for the host's ISA by :mod:`mmact.ops.cpu_build`.
"""
from typing import Callable, Optional, Tuple

import torch
from torch import Tensor

from ..cpu_build import (CSRC, KernelLibrary, build_library, get_library,
                         get_operators, load_library, read_source)
from .geometry import WindowGeometry

__all__ = [
    'FleSCpuKernel', 'get_fles_kernel', 'build_fles_kernel',
    'get_fles_operator'
]

_NAME = 'fles'
_MIN_PER_THREAD = 1 << 15
#: gate -> (C function suffix, constant c with rho(z) = base(c z)).
_GATES = {
    'sigmoid': ('sigmoid', 1.0),
    'tanh_gate': ('sigmoid', 2.0),
    'erf': ('erf', 1.0),
    'tanh_softplus': ('mish', 1.0),
}
#: indicator modes the kernel evaluates (others: torch).
_MODES = {'positive': 0, 'mean': 1}


def _ptr(t: Tensor) -> int:
    return t.data_ptr()


class FleSCpuKernel:
    """ctypes wrapper of the FleS pixel passes (see the module docstring).

    All tensors are contiguous float32 on the CPU: maps ``(planes, H, W)``,
    per-window values ``(planes, nh, nw)``.

    Args:
        lib: the loaded library.
    """

    def __init__(self, lib: KernelLibrary) -> None:
        self.lib = lib

    @staticmethod
    def supports_gate(gate: str) -> bool:
        return gate in _GATES

    @staticmethod
    def supports_mode(mode: str) -> bool:
        return mode in _MODES

    def _run(self, name: str, planes: int, geom: WindowGeometry,
             args: tuple) -> None:
        """Call the entry ``name`` over ``planes`` planes.

        Raises:
            MemoryError: The kernel's row buffers could not be allocated.
        """
        h, w = geom.height, geom.width
        status = self.lib[f'{name}_run'](*args, h, w, *geom.window, *geom.grid,
                                         planes,
                                         max(1, _MIN_PER_THREAD // (h * w)),
                                         torch.get_num_threads())
        if status != 0:
            raise MemoryError(f'{name}: no memory for the kernel\'s row '
                              'buffers')

    def stats(self, xf: Tensor, geom: WindowGeometry,
              mode: str) -> Tuple[Tensor, Tensor]:
        """``(ind, div)``, each ``(planes, nh, nw)``: the indicator and its
        divisor (count of ``x >= 0`` floored at 1 for ``positive``, window
        area for ``mean``)."""
        ind = xf.new_empty(xf.shape[0], *geom.grid)
        div = torch.empty_like(ind)
        self._run('fles_stats', xf.shape[0], geom,
                  (_ptr(xf), _ptr(ind), _ptr(div), _MODES[mode]))
        return ind, div

    def apply(self, xf: Tensor, kv: Tensor, ko: Tensor, geom: WindowGeometry,
              gate: str) -> Tensor:
        """``k_ve * rho(k_ho x) * x`` with per-window scales."""
        suffix, cst = _GATES[gate]
        out = torch.empty_like(xf)
        kv, ko = kv.contiguous(), ko.contiguous()
        self._run(f'fles_apply_{suffix}', xf.shape[0], geom,
                  (_ptr(xf), _ptr(out), _ptr(kv), _ptr(ko), cst))
        return out

    def gate_backward(self, xf: Tensor, gf: Tensor, kv: Tensor, ko: Tensor,
                      geom: WindowGeometry,
                      gate: str) -> Tuple[Tensor, Tensor, Tensor]:
        """Returns ``(grad_x, g_ve, g_ho)``: the input gradient with the
        scales held fixed, and the gradients of the per-window scales."""
        suffix, cst = _GATES[gate]
        kv, ko = kv.contiguous(), ko.contiguous()
        grad_x = torch.empty_like(xf)
        g_ve, g_ho = torch.empty_like(kv), torch.empty_like(kv)
        self._run(f'fles_gate_bwd_{suffix}', xf.shape[0], geom,
                  (_ptr(xf), _ptr(gf), _ptr(grad_x), _ptr(kv), _ptr(ko), cst,
                   _ptr(g_ve), _ptr(g_ho)))
        return grad_x, g_ve, g_ho

    def indicator_backward(self, xf: Tensor, grad_x: Tensor, g_ind: Tensor,
                           div: Tensor, geom: WindowGeometry,
                           mode: str) -> None:
        """``grad_x += f'(x) * g_ind / div`` of each pixel's window, in
        place (``div`` from :meth:`stats`)."""
        g_ind = g_ind.to(torch.float32).contiguous()
        self._run(
            'fles_ind_bwd', xf.shape[0], geom,
            (_ptr(xf), _ptr(grad_x), _ptr(g_ind), _ptr(div), _MODES[mode]))


def build_fles_kernel(isa: Optional[str] = None,
                      cache_dir: Optional[str] = None) -> FleSCpuKernel:
    """Build (or take from the cache) and load the kernel for ``isa``.

    Args:
        isa: one of :data:`mmact.ops.cpu_build.ISAS`; default the host's.
        cache_dir: library cache; default as in :mod:`mmact.ops.cpu_build`.
    """
    path, key = build_library(f'mmact_{_NAME}', read_source(_NAME), isa,
                              cache_dir)
    with open(f'{CSRC}/{_NAME}.h') as f:
        return FleSCpuKernel(KernelLibrary(load_library(path, key), f.read()))


_kernel: Optional[FleSCpuKernel] = None


def get_fles_kernel() -> Optional[FleSCpuKernel]:
    """The kernel for this machine, built on first call, or None."""
    global _kernel
    if _kernel is None:
        lib = get_library(_NAME)
        _kernel = None if lib is None else FleSCpuKernel(lib)
    return _kernel


_operator: Optional[Callable] = None


def get_fles_operator() -> Optional[Callable]:
    """The whole FleS op on tiles or a global window as the torch operator
    ``torch.ops.mmact.fles`` with a C++ autograd node (``csrc/fles_op.cpp``,
    the schema there), called through the extension's own Python entry,
    which returns None for a call the operator does not take
    (:mod:`mmact.ops.fles.fused` decides those); built on first call; None
    when it cannot be built or the C kernels are switched off at the first
    call."""
    global _operator
    if _operator is None:
        module = get_operators('fles_op.cpp')
        if module is not None:
            _operator = module.fles
    return _operator
