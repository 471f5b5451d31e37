"""FleS activation (flexible scaling; *Toward Principled Flexible Scaling for
Self-Gated Neural Activation*, anonymous submission) as an mmengine module.

Channel count
-------------
Stock backbones (mmpretrain PoolFormer, ConvNeXt, mmcv ConvModule, ...) build
activations from ``act_cfg`` without a channel count. ``FleS`` therefore takes
``channels=None`` by default and is then a *lazy module*
(:class:`torch.nn.modules.lazy.LazyModuleMixin`): its MLP parameters are
:class:`~torch.nn.parameter.UninitializedParameter` until either

* the first forward, which reads ``C`` from the input, or
* ``load_state_dict`` / mmengine ``load_checkpoint``, which materialise them
  from the checkpoint's shapes (so a fresh model loads a checkpoint with
  ``strict=True`` without any forward).

Optimizers, DDP and ``init_weights`` need real parameters, so a model with
lazy FleS layers must see one forward before they are built. Use
:func:`mmact.models.utils.materialize_lazy_modules` (a no-grad dry run in eval
mode that restores every module's training flag), or in an mmengine config
wrap the model so the Runner builds it already materialised::

    model = dict(type='MaterializedModel', input_shape=(1, 3, 224, 224),
                 model=dict(type='ImageClassifier', ...))

``MaterializedModel`` is a builder function: it returns the inner model itself
(state-dict keys unchanged). Passing ``channels=C`` explicitly gives an eager
module with no dry run needed.
"""
import math
import warnings
from contextlib import nullcontext
from typing import Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.model import BaseModule
from mmengine.registry import MODELS
from torch import Tensor
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedParameter

from mmact.ops.fles import (FLES_GATES, FLES_INDICATORS, check_window_args,
                            fles_apply, fles_fused, fles_gate, fles_mlp_scales,
                            fles_proto_scales, fles_reference, fles_scales,
                            fles_shared_mlp_scales, grid_window, window_expand,
                            window_geometry)
from mmact.ops.fles.dispatch import OperatorWindows
from mmact.compat import autocast_may_apply, is_compiling, lazy_module_init

from .base import LearnableActivation

__all__ = ['FleS']

_DATA_FORMATS = (None, 'channels_first', 'channels_last')
#: Scale-MLP layouts: parameter names are the same, shapes differ.
MLP_LAYOUTS = {'shared': fles_shared_mlp_scales, 'separate': fles_mlp_scales}
#: A gate value above this is in the saturation regime (FleS App. E.1).
SATURATION_THRESHOLD = 0.9

_HALF = (torch.float16, torch.bfloat16)


def _computed(x: Tensor) -> Tensor:
    """``x`` in the dtype the composite paths compute in (float32 for
    half)."""
    return x.float() if x.dtype in _HALF else x


# The attributes a layer's calls follow from (set at construction; setting
# one later drops the operator windows remembered per input shape).
_CALL_CONFIG = frozenset({
    'fused', 'proto', 'gate', 'indicator', 'window_size', 'window_grid',
    'stride', 'mlp_layout', 'data_format'
})


def _positive_int(value, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f'{name} must be a positive int, got {value!r}')
    return value


@MODELS.register_module()
class FleS(LearnableActivation, LazyModuleMixin, BaseModule):
    r"""FleS: :math:`\phi(x) = k_{ve}\,\rho(k_{ho} x)\,x`.

    ``(k_ve, k_ho) = softplus(head_ve(h)), softplus(head_ho(h))`` with a
    shared trunk ``h = ReLU(Linear(C, C // r)(xbar))`` and two heads
    ``Linear(C // r, C)`` (``mlp_layout='shared'``, the default: about
    ``3 C^2 / r`` parameters per layer, the count that every parameter
    figure of the FleS paper fits), or two full MLPs
    ``Linear(C, C // r) -> ReLU -> Linear(C // r, C)``
    (``mlp_layout='separate'``, ``4 C^2 / r``; the layout of earlier mmact
    versions, whose checkpoints load with it). The MLP is evaluated at
    every indicator window (a 1x1 convolution on the window grid). The heads
    start with zero weight and bias ``init_bias`` (0.6), so every scale
    starts at ``softplus(0.6) ~= 1.0375`` (paper E.2): FleS starts as
    ``1.0375 * rho(1.0375 x) * x``.

    The indicator ``xbar`` (paper Eq. 5, "effective mean response") is, per
    channel and per sample, ``sum(relu(x)) / max(count(x >= 0), 1)`` over

    * the whole feature map (``window_size=None``, classification),
    * each window of a grid (``window_size=(h, w)`` pixels of the map, or
      ``window_grid=(gh, gw)``: windows of ``ceil(H / gh) x ceil(W / gw)``
      pixels, the same fraction of every map; tiles by default, border
      tiles cut at the border with their own counts; ``stride < window``
      gives overlapping windows and each pixel then gets the *average* of
      the scales of all windows covering it),
    * all tokens of a ``(B, L, C)`` input, or, when the token grid
      ``hw_shape`` is known (passed to :meth:`forward` or set in
      :attr:`token_hw_shape` by a backbone such as
      ``FleSSwinTransformer``), the windows of that ``H x W`` grid.

    Zero padding that batching adds to images is part of the map: windows
    that touch it count the padded pixels (an activation inside a backbone
    does not see the data samples' valid image shapes).

    A window larger than the feature map is clamped to the map (a one-time
    warning per module), so e.g. a detector's small deep-stage maps use the
    whole map. Outputs never depend on other samples of the batch (training
    and eval), except with ``proto=True``.

    Args:
        channels (int, optional): Number of channels ``C``. ``None`` (default)
            makes the module lazy (see the module docstring).
        window_size (int | tuple[int, int], optional): Indicator window
            ``(h, w)`` in pixels of the map; ``None`` (and no
            ``window_grid``) means the whole map. COCO in the paper:
            ``(9, 15)``.
        stride (int | tuple[int, int], optional): Window stride, at most
            ``window_size``; defaults to ``window_size`` (tiles).
        window_grid (int | tuple[int, int], optional): Instead of
            ``window_size``: tile every map into at most ``(gh, gw)``
            windows of ``ceil(H / gh) x ceil(W / gw)`` pixels (e.g.
            ``(9, 15)``: about 89x89 image pixels at every stage of an
            800x1333 input).
        reduction (int): MLP reduction ratio ``r`` (hidden ``C // r``).
            Must not exceed ``C``. Defaults to 32 (paper E.18).
        mlp_layout (str): ``'shared'`` (default; one trunk, two heads) or
            ``'separate'`` (two MLPs). See above.
        gate (str): ``rho``: ``'sigmoid'`` (default), ``'erf'`` (GELU-like),
            ``'tanh_softplus'`` (Mish-like) or ``'tanh_gate'`` (E.14).
        indicator (str): ``'positive'`` (default, Eq. 5), ``'softplus'``
            (learnable per-channel ``gamma_c``, ``beta_c``, Eq. 65),
            ``'quasi_linear'`` (Eq. 66, threshold ``eta``) or ``'mean'``
            (positive-and-negative mean; ablation).
        eta (float): Threshold of the quasi-linear indicator. Defaults to 0.1.
        proto (bool): FleS-Proto (Eq. 4, 6): per-layer scalars on batch
            statistics normalised across channels instead of the MLP.
            **Ablation only**: outputs depend on the whole batch, also in
            eval. Needs ``window_size=None`` and the positive indicator.
        data_format (str, optional): ``'channels_first'`` or
            ``'channels_last'``. ``None``: 4-D inputs are ``(N, C, H, W)``
            and 3-D inputs are tokens ``(B, L, C)``. Use ``'channels_last'``
            for ``(N, H, W, C)`` maps (e.g. ConvNeXt's linear pointwise
            convs) and ``'channels_first'`` for ``(B, C, L)`` sequences.
        init_bias (float): Initial pre-softplus value of every scale.
        fused (bool): Use the memory-lean fused op on contiguous
            channels-first inputs (saves only the input for backward).
            Defaults to True; ``False`` runs the composite autograd version.
        inplace (bool): Accepted and ignored (mmcv's ConvModule injects
            ``inplace=True``); FleS never modifies its input.
        init_cfg (dict, optional): mmengine init config.
    """

    cls_to_become = None
    #: ``(H, W)`` of the token grid of ``(B, L, C)`` inputs, set by a
    #: backbone that knows it before each forward (``None``: unknown).
    token_hw_shape: Optional[Tuple[int, int]] = None
    # The head biases are stacked 2-D tensors that mmengine's bias_decay_mult
    # and flat_decay_mult miss; like every bias they get no decay (fc2_bias
    # also holds the start value init_bias). The MLP weights are decayed.
    no_decay_params = ('fc1_bias', 'fc2_bias', 'ind_gamma', 'ind_beta',
                       'proto_alpha', 'proto_gamma')
    pointwise = False

    def __init__(self,
                 channels: Optional[int] = None,
                 window_size: Union[None, int, Tuple[int, int]] = None,
                 stride: Union[None, int, Tuple[int, int]] = None,
                 window_grid: Union[None, int, Tuple[int, int]] = None,
                 reduction: int = 32,
                 mlp_layout: str = 'shared',
                 gate: str = 'sigmoid',
                 indicator: str = 'positive',
                 eta: float = 0.1,
                 proto: bool = False,
                 data_format: Optional[str] = None,
                 init_bias: float = 0.6,
                 fused: bool = True,
                 inplace: bool = False,
                 init_cfg: Optional[dict] = None) -> None:
        with lazy_module_init():
            super().__init__(init_cfg=init_cfg)
        #: the cache of the FleS table's ``operator`` row for this layer
        self.operator_windows = OperatorWindows()
        if gate not in FLES_GATES:
            raise ValueError(
                f'FleS: unknown gate {gate!r}; choose one of {FLES_GATES}')
        if indicator not in FLES_INDICATORS:
            raise ValueError(f'FleS: unknown indicator {indicator!r}; '
                             f'choose one of {FLES_INDICATORS}')
        if data_format not in _DATA_FORMATS:
            raise ValueError(f'FleS: data_format must be one of '
                             f'{_DATA_FORMATS}, got {data_format!r}')
        if not eta > 0:
            raise ValueError(f'FleS: eta must be > 0, got {eta!r}')
        if mlp_layout not in MLP_LAYOUTS:
            raise ValueError(f'FleS: mlp_layout must be one of '
                             f'{tuple(MLP_LAYOUTS)}, got {mlp_layout!r}')
        self.window_grid = None
        if window_grid is not None:
            if window_size is not None or stride is not None:
                raise ValueError(
                    'FleS: window_grid (tiles, a fraction of the map) takes '
                    'no window_size or stride (pixels); got '
                    f'window_grid={window_grid!r}, '
                    f'window_size={window_size!r}, stride={stride!r}')
            grid_window(1, 1, window_grid)  # validates, naming window_grid
            self.window_grid = ((window_grid, window_grid) if isinstance(
                window_grid, int) else tuple(window_grid))
        self.window_size, self.stride = check_window_args(window_size, stride)
        self.mlp_layout = mlp_layout
        self.reduction = _positive_int(reduction, 'reduction')
        if channels is not None:
            channels = _positive_int(channels, 'channels')
            self._check_reduction(channels)
        if proto and (self.windowed or indicator != 'positive'):
            raise ValueError(
                'FleS(proto=True) uses batch-global positive-only statistics; '
                f'got window_size={window_size!r}, '
                f'window_grid={window_grid!r}, indicator={indicator!r}')
        self.gate = gate
        self.indicator = indicator
        self.eta = float(eta)
        self.proto = proto
        self.data_format = data_format
        self.init_bias = float(init_bias)
        self.fused = fused
        self._warned_clamp = False

        if proto:
            # index 0: k_ve, index 1: k_ho (paper: alpha=1e-3, gamma=0.6)
            self.proto_alpha = nn.Parameter(torch.empty(2))
            self.proto_gamma = nn.Parameter(torch.empty(2))
        else:
            names = ['fc1_weight', 'fc1_bias', 'fc2_weight', 'fc2_bias']
            if indicator == 'softplus':
                names += ['ind_gamma', 'ind_beta']
            for name in names:
                if channels is None:
                    param = UninitializedParameter()
                else:
                    param = nn.Parameter(
                        torch.empty(self._param_shapes(channels)[name]))
                self.register_parameter(name, param)
        if not self.has_uninitialized_params():
            self.reset_parameters()

    def __setattr__(self, name: str, value) -> None:
        if name in _CALL_CONFIG and 'operator_windows' in self.__dict__:
            self.operator_windows.clear()  # they follow from the config
        super().__setattr__(name, value)

    # ------------------------------------------------------------------
    def _check_reduction(self, channels: int) -> None:
        if self.reduction > channels:
            raise ValueError(
                f'FleS: reduction={self.reduction} is larger than the channel '
                f'count {channels}; the MLP hidden size C // r would be 0. '
                'Use reduction <= channels.')

    def _param_shapes(self, channels: int) -> dict:
        hidden = channels // self.reduction
        trunk = (2, ) if self.mlp_layout == 'separate' else ()
        return dict(
            fc1_weight=trunk + (hidden, channels),
            fc1_bias=trunk + (hidden, ),
            fc2_weight=(2, channels, hidden),
            fc2_bias=(2, channels),
            ind_gamma=(channels, ),
            ind_beta=(channels, ))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # Before the lazy hook materialises from the checkpoint's shapes:
        # a checkpoint of the other MLP layout would build a broken layer.
        weight = state_dict.get(prefix + 'fc1_weight')
        if weight is not None and not self.proto:
            layout = 'separate' if weight.dim() == 3 else 'shared'
            if layout != self.mlp_layout:
                raise ValueError(
                    f'FleS {prefix!r}: the checkpoint holds the {layout!r} '
                    f'scale-MLP layout (fc1_weight {tuple(weight.shape)}) '
                    f'but the layer was built with mlp_layout='
                    f"{self.mlp_layout!r}; set mlp_layout='{layout}' in its "
                    'config')
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @property
    def channels(self) -> Optional[int]:
        """Channel count, or None while lazy and not yet materialised."""
        # one parameter's type, not has_uninitialized_params(): asked on
        # every call, and dynamo cannot trace torch.nn.parameter.is_lazy
        # (nor is isinstance, through Parameter's metaclass, cheap)
        if self.proto or type(self.fc2_bias) is UninitializedParameter:
            return None
        return self.fc2_bias.shape[-1]

    def reset_parameters(self) -> None:
        """Identity-safe init: every scale equals ``softplus(init_bias)``."""
        if self.proto:
            nn.init.constant_(self.proto_alpha, 1e-3)
            nn.init.constant_(self.proto_gamma, self.init_bias)
            return
        bound = 1.0 / math.sqrt(self.fc1_weight.shape[-1])
        nn.init.uniform_(self.fc1_weight, -bound, bound)
        nn.init.uniform_(self.fc1_bias, -bound, bound)
        nn.init.zeros_(self.fc2_weight)
        nn.init.constant_(self.fc2_bias, self.init_bias)
        if self.indicator == 'softplus':
            nn.init.ones_(self.ind_gamma)
            nn.init.zeros_(self.ind_beta)

    def initialize_parameters(self, x: Tensor, *args, **kwargs) -> None:
        """LazyModuleMixin hook: materialise from the first input."""
        if not self.has_uninitialized_params():
            return
        channels = self._layout(x)[1]
        self._check_reduction(channels)
        shapes = self._param_shapes(channels)
        # parameters stay in full precision when the first input is
        # fp16/bf16 (e.g. under autocast)
        dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else None
        with torch.no_grad():
            for name, param in self.named_parameters(recurse=False):
                if isinstance(param, UninitializedParameter):
                    param.materialize(
                        shapes[name], device=x.device, dtype=dtype)
            self.reset_parameters()

    # ------------------------------------------------------------------
    def _layout(self, x: Tensor) -> Tuple[str, int]:
        """('nchw' | 'nhwc' | 'blc' | 'bcl', channels) of an input."""
        fmt = self.data_format
        if x.dim() == 4:
            if fmt == 'channels_last':
                return 'nhwc', x.shape[-1]
            return 'nchw', x.shape[1]
        if x.dim() == 3:
            if fmt == 'channels_first':
                return 'bcl', x.shape[1]
            return 'blc', x.shape[-1]
        raise ValueError(
            'FleS expects a 4-D feature map (N, C, H, W) or 3-D tokens '
            f'(B, L, C); got a {x.dim()}-D input of shape {tuple(x.shape)}')

    @property
    def windowed(self) -> bool:
        """Whether the indicator is taken over windows (not the whole map)."""
        return self.window_size is not None or self.window_grid is not None

    def _channels_first(
            self,
            x: Tensor,
            hw_shape: Optional[Sequence[int]] = None) -> Tuple[Tensor, str]:
        """Checked ``(N, C, H, W)`` view of an input, and its layout."""
        layout, channels = self._layout(x)
        expected = self.channels
        if expected is not None and channels != expected:
            raise ValueError(
                f'FleS was built for {self.channels} channels but the input '
                f'of shape {tuple(x.shape)} ({layout}) has {channels}')
        if hw_shape is None:
            hw_shape = self.token_hw_shape
        if layout in ('blc', 'bcl') and hw_shape is not None:
            h, w = hw_shape
            length = x.shape[1] if layout == 'blc' else x.shape[2]
            if h * w != length:
                raise ValueError(
                    f'FleS: token grid hw_shape={tuple(hw_shape)} has {h * w} '
                    f'positions, the input of shape {tuple(x.shape)} has '
                    f'{length} tokens')
            if layout == 'blc':
                return x.unflatten(1, (h, w)).permute(0, 3, 1, 2), layout
            return x.unflatten(2, (h, w)), layout
        if layout in ('blc', 'bcl') and self.windowed:
            window = dict(
                window_size=self.window_size, window_grid=self.window_grid)
            raise ValueError(
                f'FleS {window} needs a spatial layout; tokens of shape '
                f'{tuple(x.shape)} come without one: pass hw_shape (e.g. '
                'through FleSSwinTransformer) or use the whole-map '
                'indicator')
        if layout == 'nhwc':
            return x.permute(0, 3, 1, 2), layout
        if layout == 'blc':
            return x.transpose(1, 2).unsqueeze(-1), layout
        if layout == 'bcl':
            return x.unsqueeze(-1), layout
        return x, layout

    def forward(self,
                x: Tensor,
                hw_shape: Optional[Sequence[int]] = None) -> Tensor:
        """Apply FleS.

        Args:
            x (Tensor): ``(N, C, H, W)`` map, ``(N, H, W, C)`` with
                ``data_format='channels_last'``, or ``(B, L, C)`` tokens.
            hw_shape (Sequence[int], optional): ``(H, W)`` token grid of a
                token input with ``L = H * W`` (row-major); defaults to
                :attr:`token_hw_shape`.

        Returns:
            Tensor: Same shape and dtype as ``x``.
        """
        windows = self.operator_windows
        if windows.windows and hw_shape is None and not is_compiling():
            # None where the entry declines (its checks: a plain
            # contiguous float32 CPU map, weights alike, no tracer)
            params = self._parameters
            y = windows(x, (params.get('fc1_weight'), params.get('fc1_bias'),
                            params.get('fc2_weight'), params.get('fc2_bias')),
                        self.gate, self.indicator)
            if y is not None:
                return y
        xc, layout = self._channels_first(x, hw_shape)
        device_type = x.device.type
        # the scales stay float32 under autocast; a half map is handed to
        # the op as it is (computed in float32, saved in its dtype)
        with (torch.autocast(device_type=device_type, enabled=False)
              if autocast_may_apply(device_type) else nullcontext()):
            y = self._fles(xc, remember=layout == 'nchw' and hw_shape is None)

        if layout == 'nhwc':
            return y.permute(0, 2, 3, 1)
        if layout == 'blc':
            return y.flatten(2).transpose(1, 2)
        if layout == 'bcl':
            return y.flatten(2)
        return y

    def _geometry(self, height: int, width: int):
        window = self.window_size
        if self.window_grid is not None:
            window = grid_window(height, width, self.window_grid)
        return window_geometry(height, width, window, self.stride)

    @torch.no_grad()
    def scales(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """The scales this layer applies to ``x``, for analysis.

        Args:
            x (Tensor): An input the layer accepts (any supported layout).

        Returns:
            tuple[Tensor, Tensor, Tensor]: ``(k_ve, k_ho, rho)`` at every
            position, each shaped like the ``(N, C, H, W)`` view of ``x``
            (tokens: ``(B, C, L, 1)``, or ``(B, C, H, W)`` with
            :attr:`token_hw_shape`), in float32; ``rho`` is the gate
            value ``rho(k_ho * x)`` (paper E.1 counts ``rho > 0.9`` as
            saturated).
        """
        xc = self._channels_first(x)[0].float()
        if self.proto:
            k_ve, k_ho = fles_proto_scales(xc, self.proto_alpha.float(),
                                           self.proto_gamma.float())
        else:
            geom = self._geometry(*xc.shape[-2:])
            k_ve, k_ho = fles_scales(
                xc,
                geom,
                self._mlp_params(xc),
                scale_fn=MLP_LAYOUTS[self.mlp_layout],
                **self._indicator_kwargs(xc))
            k_ve, k_ho = window_expand(k_ve, geom), window_expand(k_ho, geom)
        k_ve, k_ho = k_ve.expand_as(xc), k_ho.expand_as(xc)
        return k_ve, k_ho, fles_gate(k_ho * xc, self.gate)

    def forward_stats(self, x: Tensor) -> Dict[str, float]:
        """The scale statistics of :meth:`scale_stats` for the input ``x``.

        Args:
            x (Tensor): An input the layer accepts.
        """
        return self.scale_stats(*self.scales(x))

    @staticmethod
    def scale_stats(k_ve: Tensor, k_ho: Tensor,
                    rho: Tensor) -> Dict[str, float]:
        """Means of ``k_ve``, ``k_ho`` and of the top 10% of ``k_ve`` (FleS
        App. E.3), and the share of gate values above
        :data:`SATURATION_THRESHOLD` (App. E.1).

        Args:
            k_ve (Tensor): Vertical scales, as :meth:`scales` returns them.
            k_ho (Tensor): Horizontal scales.
            rho (Tensor): Gate values ``rho(k_ho * x)``.

        Returns:
            dict[str, float]: ``k_ve_mean``, ``k_ho_mean``,
            ``k_ve_top10_mean`` and ``saturation``.
        """
        flat_ve = k_ve.reshape(-1)
        top = flat_ve.topk(max(1, flat_ve.numel() // 10)).values
        return dict(
            k_ve_mean=float(flat_ve.mean()),
            k_ho_mean=float(k_ho.mean()),
            k_ve_top10_mean=float(top.mean()),
            saturation=float((rho > SATURATION_THRESHOLD).float().mean()))

    def _mlp_params(self, x: Tensor) -> list:
        # the MLP runs in float32 for half maps
        dtype = torch.float32 if x.dtype in _HALF else x.dtype
        return [
            p if p.dtype == dtype else p.to(dtype)
            for p in (self.fc1_weight, self.fc1_bias, self.fc2_weight,
                      self.fc2_bias)
        ]

    def _indicator_kwargs(self, x: Tensor) -> dict:
        gamma = beta = None
        if self.indicator == 'softplus':
            dtype = torch.float32 if x.dtype in _HALF else x.dtype
            gamma, beta = self.ind_gamma.to(dtype), self.ind_beta.to(dtype)
        return dict(mode=self.indicator, gamma=gamma, beta=beta, eta=self.eta)

    def _fles(self, x: Tensor, remember: bool = False) -> Tensor:
        """FleS on an ``(N, C, H, W)`` map; ``remember``: ``x`` is the
        layer's own input, whose shape :meth:`forward` may remember. A half
        map goes to the fused op as it is; the composite paths compute in
        float32."""
        if self.proto:
            xf = _computed(x)
            k_ve, k_ho = fles_proto_scales(xf, self.proto_alpha.float(),
                                           self.proto_gamma.float())
            return fles_apply(xf, k_ve, k_ho, self.gate).to(x.dtype)
        h, w = x.shape[-2:]
        geom = self._geometry(h, w)
        if geom.clamped and not self._warned_clamp:
            self._warned_clamp = True
            warnings.warn(
                f'FleS: window_size {self.window_size} is larger than the '
                f'{h}x{w} feature map; clamped to {geom.window} (warned once '
                'per module)')
        kwargs = dict(
            gate=self.gate,
            scale_fn=MLP_LAYOUTS[self.mlp_layout],
            **self._indicator_kwargs(x))
        params = self._mlp_params(x)
        if self.fused and x.is_contiguous():
            if remember:
                self.operator_windows.remember(x, geom, self.gate,
                                               self.indicator,
                                               kwargs['scale_fn'], params)
            return fles_fused(x, geom, params, **kwargs)
        return fles_reference(_computed(x), geom, params,
                              **kwargs).to(x.dtype)

    def extra_repr(self) -> str:
        window = (f'window_grid={self.window_grid}'
                  if self.window_grid else f'window_size={self.window_size}')
        return (f'channels={self.channels}, {window}, '
                f'stride={self.stride}, reduction={self.reduction}, '
                f'mlp_layout={self.mlp_layout!r}, '
                f'gate={self.gate!r}, indicator={self.indicator!r}, '
                f'proto={self.proto}')
