"""APA / AGLU's fused CPU kernels (``mmact/ops/csrc/apa.c``) as reached
through mmact's CPU extension (:mod:`mmact.ops.cpu_build`).

The kernels evaluate the math of :mod:`.formula` in a single pass over
memory each way, in stages over L1-resident blocks, in base 2 with inlined
range-limited polynomials for ``2^t`` and ``log2(1 + e)`` (so the loops
vectorize without a vector math library); they clamp lambda and reduce the
gradients of the raw parameters themselves. ``apa_op.cpp`` makes them the
torch operators ``mmact::apa`` / ``aglu`` (one C++ autograd node) and
``mmact::apa_backward_rebuilt`` / ``aglu_backward_rebuilt`` (the backward at
an input rebuilt per element, for :func:`mmact.ops.apa.rebuilt_backward`).
"""
from typing import Callable, Dict, Optional

import torch
from torch import Tensor

from .. import backends
from ..cpu_build import extension

__all__ = ['operator_entries', 'backward_rebuilt']

_entries: Dict[bool, Optional[Dict[str, Callable]]] = {}


def operator_entries() -> Optional[Dict[str, Callable]]:
    """``{'apa': ..., 'aglu': ...}``: each operator's Python entry (a
    native binding's cost, not ``torch.ops``' boxed call), which returns
    None for a call the operator does not take; None when the extension
    cannot be built or the C kernels are switched off."""
    if not _entries:  # once per settings (the table asks on every call)
        module = extension()
        _entries[True] = None if module is None else {
            'apa': module.apa,
            'aglu': module.aglu
        }
    return _entries[True]


backends.on_change(_entries.clear)


def backward_rebuilt(name: str, grad_out: Tensor, kappa: Tensor, lam: Tensor,
                     lambda_min: float, src: Tensor, scale: Optional[Tensor],
                     shift: Optional[Tensor], other: Optional[Tensor],
                     other_scale: Optional[Tensor], need_kappa: bool,
                     need_lambda: bool):
    """``(grad_z, grad_kappa, grad_lambda)`` of ``name`` at ``z = src *
    scale + shift + other * other_scale`` (absent terms left out), never
    materialising ``z``: float32 (N, C, ...) ``src``, ``grad_out`` and
    ``other``; per-channel coefficients (``scale`` also per (n, c) row);
    raw parameters, shared or along dim 1.

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
