"""APA / AGLU's C++ operators: the fused CPU kernels
(``mmact/ops/csrc/apa.c``) of mmact's CPU extension
(:mod:`mmact.ops.cpu_build`) and, with ``MMACT_CUDA_KERNELS=1``, the CUDA
kernels registered for the same operators (``csrc/apa_cuda.cu``,
:mod:`mmact.ops.cuda_build`).

The kernels evaluate the math of :mod:`.formula` in a single pass over
memory each way, in stages over L1-resident blocks, in base 2 with inlined
range-limited polynomials for ``2^t`` and ``log2(1 + e)`` (so the loops
vectorize without a vector math library); they clamp lambda and reduce the
gradients of the raw parameters themselves. ``apa_op.cpp`` makes them the
torch operators ``mmact::apa`` / ``aglu`` (one C++ autograd node) and
``mmact::apa_backward_rebuilt`` / ``aglu_backward_rebuilt`` (the backward at
an input rebuilt per element, for :func:`mmact.ops.apa.rebuilt_backward`).
One operator, per-device kernels: the entries take a device's calls while
its kernels are routed (:func:`operator_entries`, :func:`cuda_takes`).
"""
import warnings
from typing import Any, Callable, Dict, Optional

import torch
from torch import Tensor

from .. import backends, cuda_build
from ..cpu_build import extension, load_extension

__all__ = [
    'operator_entries', 'cuda_routed', 'cuda_takes', 'backward_rebuilt'
]

_KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_PLAIN_TYPES = (Tensor, torch.nn.Parameter)
# per settings: 'entries', and 'cuda' once a CUDA call asked
_state: Dict[str, Any] = {}


def _route(cuda: bool) -> None:
    """Tell the entries which devices' calls they take: CPU calls while the
    C kernels are on and built, CUDA calls when ``cuda``."""
    cpu_on = backends.settings().cpu_kernels and extension() is not None
    module = load_extension() if cpu_on or cuda else None
    _state['entries'] = None
    if module is not None:
        module.routes(cpu_on, cuda)
        _state['entries'] = {'apa': module.apa, 'aglu': module.aglu}


def operator_entries() -> Optional[Dict[str, Callable]]:
    """``{'apa': ..., 'aglu': ...}``: each operator's Python entry (a
    native binding's cost, not ``torch.ops``' boxed call), which returns
    None for a call the operator does not take; None when no device's
    calls go to the operators (the extension cannot be built, or the C
    kernels are switched off and the CUDA kernels not loaded)."""
    if 'entries' not in _state:  # once per settings (asked on every call)
        _route(_state.get('cuda', False))
    return _state['entries']


def cuda_routed() -> bool:
    """Whether CUDA calls go to the operators: ``MMACT_CUDA_KERNELS=1`` and
    the CUDA kernels loaded (:func:`mmact.ops.cuda_build.library`, built by
    the first call that asks, the first CUDA tensor of a process)."""
    if 'cuda' not in _state:
        _state['cuda'] = cuda_build.library() is not None
        _route(_state['cuda'])
    return _state['cuda']


backends.on_change(_state.clear)


def cuda_takes(x: Tensor, kappa: Tensor, lam: Tensor) -> bool:
    """The table's ``op`` row for a CUDA ``x`` (the caller asked that the
    CUDA kernels are on): a plain strided float32 / float16 / bfloat16
    input, plain float32 parameters on its device, the kernels loaded.
    Parameters of another dtype or device go to the next row (Triton) with
    one warning naming them.

    Args:
        x (Tensor): The input, on CUDA.
        kappa (Tensor): The raw ``kappa``.
        lam (Tensor): The raw ``lambda``.
    """
    if not (x.dtype in _KERNEL_DTYPES and x.layout == torch.strided
            and type(x) in _PLAIN_TYPES and type(kappa) in _PLAIN_TYPES
            and type(lam) in _PLAIN_TYPES):
        return False
    for what, p in (('kappa', kappa), ('lambda', lam)):
        if p.dtype is not torch.float32 or p.device != x.device:
            warnings.warn(
                f'mmact: {what} is {p.dtype} on {p.device} while x is on '
                f'{x.device}; the CUDA kernels (MMACT_CUDA_KERNELS=1) take '
                'float32 parameters on the input\'s device, so APA / AGLU '
                'run the next row (Triton) here')
            return False
    return cuda_routed()


def backward_rebuilt(name: str, grad_out: Tensor, kappa: Tensor, lam: Tensor,
                     lambda_min: float, src: Tensor, scale: Optional[Tensor],
                     shift: Optional[Tensor], other: Optional[Tensor],
                     other_scale: Optional[Tensor], need_kappa: bool,
                     need_lambda: bool):
    """``(grad_z, grad_kappa, grad_lambda)`` of ``name`` at ``z = src *
    scale + shift + other * other_scale`` (absent terms left out), never
    materialising ``z``: (N, C, ...) ``src``, ``grad_out`` and ``other``,
    float32 on the CPU, of one float32 / float16 / bfloat16 dtype on CUDA;
    per-channel coefficients (``scale`` also per (n, c) row); raw
    parameters, shared or along dim 1.

    Args:
        name (str): ``'apa'`` or ``'aglu'``.
        grad_out (Tensor): Gradient of the output, ``src``'s shape.
        kappa (Tensor): The raw ``kappa``.
        lam (Tensor): The raw ``lambda``.
        lambda_min (float): The floor of ``lam``.
        src (Tensor): The (N, C, ...) tensor the input was computed from.
        scale, shift, other, other_scale (Tensor, optional): The other terms
            (see :func:`mmact.ops.apa.rebuild_input`).
        need_kappa, need_lambda (bool): Which parameter gradients to return
            (None for the others).

    Raises:
        RuntimeError: Sources of another dtype or shape; ValueError:
            coefficients of the wrong size (the operator names them).
    """
    op = getattr(torch.ops.mmact, f'{name}_backward_rebuilt')
    return op(grad_out, kappa, lam, float(lambda_min), src, scale, shift,
              other, other_scale, need_kappa, need_lambda)
