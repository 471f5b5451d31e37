"""The APA / AGLU backward at an input that was not kept for backward but
is rebuilt from the tensors it was computed from (a BN affine, an attention
product, a residual add; memory-lean training in
:mod:`mmact.models.backbones.recompute`). The CPU and Triton kernels
rebuild it per element inside their backward pass."""
from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor

from .. import cuda_build
from . import cpu
from .dispatch import (IMPLEMENTATIONS, implementation, rebuilt_implementation)

__all__ = ['rebuild_input', 'rebuilt_backward']


def rebuild_input(src: Tensor,
                  scale: Optional[Tensor] = None,
                  shift: Optional[Tensor] = None,
                  other: Optional[Tensor] = None,
                  other_scale: Optional[Tensor] = None) -> Tensor:
    """``src * scale + shift + other * other_scale``, absent terms left out
    (a missing ``scale`` or ``other_scale`` is 1).

    The form in which :func:`rebuilt_backward` takes an activation input
    that was not kept for backward.

    Args:
        src (Tensor): (N, C, ...) tensor the input was computed from, e.g.
            the input of a BN layer.
        scale (Tensor, optional): Broadcastable factor of ``src``: a BN's
            per-channel scale (1, C, 1, ...) or attention weights
            (N, C, 1, ...).
        shift (Tensor, optional): Broadcastable per-channel shift.
        other (Tensor, optional): Residual term, ``src``'s shape.
        other_scale (Tensor, optional): Broadcastable factor of ``other``
            (a downsample BN's scale).

    Returns:
        Tensor: The rebuilt input.
    """
    if scale is None:
        z = src if shift is None else src + shift
    else:
        z = src * scale if shift is None else torch.addcmul(shift, src, scale)
    if other is not None:
        z = z + other if other_scale is None else torch.addcmul(
            z, other, other_scale)
    return z


def _fused_rebuilt_grads(impl: str, name: str, grad_out: Tensor, kappa: Tensor,
                         lam: Tensor, lambda_min: float, needs: Sequence[bool],
                         src: Tensor, scale: Optional[Tensor],
                         shift: Optional[Tensor], other: Optional[Tensor],
                         other_scale: Optional[Tensor]):
    """``(grad_z, grad_kappa, grad_lambda)`` (raw parameters) from the
    kernel of ``impl`` (``'triton'`` or ``'op'``), which rebuilds the input
    itself, or None where the Triton kernel cannot index the layout or the
    CUDA kernels hold no code for the GPU (switched off then)."""
    if impl == 'op':
        kappa, lam = kappa.detach(), lam.detach()  # the operator has no graph
        try:
            return cpu.backward_rebuilt(name, grad_out, kappa, lam, lambda_min,
                                        src, scale, shift, other, other_scale,
                                        needs[1], needs[2])
        except RuntimeError as e:
            if not cuda_build.unserved(e, src.device):
                raise
            return None
    from .triton import eta_backward_rebuilt  # imports triton
    # the kernels clamp lambda and write the raw parameters' gradients
    return eta_backward_rebuilt(name, grad_out, kappa, lam, lambda_min, src,
                                scale, shift, other, other_scale, needs)


def rebuilt_backward(
    name: str,
    grad_out: Tensor,
    kappa: Tensor,
    lambda_: Tensor,
    lambda_min: float,
    channel_dim: int,
    src: Tensor,
    scale: Optional[Tensor] = None,
    shift: Optional[Tensor] = None,
    other: Optional[Tensor] = None,
    other_scale: Optional[Tensor] = None
) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
    """Backward of :func:`apa` / :func:`aglu` at an input that was not kept.

    The input is ``z = rebuild_input(src, scale, shift, other,
    other_scale)``: a BN affine of ``src`` (``scale`` and ``shift`` of
    shape (1, C, 1, ...)), or attention weights ``scale`` of shape
    (N, C, 1, ...), plus optionally a residual ``other`` (itself maybe a BN
    affine: ``other_scale``; its shift goes into ``shift``). The float32
    CPU kernel and, on the Triton path (CUDA), the Triton backward kernel
    compute ``z`` per element as they read the sources, so neither ``z``
    nor an autograd graph of the activation is built; in other cases
    (float64, small CPU tensors, no compiler, other shapes; on the Triton
    path a per-sample ``scale`` on a map whose samples are not outermost in
    memory, or with one channel) ``z`` is rebuilt with torch and the
    operator's own backward runs on it.

    Args:
        name (str): ``'apa'`` or ``'aglu'``.
        grad_out (Tensor): Gradient of the activation's output.
        kappa, lambda_ (Tensor): The parameters as given to :func:`apa` /
            :func:`aglu` (before the clamp); gradients are returned for
            those that require grad.
        lambda_min (float): Lower clamp of ``lambda_``.
        channel_dim (int): Channel axis of per-channel parameters.
        src, scale, shift, other, other_scale: See above.

    Returns:
        tuple: ``(grad_z, grad_kappa, grad_lambda)``; parameter gradients
        shaped and typed as the parameters, None where not required.
    """
    if name not in ('apa', 'aglu'):
        raise ValueError(f"name must be 'apa' or 'aglu', got {name!r}")
    # the Triton kernels read the parameters' data: no detach per call
    needs = (True, kappa.requires_grad, lambda_.requires_grad)
    impl = rebuilt_implementation(grad_out, kappa, lambda_, channel_dim, src,
                                  scale, shift, other, other_scale)
    grads = None
    if impl != 'rebuild':
        grads = _fused_rebuilt_grads(impl, name, grad_out, kappa, lambda_,
                                     lambda_min, needs, src, scale, shift,
                                     other, other_scale)
    if grads is None:
        z = rebuild_input(src, scale, shift, other, other_scale)
        if z.dtype != grad_out.dtype:
            # half sources times float32 coefficients (a BN's affine under
            # autocast) promote; the activation's input had the output's
            # dtype, and its gradient has it too
            z = z.to(grad_out.dtype)
        row = implementation(z, kappa, lambda_)
        grads = IMPLEMENTATIONS.get(row, IMPLEMENTATIONS['torch']).grads(
            grad_out, needs, z, kappa, lambda_, name, lambda_min, channel_dim)
    return grads
