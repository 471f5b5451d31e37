"""Fused float32 CPU kernels for APA / AGLU (optional fast path).

Eager PyTorch needs about six passes over memory with three transcendental
functions each way (softplus alone is exp + log1p); the kernels
(``mmact/ops/csrc/apa.c``, entries declared in ``apa.h``) do the same math
in a single pass over memory, in stages over L1-resident blocks. The math
runs in base 2 (log2(e) goes into the per-channel parameters), and 2^t and
log2(1 + e) are inlined range-limited polynomials (both exponentials have
non-positive arguments, log1p's argument lies in [0, 1]), so the loops
vectorize without a vector math library. The kernels clamp lambda and
reduce the parameter gradients to the raw parameters themselves, so that a
call is one C call (what small tensors pay per call is the Python around
it). A second backward form rebuilds its input per element from a
per-channel (or per-row) affine of one tensor plus an optional second one,
for inputs that were not kept (:func:`mmact.ops.apa.rebuilt_backward`).
Built for the host's vector ISA and cached by :mod:`mmact.ops.cpu_build`.

Nothing here is required: when the kernel cannot be built
:func:`get_kernel` returns None and the ops use the plain torch path. The
math is the one of :mod:`mmact.ops.apa`; tests compare both paths.
"""
from typing import Callable, Dict, Optional, Tuple

import torch
from torch import Tensor

from .cpu_build import (CSRC, KernelLibrary, build_library, get_library,
                        get_operators, load_library, read_source)

__all__ = ['get_kernel', 'build_kernel', 'CpuKernel', 'get_ops']

_NAME = 'apa'
_NULL = None  # a NULL pointer for ctypes


def _f32(t: Tensor) -> Tensor:
    """``t`` as contiguous float32 (itself when it already is: the kernels
    only read it, and every skipped dispatch counts on small tensors)."""
    if t.dtype is torch.float32 and t.is_contiguous():
        return t
    return t.detach().to(torch.float32).contiguous()


def _layout(z: Tensor, channels: int, channel_dim: int) -> Tuple[int, int]:
    """``(C, inner)`` of ``z`` viewed as (outer, C, inner)."""
    if channels == 1:
        return 1, max(z.numel(), 1)
    inner = 1
    for s in z.shape[channel_dim % z.dim() + 1:]:
        inner *= s
    return channels, inner


def _grad_buffer(p: Tensor, need: bool) -> Tuple[Optional[Tensor], object]:
    """An output buffer for a parameter gradient and its pointer (NULL when
    the gradient is not needed)."""
    if not need:
        return None, _NULL
    g = torch.empty(p.shape, dtype=torch.float32)
    return g, g.data_ptr()


class CpuKernel:
    """The APA / AGLU entries of the compiled library.

    Tensors are float32 CPU tensors; parameters hold 1 value (shared) or C
    values (per channel) each, both the same count, and are the raw
    parameters: the kernel clamps lambda to ``lambda_min`` and returns the
    gradients of the raw values (zero for lambda where it is clamped).

    Args:
        lib (KernelLibrary): The loaded library.
    """

    def __init__(self, lib: KernelLibrary) -> None:
        self.lib = lib
        self._forward = {n: lib[f'{n}_forward'] for n in ('apa', 'aglu')}
        self._backward = {n: lib[f'{n}_backward'] for n in ('apa', 'aglu')}
        self._rebuilt = {
            n: lib[f'{n}_backward_rebuilt']
            for n in ('apa', 'aglu')
        }

    def forward(self, name: str, z: Tensor, k: Tensor, lam: Tensor,
                lambda_min: float, channel_dim: int) -> Tensor:
        """Forward of ``name`` ('apa' or 'aglu') for float32 ``z``."""
        z, k, lam = z.contiguous(), _f32(k), _f32(lam)
        C, inner = _layout(z, k.numel(), channel_dim)
        y = torch.empty_like(z)
        status = self._forward[name](z.data_ptr(), y.data_ptr(), k.data_ptr(),
                                     lam.data_ptr(), lambda_min, C, inner,
                                     z.numel(), torch.get_num_threads())
        if status:
            raise MemoryError(f'{name}: no memory for its channel constants')
        return y

    def backward(self,
                 name: str,
                 z: Tensor,
                 grad_out: Tensor,
                 k: Tensor,
                 lam: Tensor,
                 lambda_min: float,
                 channel_dim: int,
                 need_k: bool = True,
                 need_l: bool = True):
        """``(grad_z, grad_k, grad_l)``; the parameter gradients shaped as
        ``k`` / ``lam`` in float32, None where not needed."""
        z, go, k, lam = z.contiguous(), _f32(grad_out), _f32(k), _f32(lam)
        C, inner = _layout(z, k.numel(), channel_dim)
        gx = torch.empty_like(z)
        gk, pk = _grad_buffer(k, need_k)
        gl, pl = _grad_buffer(lam, need_l)
        status = self._backward[name](z.data_ptr(), go.data_ptr(),
                                      gx.data_ptr(), k.data_ptr(),
                                      lam.data_ptr(), lambda_min, C, inner,
                                      z.numel(), torch.get_num_threads(), pk,
                                      pl)
        if status:
            raise MemoryError(f'{name} backward: no memory for its sums or '
                              'channel constants')
        return gx, gk, gl

    def backward_rebuilt(self, name: str, grad_out: Tensor, k: Tensor,
                         lam: Tensor, lambda_min: float, src: Tensor,
                         scale: Optional[Tensor], shift: Optional[Tensor],
                         other: Optional[Tensor],
                         other_scale: Optional[Tensor], need_k: bool,
                         need_l: bool):
        """Backward of ``name`` at ``z = src * scale + shift + other *
        other_scale`` (absent terms left out), never materialising ``z``.

        Args:
            name (str): 'apa' or 'aglu'.
            grad_out (Tensor): Gradient of the output, (N, C, ...) float32.
            k, lam (Tensor): Raw parameters, both 1 value or both C values.
            lambda_min (float): Lower clamp of ``lam``.
            src, other (Tensor): Float32 tensors of ``grad_out``'s shape
                (``other`` may be None).
            scale (Tensor, optional): C values or N * C values (one per
                (n, c) row).
            shift, other_scale (Tensor, optional): C values each.
            need_k, need_l (bool): Which parameter gradients to return.

        Returns:
            tuple: ``(grad_z, grad_k, grad_l)`` as for :meth:`backward`.
        """
        src, go = src.contiguous(), grad_out.contiguous()
        other = None if other is None else other.contiguous()
        k, lam = _f32(k), _f32(lam)
        C, inner = _layout(src, src.shape[1] if src.dim() > 1 else 1, 1)
        ones = src.new_ones(C)
        coef = [
            _f32(t) for t in (ones if scale is None else scale,
                              src.new_zeros(C) if shift is None else shift,
                              ones if other_scale is None else other_scale)
        ]
        gx = torch.empty_like(src)
        gk, pk = _grad_buffer(k, need_k)
        gl, pl = _grad_buffer(lam, need_l)
        status = self._rebuilt[name](
            src.data_ptr(), _NULL if other is None else other.data_ptr(),
            go.data_ptr(), gx.data_ptr(), coef[0].data_ptr(),
            coef[1].data_ptr(), coef[2].data_ptr(), int(coef[0].numel() != C),
            k.data_ptr(), lam.data_ptr(), lambda_min, int(k.numel() > 1), C,
            inner, src.numel(), torch.get_num_threads(), pk, pl)
        if status:
            raise MemoryError(f'{name} backward: no memory for its sums or '
                              'channel constants')
        return gx, gk, gl


def _header() -> str:
    with open(f'{CSRC}/{_NAME}.h') as f:
        return f.read()


def build_kernel(isa: Optional[str] = None,
                 cache_dir: Optional[str] = None) -> CpuKernel:
    """Build (or take from the cache) and load the kernel for ``isa``.

    Args:
        isa: one of :data:`mmact.ops.cpu_build.ISAS`; default the host's.
        cache_dir: library cache; default as in :mod:`mmact.ops.cpu_build`.
    """
    path, key = build_library(f'mmact_{_NAME}', read_source(_NAME), isa,
                              cache_dir)
    return CpuKernel(KernelLibrary(load_library(path, key), _header()))


_kernel: Optional[CpuKernel] = None


def get_kernel() -> Optional[CpuKernel]:
    """The kernel for this machine, built on first call, or None (no
    compiler, or the C kernels switched off)."""
    global _kernel
    if _kernel is None:
        lib = get_library(_NAME)
        _kernel = None if lib is None else CpuKernel(lib)
    return _kernel


_ops: Optional[Dict[str, Callable]] = None


def get_ops() -> Optional[Dict[str, Callable]]:
    """``{'apa': ..., 'aglu': ...}``: the kernels as the torch operators
    ``torch.ops.mmact.apa`` / ``aglu`` with a C++ autograd node
    (``csrc/apa_op.cpp``, the schema there), each called through the
    extension's own Python entry (a native binding's cost, not
    ``torch.ops``'), which returns None for a call the operator does not
    take (:func:`mmact.ops.apa._implementation` decides those); built on
    first call; None when they cannot be built or the C kernels are
    switched off at the first call."""
    global _ops
    if _ops is None:
        module = get_operators('apa_op.cpp')
        if module is not None:
            _ops = {'apa': module.apa, 'aglu': module.aglu}
    return _ops
