"""The APA / AGLU backward at an input that was not kept for backward but
is rebuilt from the tensors it was computed from (a BN affine, an attention
product, a residual add; memory-lean training in
:mod:`mmact.models.backbones.recompute`). The CPU and Triton kernels
rebuild it per element inside their backward pass."""
from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor

from .. import backends
from . import cpu
from .dispatch import IMPLEMENTATIONS, implementation
from .params import chain_to_params, kernel_params

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


def _rows_or_channels(t: Optional[Tensor], x: Tensor, rows: bool) -> bool:
    """Whether ``t`` is None or shaped (1, C, 1, ...) or, with ``rows``,
    (N, C, 1, ...) against ``x`` (N, C, ...)."""
    if t is None:
        return True
    return (t.dim() == x.dim() and t.shape[1] == x.shape[1]
            and all(s == 1 for s in t.shape[2:])
            and (t.shape[0] == 1 or rows and t.shape[0] == x.shape[0]))


def _kernel_rebuildable(grad_out: Tensor, src: Tensor, scale: Optional[Tensor],
                        shift: Optional[Tensor], other: Optional[Tensor],
                        other_scale: Optional[Tensor], per_channel: bool,
                        channel_dim: int) -> bool:
    """Whether a fused kernel can rebuild the input itself: (N, C, ...)
    tensors of one shape, per-channel (or, for ``scale``, per-(n, c))
    coefficients, parameters shared or along dim 1."""
    if src.dim() < 2 or per_channel and channel_dim % src.dim() != 1:
        return False
    if any(t is not None and t.shape != src.shape for t in (grad_out, other)):
        return False
    coefs = ((scale, True), (shift, False), (other_scale, False))
    return all(_rows_or_channels(t, src, rows) for t, rows in coefs)


def _fused_rebuilt_grads(name: str, grad_out: Tensor, kappa: Tensor,
                         lam: Tensor, lambda_min: float, channel_dim: int,
                         needs: Sequence[bool], src: Tensor,
                         scale: Optional[Tensor], shift: Optional[Tensor],
                         other: Optional[Tensor],
                         other_scale: Optional[Tensor]):
    """``(grad_z, grad_kappa, grad_lambda)`` (raw parameters) from a fused
    kernel that rebuilds the input itself (Triton on the Triton path, the
    C kernel where the operators serve float32 CPU tensors), or None where
    none applies."""
    if not _kernel_rebuildable(grad_out, src, scale, shift, other, other_scale,
                               max(kappa.numel(), lam.numel()) > 1,
                               channel_dim):
        return None
    impl = implementation(src, kappa, lam)
    if impl == 'triton' and all(
            t is None or backends.takes_triton(t) for t in (grad_out, other)):
        from .triton import eta_backward_rebuilt  # imports triton
        k, l = kernel_params(kappa, lam, lambda_min)  # noqa: E741
        grads = eta_backward_rebuilt(name, grad_out, k, l, src, scale, shift,
                                     other, other_scale, needs)
        if grads is None:  # a layout the kernel cannot index
            return None
        return (grads[0], *chain_to_params(*grads[1:], kappa, lam, lambda_min))
    if impl == 'op' and all(
            t is None or t.dtype is torch.float32
            for t in (src, grad_out, other)):
        return cpu.backward_rebuilt(name, grad_out, kappa, lam, lambda_min,
                                    src, scale, shift, other, other_scale,
                                    needs[1], needs[2])
    return None


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
    kappa_grad, lambda_grad = kappa.requires_grad, lambda_.requires_grad
    kappa, lambda_ = kappa.detach(), lambda_.detach()
    needs = (True, kappa_grad, lambda_grad)
    grads = _fused_rebuilt_grads(name, grad_out, kappa, lambda_, lambda_min,
                                 channel_dim, needs, src, scale, shift, other,
                                 other_scale)
    if grads is None:
        z = rebuild_input(src, scale, shift, other, other_scale)
        impl = implementation(z, kappa, lambda_)
        grads = IMPLEMENTATIONS.get(impl, IMPLEMENTATIONS['torch']).grads(
            name, z, grad_out, kappa, lambda_, lambda_min, channel_dim, needs)
    return grads
