"""APA / AGLU parameters: the lambda clamp, a shared value beside a
per-channel one, broadcasting against the input, and the chain rule back to
the raw parameters; each written once, for every implementation."""
from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from ..checks import broadcast_shape

__all__ = [
    'ParamLike', 'as_param', 'clamp_lambda', 'expanded', 'kernel_params',
    'chain_to_params', 'check_params', 'param_views'
]

ParamLike = Union[Tensor, float]


def as_param(p: ParamLike, x: Tensor) -> Tensor:
    """A parameter given as a number, as a float32 tensor on ``x``'s
    device.

    Args:
        p (Tensor | float): The parameter.
        x (Tensor): The input (its device is used).
    """
    if isinstance(p, Tensor):
        return p
    return torch.tensor(float(p), dtype=torch.float32, device=x.device)


def clamp_lambda(lambda_: Tensor, lambda_min: float) -> Tensor:
    """``max(lambda_, lambda_min)`` with the gradient passed where
    ``lambda_ > lambda_min`` only, on every torch.

    ``Tensor.clamp`` passes the gradient at ``lambda_ == lambda_min`` on
    torch 2.1 and stops it on newer torch; this strict boundary is the one
    every implementation's backward uses (:func:`chain_to_params`, the C
    and Triton kernels).

    Args:
        lambda_ (Tensor): The raw ``lambda``.
        lambda_min (float): The floor.
    """
    return torch.where(lambda_ > lambda_min, lambda_, lambda_min)


def expanded(kappa: Tensor, lam: Tensor) -> Tuple[Tensor, Tensor]:
    """A shared parameter beside a per-channel one, expanded to its size
    (autograd, or :func:`chain_to_params`, sums its gradient).

    Args:
        kappa (Tensor): 1 or C values.
        lam (Tensor): 1 or C values.
    """
    if kappa.numel() == 1 and lam.numel() > 1:
        kappa = kappa.reshape(1).expand(lam.numel()).contiguous()
    elif lam.numel() == 1 and kappa.numel() > 1:
        lam = lam.reshape(1).expand(kappa.numel()).contiguous()
    return kappa, lam


def kernel_params(kappa: Tensor, lambda_: Tensor,
                  lambda_min: float) -> Tuple[Tensor, Tensor]:
    """``kappa`` and ``lambda_`` clamped to ``lambda_min``, both shared or
    both per channel: the form the math takes.

    Args:
        kappa (Tensor): The raw ``kappa``.
        lambda_ (Tensor): The raw ``lambda``.
        lambda_min (float): The floor of ``lambda_``.
    """
    return expanded(kappa, clamp_lambda(lambda_, lambda_min))


def chain_to_params(grad_k: Optional[Tensor], grad_l: Optional[Tensor],
                    kappa: Tensor, lambda_: Tensor, lambda_min: float):
    """Gradients w.r.t. the kernel parameters (:func:`kernel_params`) to
    those w.r.t. ``kappa`` and ``lambda_``, as autograd does through
    :func:`kernel_params`: expanded shared values are summed and the clamp
    passes the gradient only where ``lambda_ > lambda_min``.

    Args:
        grad_k (Tensor, optional): Gradient of the kernel ``kappa``.
        grad_l (Tensor, optional): Gradient of the kernel ``lambda``.
        kappa (Tensor): The raw ``kappa``.
        lambda_ (Tensor): The raw ``lambda``.
        lambda_min (float): The floor of ``lambda_``.
    """
    if grad_k is not None:
        grad_k = grad_k.sum() if kappa.numel() == 1 else grad_k
        grad_k = grad_k.reshape(kappa.shape).to(kappa.dtype)
    if grad_l is not None:
        grad_l = grad_l.sum() if lambda_.numel() == 1 else grad_l
        grad_l = grad_l.reshape(lambda_.shape).to(lambda_.dtype)
        grad_l = torch.where(lambda_.detach() > lambda_min, grad_l, 0)
    return grad_k, grad_l


def check_params(x: Tensor, kappa: Tensor, lam: Tensor,
                 channel_dim: int) -> None:
    """Refuse parameter counts that do not fit ``x``'s channels.

    Args:
        x (Tensor): The input.
        kappa (Tensor): The raw ``kappa``.
        lam (Tensor): The raw ``lambda``.
        channel_dim (int): The axis per-channel values follow.

    Raises:
        ValueError: A count that is neither 1 nor C (names
            ``num_parameters``).
    """
    broadcast_shape(kappa, x, channel_dim, 'kappa')
    broadcast_shape(lam, x, channel_dim, 'lambda')


def param_views(x: Tensor, kappa: Tensor, lam: Tensor, channel_dim: int,
                dtype: torch.dtype) -> Tuple[Tensor, Tensor]:
    """``kappa`` and ``lam`` in ``dtype``, shaped to broadcast against
    ``x``.

    Args:
        x (Tensor): The input.
        kappa (Tensor): ``kappa`` (1 or C values).
        lam (Tensor): ``lambda`` (1 or C values).
        channel_dim (int): The axis per-channel values follow.
        dtype (torch.dtype): The dtype of the math.
    """
    k = kappa.to(dtype).reshape(
        broadcast_shape(kappa, x, channel_dim, 'kappa'))
    l = lam.to(dtype).reshape(  # noqa: E741
        broadcast_shape(lam, x, channel_dim, 'lambda'))
    return k, l
