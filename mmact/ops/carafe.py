"""CARAFE feature reassembly (Wang et al., CARAFE: Content-Aware ReAssembly
of FEatures, 2019) on every device.

Output pixel ``(y, x)`` of channel ``c`` is the ``k x k`` neighbourhood of
input pixel ``(y // s, x // s)`` (zero outside the map), weighted by the
mask of its group ``c // (C / G)`` at ``(y, x)``:

    out[n, c, y, x] = sum_{i, j < k} mask[n, g k^2 + i k + j, y, x]
                      * feat[n, c, y // s + i - r, x // s + j - r],  r = (k-1)/2

mmcv's kernel (``mmcv.ops.carafe``) runs it on CUDA only; elsewhere (the CPU,
or an mmcv built without CUDA ops) :func:`carafe_torch` computes the same
sum with torch operations, and autograd differentiates it exactly.
"""
import functools
from typing import Callable, Optional

import torch
import torch.nn.functional as F

__all__ = ['carafe', 'carafe_torch', 'has_kernel', 'mmcv_cuda_carafe']


def has_kernel(mmcv_carafe: Callable, device: str) -> bool:
    """Whether mmcv's CARAFE runs on ``device``: run it on a 1x1 map.

    An mmcv built without CUDA ops says that the implementation for the
    device is not found. mmcv's own probe, ``get_compiling_cuda_version``,
    returns a C++ string and crashed the process (SIGSEGV) with an mmcv 2.1.0
    built for torch 2.11 / CUDA 13.
    """
    one = torch.ones(1, 1, 1, 1, device=device)
    try:
        mmcv_carafe(one, one, 1, 1, 1)
    except RuntimeError as error:
        if 'not found' in str(error):
            return False
        raise
    return True


@functools.lru_cache(maxsize=None)
def mmcv_cuda_carafe() -> Optional[Callable]:
    """mmcv's CARAFE, when mmcv's extension has its CUDA kernel (decided
    once), else None: what :func:`carafe` runs on CUDA tensors."""
    if not torch.cuda.is_available():
        return None
    try:
        from mmcv.ops.carafe import carafe as mmcv_carafe
    except ImportError:  # mmcv without compiled ops (mmcv-lite)
        return None
    return mmcv_carafe if has_kernel(mmcv_carafe, 'cuda') else None


def _check(features: torch.Tensor, masks: torch.Tensor, kernel_size: int,
           group_size: int, scale_factor: int) -> None:
    if kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError('carafe: kernel_size must be a positive odd number, '
                         f'got {kernel_size}')
    if group_size < 1 or features.size(1) % group_size:
        raise ValueError(f'carafe: group_size ({group_size}) must divide the '
                         f'feature channels ({features.size(1)})')
    if scale_factor < 1:
        raise ValueError(f'carafe: scale_factor must be >= 1, got '
                         f'{scale_factor}')
    n, _, h, w = features.shape
    expected = (n, kernel_size**2 * group_size, h * scale_factor,
                w * scale_factor)
    if tuple(masks.shape) != expected:
        raise ValueError(f'carafe: masks of shape {tuple(masks.shape)}; '
                         f'features {tuple(features.shape)} with kernel_size '
                         f'{kernel_size}, group_size {group_size} and '
                         f'scale_factor {scale_factor} need {expected}')


def carafe_torch(features: torch.Tensor, masks: torch.Tensor, kernel_size: int,
                 group_size: int, scale_factor: int) -> torch.Tensor:
    """CARAFE with torch operations (any device and dtype, autograd).

    One multiply-add per kernel offset over the output, so memory stays at
    the output's size rather than ``k^2`` times it (what unfolding needs).
    The output is accumulated per sub-pixel phase ``(dy, dx)``, each a
    ``(C, H, W)`` map whose rows are contiguous in every operand: the
    multiply-adds then run along rows of ``W`` rather than ``s``.

    Args:
        features (Tensor): ``(N, C, H, W)``.
        masks (Tensor): ``(N, G k^2, sH, sW)``, normalised reassembly
            kernels (``CARAFEPack.kernel_normalizer``'s output).
        kernel_size (int): ``k``, odd.
        group_size (int): ``G``, divides ``C``.
        scale_factor (int): ``s``.

    Returns:
        Tensor: ``(N, C, sH, sW)``.
    """
    n, c, h, w = features.shape
    k, g, s = kernel_size, group_size, scale_factor
    r = (k - 1) // 2
    padded = F.pad(features, (r, r, r, r))
    padded = padded.view(n, g, 1, 1, c // g, h + 2 * r, w + 2 * r)
    # phases[n, g, dy, dx, offset, 1, y, x] for output row y * s + dy
    phases = masks.view(n, g, k * k, h, s, w, s).permute(0, 1, 4, 6, 2, 3, 5)
    phases = phases.contiguous().view(n, g, s, s, k * k, 1, h, w)
    out = features.new_zeros(n, g, s, s, c // g, h, w)
    for i in range(k):
        for j in range(k):
            offset = phases[:, :, :, :, i * k + j]
            out.addcmul_(padded[..., i:i + h, j:j + w], offset)
    return out.permute(0, 1, 4, 5, 2, 6, 3).reshape(n, c, h * s, w * s)


def carafe(features: torch.Tensor, masks: torch.Tensor, kernel_size: int,
           group_size: int, scale_factor: int) -> torch.Tensor:
    """CARAFE: mmcv's CUDA kernel for CUDA tensors when mmcv has one,
    :func:`carafe_torch` otherwise.

    Args:
        features (Tensor): ``(N, C, H, W)``.
        masks (Tensor): ``(N, G k^2, sH, sW)``.
        kernel_size (int): ``k``, odd.
        group_size (int): ``G``, divides ``C``.
        scale_factor (int): ``s``.

    Returns:
        Tensor: ``(N, C, sH, sW)``.

    Raises:
        ValueError: A size that CARAFE does not define, naming it.
    """
    _check(features, masks, kernel_size, group_size, scale_factor)
    if features.is_cuda and mmcv_cuda_carafe() is not None:
        return mmcv_cuda_carafe()(features, masks, kernel_size, group_size,
                                  scale_factor)
    return carafe_torch(features, masks, kernel_size, group_size, scale_factor)
