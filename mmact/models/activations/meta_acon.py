"""Meta-ACON module (Ma et al., Activate or Not: Learning Customized
Activation, CVPR 2021; the activation itself is :func:`mmact.ops.acon_c`)."""
import math
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from mmengine.model import BaseModule
from mmengine.registry import MODELS
from torch import Tensor
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter

from mmact.ops.meta_acon import acon_c
from mmact.compat import lazy_module_init

from .base import LearnableActivation

__all__ = ['MetaACON']

_PARAMS = ('p1', 'p2', 'fc1_weight', 'fc1_bias', 'fc2_weight', 'fc2_bias')
_NORM_PARAMS = ('bn1_weight', 'bn1_bias', 'bn2_weight', 'bn2_bias')
_NORM_BUFFERS = ('bn1_running_mean', 'bn1_running_var', 'bn2_running_mean',
                 'bn2_running_var')


def _positive_int(value, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f'MetaACON: {name} must be a positive int, '
                         f'got {value!r}')
    return value


@MODELS.register_module()
class MetaACON(LearnableActivation, LazyModuleMixin, BaseModule):
    r"""Meta-ACON: ACON-C with a switching factor predicted per sample.

    .. math::
        y = (p_1 - p_2) x\,\sigma(\beta (p_1 - p_2) x) + p_2 x, \qquad
        \beta = \sigma(\mathrm{BN}(W_2\,\mathrm{BN}(W_1\,\bar{x})))

    ``p1``, ``p2`` are per-channel parameters, ``xbar`` is the spatial mean
    of each channel of each sample and ``W1`` (``C -> max(m, C // r)``),
    ``W2`` (``max(m, C // r) -> C``) are linear layers with bias, as in the
    authors' released code (``r = 16``, ``m = 16``, BatchNorm after both
    layers, no other nonlinearity, ``p1`` and ``p2`` drawn from N(0, 1)).
    The paper writes ``beta = sigmoid(W1 W2 sum(x))`` without the norms;
    ``norm=False`` gives that form (with the mean, which only rescales W).

    With ``norm=True`` the BatchNorms use batch statistics in training (so a
    sample's ``beta`` depends on the other samples of the batch, and a
    training batch needs at least two samples) and running statistics in
    eval mode. ``norm_eval=True`` uses the running statistics in training
    too, without updating them: what detectors do with backbone BatchNorm at
    one or two images per GPU, where batch statistics of the pooled vectors
    are meaningless (two samples normalise to +-1).

    Stock backbones build activations from ``act_cfg`` without a channel
    count: ``channels=None`` makes the module lazy, like
    :class:`~mmact.models.activations.FleS` (materialised by the first
    forward or by loading a checkpoint; wrap configs in
    ``MaterializedModel``).

    Args:
        channels (int, optional): Channel count ``C``; ``None`` (default)
            makes the module lazy.
        reduction (int): Reduction ratio ``r`` of the beta network.
            Defaults to 16.
        min_hidden (int): Smallest hidden width ``m``. Defaults to 16.
        norm (bool): BatchNorm after both layers of the beta network.
            Defaults to True (authors' code).
        norm_eval (bool): Keep the BatchNorms in eval mode (frozen running
            statistics) during training. Defaults to False.
        momentum (float): Running-statistics momentum of the BatchNorms.
        eps (float): BatchNorm epsilon.
        inplace (bool): Accepted for mmcv's ``ConvModule`` and ignored.
        init_cfg (dict, optional): mmengine initialisation config.
    """

    cls_to_become = None
    # per-channel slopes, biases and norm affines train without decay; the
    # two weight matrices are decayed like any linear weight
    no_decay_params = ('p1', 'p2', 'fc1_bias', 'fc2_bias') + _NORM_PARAMS
    pointwise = False

    def __init__(self,
                 channels: Optional[int] = None,
                 reduction: int = 16,
                 min_hidden: int = 16,
                 norm: bool = True,
                 norm_eval: bool = False,
                 momentum: float = 0.1,
                 eps: float = 1e-5,
                 inplace: bool = False,
                 init_cfg: Optional[dict] = None) -> None:
        with lazy_module_init():
            super().__init__(init_cfg=init_cfg)
        self.reduction = _positive_int(reduction, 'reduction')
        self.min_hidden = _positive_int(min_hidden, 'min_hidden')
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(
                f'MetaACON: momentum must be in [0, 1], got {momentum!r}')
        if not eps > 0:
            raise ValueError(f'MetaACON: eps must be > 0, got {eps!r}')
        self.norm = bool(norm)
        self.norm_eval = bool(norm_eval)
        self.momentum = float(momentum)
        self.eps = float(eps)
        self.inplace = inplace
        if channels is not None:
            channels = _positive_int(channels, 'channels')
        names = _PARAMS + (_NORM_PARAMS if self.norm else ())
        for name in names:
            self.register_parameter(
                name,
                UninitializedParameter() if channels is None else
                torch.nn.Parameter(torch.empty(self._shapes(channels)[name])))
        for name in _NORM_BUFFERS if self.norm else ():
            self.register_buffer(
                name,
                UninitializedBuffer() if channels is None else torch.empty(
                    self._shapes(channels)[name]))
        if not self.has_uninitialized_params():
            self.reset_parameters()

    def hidden(self, channels: int) -> int:
        """Hidden width of the beta network for ``channels`` channels."""
        return max(self.min_hidden, channels // self.reduction)

    def _shapes(self, channels: int) -> dict:
        h = self.hidden(channels)
        return dict(
            p1=(channels, ),
            p2=(channels, ),
            fc1_weight=(h, channels),
            fc1_bias=(h, ),
            fc2_weight=(channels, h),
            fc2_bias=(channels, ),
            bn1_weight=(h, ),
            bn1_bias=(h, ),
            bn2_weight=(channels, ),
            bn2_bias=(channels, ),
            bn1_running_mean=(h, ),
            bn1_running_var=(h, ),
            bn2_running_mean=(channels, ),
            bn2_running_var=(channels, ))

    @property
    def channels(self) -> Optional[int]:
        """Channel count, or None while lazy."""
        if self.has_uninitialized_params():
            return None
        return self.p1.shape[0]

    def reset_parameters(self) -> None:
        """Authors' init: ``p1, p2 ~ N(0, 1)``, PyTorch default linear
        layers (uniform in +-1/sqrt(fan_in)), BatchNorm at identity."""
        torch.nn.init.normal_(self.p1)
        torch.nn.init.normal_(self.p2)
        for weight, bias in ((self.fc1_weight, self.fc1_bias),
                             (self.fc2_weight, self.fc2_bias)):
            bound = 1.0 / math.sqrt(weight.shape[1])
            torch.nn.init.uniform_(weight, -bound, bound)
            torch.nn.init.uniform_(bias, -bound, bound)
        if self.norm:
            for i in (1, 2):
                torch.nn.init.ones_(getattr(self, f'bn{i}_weight'))
                torch.nn.init.zeros_(getattr(self, f'bn{i}_bias'))
                getattr(self, f'bn{i}_running_mean').zero_()
                getattr(self, f'bn{i}_running_var').fill_(1.0)

    def initialize_parameters(self, x: Tensor, *args, **kwargs) -> None:
        """LazyModuleMixin hook: materialise from the first input."""
        if not self.has_uninitialized_params():
            return
        self._check_input(x)
        shapes = self._shapes(x.shape[1])
        dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else None
        with torch.no_grad():
            for name, value in list(self.named_parameters(recurse=False)) + \
                    list(self.named_buffers(recurse=False)):
                if isinstance(value,
                              (UninitializedParameter, UninitializedBuffer)):
                    value.materialize(
                        shapes[name], device=x.device, dtype=dtype)
            self.reset_parameters()

    def _check_input(self, x: Tensor) -> None:
        if x.dim() < 2:
            raise ValueError('MetaACON expects a channels-first input '
                             f'(N, C, ...), got shape {tuple(x.shape)}')
        channels = self.channels
        if channels is not None and x.shape[1] != channels:
            raise ValueError(f'MetaACON was built for {channels} channels, '
                             f'the input of shape {tuple(x.shape)} has '
                             f'{x.shape[1]}')

    def _norm(self, h: Tensor, i: int, track: bool) -> Tensor:
        if not self.norm:
            return h
        batch_stats = self.training and not self.norm_eval
        if batch_stats and h.shape[0] < 2:
            raise ValueError(
                'MetaACON(norm=True) normalises beta over the batch and '
                'needs at least 2 samples per batch in training, got '
                f'{h.shape[0]}; use a larger batch, norm_eval=True or '
                'norm=False')
        running = [
            getattr(self, f'bn{i}_running_{s}')
            if track or not batch_stats else None for s in ('mean', 'var')
        ]
        return F.batch_norm(
            h,
            *running,
            getattr(self, f'bn{i}_weight'),
            getattr(self, f'bn{i}_bias'),
            training=batch_stats,
            momentum=self.momentum,
            eps=self.eps)

    def beta(self, x: Tensor, update_stats: bool = True) -> Tensor:
        """Switching factor ``(N, C)`` of an input ``(N, C, ...)``.

        Args:
            x (Tensor): Input ``(N, C, ...)``.
            update_stats (bool): In training, update the BatchNorm running
                statistics (as the forward does). ``False`` leaves them
                untouched, for probes.
        """
        self._check_input(x)
        track = update_stats or not self.training
        mean = x.reshape(x.shape[0], x.shape[1], -1).mean(-1)
        mean = mean.to(self.fc1_weight.dtype)
        h = F.linear(mean, self.fc1_weight, self.fc1_bias)
        h = self._norm(h, 1, track)
        b = self._norm(F.linear(h, self.fc2_weight, self.fc2_bias), 2, track)
        return torch.sigmoid(b)

    def forward(self, x: Tensor) -> Tensor:
        """Apply Meta-ACON.

        Args:
            x (Tensor): Floating-point input ``(N, C, ...)``.

        Returns:
            Tensor: Same shape and dtype as ``x``.
        """
        return acon_c(x, self.p1, self.p2, self.beta(x))

    def activation_stats(self) -> Dict[str, Tensor]:
        """The per-channel slopes ``p1`` and ``p2`` (empty while lazy)."""
        if self.channels is None:
            return {}
        return {'p1': self.p1.detach(), 'p2': self.p2.detach()}

    @torch.no_grad()
    def forward_stats(self, x: Tensor) -> Dict[str, float]:
        """Mean and spread of the switching factor ``beta`` for ``x``.

        Args:
            x (Tensor): An input ``(N, C, ...)`` of the layer.

        Returns:
            dict[str, float]: ``beta_mean`` and ``beta_std`` over samples
            and channels.
        """
        beta = self.beta(x, update_stats=False).float()
        return dict(
            beta_mean=float(beta.mean()),
            beta_std=float(beta.std(unbiased=False)))

    def extra_repr(self) -> str:
        return (f'channels={self.channels}, reduction={self.reduction}, '
                f'min_hidden={self.min_hidden}, norm={self.norm}, '
                f'norm_eval={self.norm_eval}')
