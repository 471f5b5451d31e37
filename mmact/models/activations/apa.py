"""APA and AGLU modules (Alexandridis et al. 2025; math in
:mod:`mmact.ops.apa`)."""
import numbers
from typing import Dict, Optional, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn.bricks.hsigmoid import HSigmoid
from mmcv.cnn.bricks.hswish import HSwish
from mmcv.cnn.bricks.swish import Swish
from mmengine.model import BaseModule
from mmengine.registry import MODELS
from torch import Tensor

from mmact.ops import aglu, apa
from mmact.ops.apa import rebuilt_backward
from mmact.ops.apa.gate_fit import fit_gate

from .base import LearnableActivation

__all__ = ['APA', 'AGLU']

InitSpec = Union[float, Tuple[float, float]]

_LAYOUTS = {
    'NCHW': 1,
    'NCL': 1,
    'channels_first': 1,
    'NLC': -1,
    'NHWC': -1,
    'channels_last': -1
}


def parse_channel_dim(channel_dim: Union[int, str]) -> int:
    """Turn a layout name or an axis into the channel axis.

    Args:
        channel_dim (int | str): An axis (1 for NCHW, -1 for NLC) or one of
            ``'NCHW'``, ``'NCL'``, ``'channels_first'`` (axis 1),
            ``'NLC'``, ``'NHWC'``, ``'channels_last'`` (axis -1).

    Returns:
        int: The axis.
    """
    if isinstance(channel_dim, str):
        if channel_dim not in _LAYOUTS:
            raise ValueError(f'channel_dim={channel_dim!r} is not a known '
                             f'layout; accepted: {sorted(_LAYOUTS)} or an '
                             'int axis')
        return _LAYOUTS[channel_dim]
    if isinstance(channel_dim, bool) or not isinstance(channel_dim, int):
        raise TypeError(f'channel_dim must be an int axis or a layout name '
                        f'{sorted(_LAYOUTS)}, got {channel_dim!r}')
    return channel_dim


def parse_init(spec: InitSpec,
               name: str,
               positive: bool = False) -> Tuple[float, float]:
    """Validate an init spec: a fixed float or a ``(low, high)`` range.

    Args:
        spec (float | tuple[float, float]): Fixed value or uniform range.
        name (str): Argument name used in error messages.
        positive (bool): Whether values must be > 0 (a range may start at
            0: draws are then positive almost surely and clamped anyway).

    Returns:
        tuple[float, float]: ``(low, high)``; equal for a fixed value.
    """
    if isinstance(spec, numbers.Real) and not isinstance(spec, bool):
        low = high = float(spec)
        if positive and not low > 0:
            raise ValueError(f'{name} must be > 0, got {spec}')
        return low, high
    if (isinstance(spec, (tuple, list)) and len(spec) == 2 and all(
            isinstance(v, numbers.Real) and not isinstance(v, bool)
            for v in spec)):
        low, high = float(spec[0]), float(spec[1])
        if low > high:
            raise ValueError(f'{name}=({low}, {high}) is a uniform range '
                             'with low > high; expected (low, high) with '
                             'low <= high')
        if positive and (low < 0 or not high > 0):
            raise ValueError(f'{name}=({low}, {high}) must lie in [0, inf) '
                             'with high > 0')
        return low, high
    raise TypeError(f'{name} must be a float (fixed value) or a '
                    f'(low, high) uniform range, got {spec!r}')


class _AdaptiveParametric(LearnableActivation, BaseModule):
    """Shared parameters and checks of :class:`APA` and :class:`AGLU`."""

    # Alexandridis et al. (Adaptive Parametric Activation, 2024) train kappa
    # and lambda without weight decay.
    no_decay_params = ('kappa_param', 'lambda_param')
    _default_kappa: Tuple[float, float] = (0.0, 0.0)
    _default_lambda: Tuple[float, float] = (0.0, 1.0)

    def __init__(self,
                 num_parameters: int = 1,
                 channel_dim: Union[int, str] = 1,
                 kappa_init: Optional[InitSpec] = None,
                 lambda_init: Optional[InitSpec] = None,
                 lambda_min: float = 1e-4,
                 inplace: bool = False,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        if (isinstance(num_parameters, bool)
                or not isinstance(num_parameters, int) or num_parameters < 1):
            raise ValueError('num_parameters must be 1 (shared) or the '
                             f'channel count C, got {num_parameters!r}')
        if not (isinstance(lambda_min, numbers.Real) and lambda_min > 0):
            raise ValueError(f'lambda_min must be > 0, got {lambda_min!r}')
        self.num_parameters = num_parameters
        self.channel_dim = parse_channel_dim(channel_dim)
        self.kappa_init = parse_init(
            self._default_kappa if kappa_init is None else kappa_init,
            'kappa_init')
        self.lambda_init = parse_init(
            self._default_lambda if lambda_init is None else lambda_init,
            'lambda_init',
            positive=True)
        self.lambda_min = float(lambda_min)
        # ``inplace`` is accepted because mmcv's ConvModule injects it into
        # act_cfg; the output is always a new tensor.
        self.inplace = inplace
        self.kappa_param = nn.Parameter(torch.empty(num_parameters))
        self.lambda_param = nn.Parameter(torch.empty(num_parameters))
        self.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        """Apply the activation (:func:`mmact.ops.apa` / ``aglu``; the op
        checks the channel count, its error naming num_parameters).

        Args:
            x (Tensor): Floating-point input.

        Returns:
            Tensor: Output with the shape and dtype of ``x``.
        """
        # The parameters from _parameters: each nn.Module.__getattr__ costs
        # about 0.4 us, a tenth of a small call; a parametrized one
        # (torch.nn.utils.parametrize) is a property instead.
        params = self._parameters
        if 'kappa_param' in params and 'lambda_param' in params:
            return self._op(x, params['kappa_param'], params['lambda_param'],
                            self.lambda_min, self.channel_dim)
        return self._op(x, self.kappa_param, self.lambda_param,
                        self.lambda_min, self.channel_dim)

    def reset_parameters(self) -> None:
        """Draw ``kappa_param`` and ``lambda_param`` from their init specs."""
        with torch.no_grad():
            for p, (low, high) in ((self.kappa_param, self.kappa_init),
                                   (self.lambda_param, self.lambda_init)):
                p.uniform_(low, high) if low < high else p.fill_(low)

    def activation_stats(self) -> Dict[str, Tensor]:
        """``kappa`` and ``lambda`` (after the ``lambda_min`` clamp)."""
        return {
            'kappa': self.kappa_param.detach(),
            'lambda': self.lambda_param.detach().clamp(min=self.lambda_min)
        }

    def match(self, target: nn.Module, means: Tensor, stds: Tensor,
              tolerance: float) -> Tensor:
        """Fit kappa and lambda to ``target``
        (:meth:`LearnableActivation.match`; :func:`mmact.ops.apa.gate_fit.fit_gate`
        with one pair, or one per channel when ``num_parameters`` > 1)."""
        kind = self.match_kind(target)
        if kind is None:
            raise self.unmatched_error(target)
        if self.num_parameters > 1 and means.numel() != self.num_parameters:
            raise ValueError(
                f'{type(self).__name__} has num_parameters='
                f'{self.num_parameters} but the input statistics of the '
                f'{type(target).__name__} it replaces have {means.numel()} '
                'channels')
        fit = fit_gate(self._family, target, kind, means, stds,
                       self.num_parameters == 1, tolerance)
        with torch.no_grad():
            self.kappa_param.copy_(fit.kappa.expand_as(self.kappa_param))
            self.lambda_param.copy_(
                fit.lambda_.clamp_min(self.lambda_min).expand_as(
                    self.lambda_param))
        return fit.error

    def backward_from_sources(self, grad_out, params, sources):
        """The operator's own rebuilt backward
        (:func:`mmact.ops.apa.rebuilt_backward`): the fused CPU and Triton
        kernels rebuild the input per element, no second graph."""
        kappa, lam = params  # registration order: kappa_param, lambda_param
        grad_z, grad_k, grad_l = rebuilt_backward(self._family, grad_out,
                                                  kappa, lam, self.lambda_min,
                                                  self.channel_dim, *sources)
        return grad_z, [grad_k, grad_l]

    def extra_repr(self) -> str:

        def fmt(spec):
            return spec[0] if spec[0] == spec[1] else spec

        return (f'num_parameters={self.num_parameters}, '
                f'channel_dim={self.channel_dim}, '
                f'kappa_init={fmt(self.kappa_init)}, '
                f'lambda_init={fmt(self.lambda_init)}, '
                f'lambda_min={self.lambda_min:g}')


@MODELS.register_module()
class APA(_AdaptiveParametric):
    r"""Adaptive Parametric Activation (Alexandridis et al. 2025, Eq. 5).

    .. math::
        \mathrm{APA}(x) = (\lambda e^{-\kappa x} + 1)^{-1/\lambda}

    ``kappa = lambda = 1`` is the sigmoid, ``lambda -> 0`` the Gumbel gate.
    It is the gate of APA* channel attention and of AGLU. :meth:`match`
    sets it to a Sigmoid it replaces exactly and fits Hardsigmoid.

    Args:
        num_parameters (int): 1 for one shared ``(kappa, lambda)`` per layer
            (default, as in the paper) or the channel count C for one pair
            per channel (stored with shape ``(C,)``).
        channel_dim (int | str): Channel axis of the input for per-channel
            parameters: 1 / ``'NCHW'`` (default) or -1 / ``'NLC'`` for
            tokens.
        kappa_init (float | tuple[float, float], optional): Fixed value or
            ``(low, high)`` uniform range. Defaults to U(-1, 0)
            (Table XV, ImageNet-LT).
        lambda_init (float | tuple[float, float], optional): Fixed value
            (> 0) or ``(low, high)`` uniform range. Defaults to U(0, 1).
        lambda_min (float): Lower clamp of lambda in the forward pass
            (> 0). Defaults to 1e-4.
        inplace (bool): Accepted for mmcv's ``ConvModule`` (which passes
            ``inplace=True``) and ignored: the output is a new tensor.
        init_cfg (dict, optional): mmengine initialisation config.
    """

    _default_kappa = (-1.0, 0.0)
    _default_lambda = (0.0, 1.0)
    _family = 'apa'
    _op = staticmethod(apa)
    match_targets = ((nn.Sigmoid, 'exact'), (nn.Hardsigmoid, 'best'),
                     (HSigmoid, 'best'))


@MODELS.register_module()
class AGLU(_AdaptiveParametric):
    r"""Adaptive Generalised Linear Unit (Alexandridis et al. 2025, Eq. 6).

    .. math::
        \mathrm{AGLU}(x) = x\,(\lambda e^{-\kappa x} + 1)^{-1/\lambda}

    ``kappa = lambda = 1`` is SiLU; ``kappa = 1.702, lambda = 1`` the sigmoid
    GELU approximation; large ``kappa`` tends to ReLU and large ``lambda``
    to the identity. :meth:`match` sets it to a SiLU / Swish it replaces
    exactly, fits GELU, Hardswish and Mish, and approaches ReLU with the
    smallest kappa that reaches the tolerance (:mod:`mmact.ops.apa.gate_fit`).

    Args:
        num_parameters (int): 1 for one shared ``(kappa, lambda)`` per layer
            (default, as in the paper) or the channel count C for one pair
            per channel (stored with shape ``(C,)``).
        channel_dim (int | str): Channel axis of the input for per-channel
            parameters: 1 / ``'NCHW'`` (default) or -1 / ``'NLC'`` for
            tokens.
        kappa_init (float | tuple[float, float], optional): Fixed value or
            ``(low, high)`` uniform range. Defaults to U(1, 1.3)
            (Table XV).
        lambda_init (float | tuple[float, float], optional): Fixed value
            (> 0) or ``(low, high)`` uniform range. Defaults to U(0, 1).
        lambda_min (float): Lower clamp of lambda in the forward pass
            (> 0). Defaults to 1e-4.
        inplace (bool): Accepted for mmcv's ``ConvModule`` (which passes
            ``inplace=True``) and ignored: the output is a new tensor.
        init_cfg (dict, optional): mmengine initialisation config.
    """

    _default_kappa = (1.0, 1.3)
    _default_lambda = (0.0, 1.0)
    _family = 'aglu'
    _op = staticmethod(aglu)
    match_targets = ((nn.SiLU, 'exact'), (Swish, 'exact'), (nn.ReLU, 'limit'),
                     (nn.GELU, 'best'), (nn.Hardswish, 'best'),
                     (HSwish, 'best'), (nn.Mish, 'best'))
