"""Input checks and shapes the elementwise operators share (APA / AGLU,
AReLU, IGLU, SMU, Meta-ACON): one wording for each refusal."""
import numbers
from typing import Tuple, Union

import torch
from torch import Tensor

__all__ = [
    'check_input', 'check_channel_dim', 'check_float', 'scalar_param',
    'compute_dtype', 'channel_axis', 'broadcast_shape'
]


def check_input(x: Tensor, op: str) -> None:
    """Refuse anything but a floating-point tensor, naming ``op``.

    Args:
        x (Tensor): The operator's input.
        op (str): The operator's name, for the message.

    Raises:
        TypeError: ``x`` is not a floating-point tensor.
    """
    if not isinstance(x, Tensor):
        raise TypeError(f'{op}: input must be a torch.Tensor, '
                        f'got {type(x).__name__}')
    if not x.is_floating_point():
        raise TypeError(f'{op}: input must be a floating-point tensor '
                        '(float16, bfloat16, float32 or float64), '
                        f'got dtype {x.dtype}')


def check_channel_dim(channel_dim: int, op: str) -> None:
    """Refuse a ``channel_dim`` that is not an int axis (a bool is not).

    Args:
        channel_dim (int): The axis given.
        op (str): The operator's name, for the message.

    Raises:
        TypeError: ``channel_dim`` is a bool or not an integer.
    """
    if (isinstance(channel_dim, bool)
            or not isinstance(channel_dim, numbers.Integral)):
        raise TypeError(f'{op}: channel_dim must be an int axis, got '
                        f'{channel_dim!r}')


def check_float(value, name: str, op: str) -> float:
    """``value`` as a float, refusing a bool or a non-number.

    Args:
        value: A fixed (not learnable) scalar argument.
        name (str): Its name, for the message.
        op (str): The operator's name, for the message.

    Raises:
        TypeError: ``value`` is a bool or not a real number.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f'{op}: {name} must be a float, got {value!r}')
    return float(value)


def scalar_param(p: Union[Tensor, float], name: str, x: Tensor,
                 op: str) -> Tensor:
    """A one-value parameter as a tensor: a float becomes a float64 tensor
    on ``x``'s device (exact for float64 inputs; the ops compute in the
    input's precision), a tensor must hold one value.

    Args:
        p (Tensor | float): The parameter.
        name (str): Its name, for the message.
        x (Tensor): The operator's input.
        op (str): The operator's name, for the message.

    Raises:
        TypeError: ``p`` is neither a tensor nor a real number.
        ValueError: ``p`` is a tensor of more than one value.
    """
    if not isinstance(p, Tensor):
        return torch.tensor(
            check_float(p, name, op), dtype=torch.float64, device=x.device)
    if p.numel() != 1:
        raise ValueError(f'{op}: {name} must hold a single value, got '
                         f'{p.numel()} values')
    return p


def compute_dtype(x: Tensor) -> torch.dtype:
    """float16 / bfloat16 / float32 -> float32, float64 -> float64 (what
    type promotion with float32 gives, written so that torch 2.1's
    ``torch.compile`` traces it).

    Args:
        x (Tensor): A floating-point input.
    """
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def channel_axis(x: Tensor, channel_dim: int) -> int:
    """``channel_dim`` as a non-negative axis of ``x``.

    Args:
        x (Tensor): The input.
        channel_dim (int): An axis of ``x``, negative counted from the end.

    Raises:
        ValueError: ``channel_dim`` is outside ``[-x.dim(), x.dim())``.
    """
    if not -x.dim() <= channel_dim < x.dim():
        raise ValueError(f'channel_dim={channel_dim} is out of range for an '
                         f'input with {x.dim()} dims')
    return channel_dim % x.dim()


def broadcast_shape(p: Tensor, x: Tensor, channel_dim: int,
                    name: str) -> Tuple[int, ...]:
    """Shape that makes a parameter with 1 or C values broadcast against
    ``x`` (C = the size of ``x`` at ``channel_dim``); the C++ operators
    (``csrc/apa_op.cpp``) refuse a wrong count in the same words.

    Args:
        p (Tensor): The parameter (1 or C values).
        x (Tensor): The input.
        channel_dim (int): The axis per-channel values follow.
        name (str): The parameter's name, for the message.

    Raises:
        ValueError: ``p`` has neither 1 nor C values (names
            ``num_parameters`` and the channel count).
    """
    if p.numel() == 1:
        return ()
    dim = channel_axis(x, channel_dim)
    channels = x.shape[dim]
    if p.numel() != channels:
        raise ValueError(
            f'{name} has {p.numel()} values (num_parameters={p.numel()}) but '
            f'the input has {channels} channels at dim {dim} (shape '
            f'{tuple(x.shape)}); use num_parameters=1 or {channels}, or set '
            'channel_dim to the channel axis')
    shape = [1] * x.dim()
    shape[dim] = channels
    return tuple(shape)
