"""CBAM: channel then spatial attention (Woo et al., CBAM: Convolutional
Block Attention Module, 2018), and its APA* form.

    channel:  a_c = gate_c(Dropout(MLP(N(AvgPool(x)))) + Dropout(MLP(N(MaxPool(x)))))
    spatial:  a_s = gate_s(BN(Conv_kxk([max_C(x'), mean_C(x')])))
    output:   x' * a_s,   x' = x * a_c

Alexandridis et al., Adaptive Parametric Activation, 2024 replace both
sigmoid gates by APA (Table VI-a "CBAM-ResNet50 w/ APA*+AGLU", Table IV-b
"Spatial / Spatial + Channel + APA"). Their code (GitHub kostas1515/AGLU,
``classification/cbam.py``) also layer-normalises each pooled vector (``N``)
before the shared MLP, ends the MLP in ``Dropout(0.1)`` and normalises the
spatial map with a BatchNorm (momentum 0.01, as CBAM's code); all are
options here.

Like :mod:`.channel_attention`, the layers live in mmengine's root ``MODELS``
and take ``in_channels`` first, so they work as ``attention_cfg`` of
:class:`mmact.models.backbones.ActResNet` and as mmcv plugins.
"""
from typing import Optional

import torch
import torch.nn as nn
from mmcv.cnn import build_activation_layer, build_norm_layer
from mmengine.model import BaseModule
from mmengine.registry import MODELS

__all__ = ['APACBAMAttention', 'CBAMAttention']


@MODELS.register_module()
class APACBAMAttention(BaseModule):
    """CBAM with APA gates (the APA* form of CBAM).

    Args:
        in_channels (int): Channels C of the input (and output).
        ratio (int): Squeeze ratio r of the channel MLP (hidden width
            ``C // r``). Ignored when ``squeeze_channels`` is given.
            Defaults to 16.
        squeeze_channels (int, optional): Hidden width of the channel MLP.
        dropout (float): Dropout after the channel MLP; 0 disables it.
            Defaults to 0.1 (the APA authors' code).
        use_norm (bool): LayerNorm on each pooled vector before the channel
            MLP (``channel_norm``), as the APA authors' code. Defaults to
            False, so checkpoints of the layer without it keep loading.
        kernel_size (int): Odd size of the spatial conv. Defaults to 7.
        use_channel (bool): Apply the channel gate. Defaults to True.
        use_spatial (bool): Apply the spatial gate. Defaults to True.
            ``use_channel=False`` gives spatial attention alone (Table IV-b,
            "Spatial").
        act_cfg (dict): Activation inside the channel MLP. Defaults to ReLU.
        channel_gate_cfg (dict): Gate of the channel attention. Defaults to
            ``dict(type='APA')``.
        spatial_gate_cfg (dict): Gate of the spatial attention. Defaults to
            ``dict(type='APA')``.
        norm_cfg (dict, optional): Norm after the spatial conv; None
            removes it. Defaults to BN with momentum 0.01.
        init_cfg (dict or list[dict], optional): Initialisation config.
    """

    _abbr_ = 'apa_cbam'

    def __init__(self,
                 in_channels: int,
                 ratio: int = 16,
                 squeeze_channels: Optional[int] = None,
                 dropout: float = 0.1,
                 use_norm: bool = False,
                 kernel_size: int = 7,
                 use_channel: bool = True,
                 use_spatial: bool = True,
                 act_cfg: dict = dict(type='ReLU', inplace=True),
                 channel_gate_cfg: dict = dict(type='APA'),
                 spatial_gate_cfg: dict = dict(type='APA'),
                 norm_cfg: Optional[dict] = dict(type='BN', momentum=0.01),
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        name = type(self).__name__
        if not isinstance(in_channels, int) or in_channels <= 0:
            raise ValueError(f'{name}: in_channels must be a positive int, '
                             f'got {in_channels!r}')
        if not (use_channel or use_spatial):
            raise ValueError(f'{name}: use_channel and use_spatial are both '
                             'False; enable at least one gate')
        if not isinstance(kernel_size, int) or kernel_size < 1 \
                or kernel_size % 2 == 0:
            raise ValueError(f'{name}: kernel_size must be a positive odd '
                             f'int, got {kernel_size!r}')
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f'{name}: dropout must be in [0, 1), got '
                             f'{dropout!r}')
        self.in_channels = in_channels
        self.channel_mlp = None
        if use_channel:
            if squeeze_channels is None:
                if not isinstance(ratio, int) or ratio <= 0:
                    raise ValueError(f'{name}: ratio must be a positive int, '
                                     f'got {ratio!r}')
                squeeze_channels = in_channels // ratio
            if not isinstance(squeeze_channels, int) or squeeze_channels <= 0:
                raise ValueError(
                    f'{name}: hidden width must be positive, got '
                    f'squeeze_channels={squeeze_channels!r} (in_channels='
                    f'{in_channels}, ratio={ratio})')
            layers = [
                nn.Linear(in_channels, squeeze_channels),
                build_activation_layer(act_cfg),
                nn.Linear(squeeze_channels, in_channels)
            ]
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            self.channel_mlp = nn.Sequential(*layers)
            self.channel_norm = nn.LayerNorm(in_channels) if use_norm \
                else nn.Identity()
            self.channel_gate = build_activation_layer(channel_gate_cfg)
        self.spatial_conv = None
        if use_spatial:
            self.spatial_conv = nn.Conv2d(
                2, 1, kernel_size, padding=kernel_size // 2, bias=False)
            self.spatial_norm = (
                build_norm_layer(norm_cfg, 1)[1]
                if norm_cfg is not None else None)
            self.spatial_gate = build_activation_layer(spatial_gate_cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Rescale ``x`` (N, C, H, W) per channel, then per position."""
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(
                f'{type(self).__name__} was built for (N, {self.in_channels}'
                f', H, W) inputs but got shape {tuple(x.shape)}; check the '
                'plugin position / in_channels')
        if self.channel_mlp is not None:
            pooled = self.channel_mlp(self.channel_norm(
                x.mean(dim=(2, 3)))) + self.channel_mlp(
                    self.channel_norm(x.amax(dim=(2, 3))))
            x = x * self.channel_gate(pooled)[:, :, None, None]
        if self.spatial_conv is not None:
            # channel-wise max and mean (CBAM's order)
            maps = torch.cat(
                [x.amax(dim=1, keepdim=True),
                 x.mean(dim=1, keepdim=True)],
                dim=1)
            s = self.spatial_conv(maps)
            if self.spatial_norm is not None:
                s = self.spatial_norm(s)
            x = x * self.spatial_gate(s)
        return x

    def extra_repr(self) -> str:
        return (f'in_channels={self.in_channels}, '
                f'channel={self.channel_mlp is not None}, '
                f'spatial={self.spatial_conv is not None}')


@MODELS.register_module()
class CBAMAttention(APACBAMAttention):
    """CBAM as Woo et al. define it: sigmoid gates, no dropout, no norm.

    Args:
        in_channels (int): Channels C of the input (and output).
        ratio (int): Squeeze ratio r. Defaults to 16.
        squeeze_channels (int, optional): Hidden width, overrides ``ratio``.
        dropout (float): Dropout after the channel MLP. Defaults to 0.
        use_norm (bool): LayerNorm on the pooled vectors. Defaults to False.
        kernel_size (int): Spatial conv size. Defaults to 7.
        use_channel (bool): Apply the channel gate. Defaults to True.
        use_spatial (bool): Apply the spatial gate. Defaults to True.
        act_cfg (dict): Activation inside the channel MLP. Defaults to ReLU.
        channel_gate_cfg (dict): Defaults to ``dict(type='Sigmoid')``.
        spatial_gate_cfg (dict): Defaults to ``dict(type='Sigmoid')``.
        norm_cfg (dict, optional): Norm after the spatial conv. Defaults to
            BN with momentum 0.01.
        init_cfg (dict or list[dict], optional): Initialisation config.
    """

    _abbr_ = 'cbam'

    def __init__(self,
                 in_channels: int,
                 ratio: int = 16,
                 squeeze_channels: Optional[int] = None,
                 dropout: float = 0.0,
                 use_norm: bool = False,
                 kernel_size: int = 7,
                 use_channel: bool = True,
                 use_spatial: bool = True,
                 act_cfg: dict = dict(type='ReLU', inplace=True),
                 channel_gate_cfg: dict = dict(type='Sigmoid'),
                 spatial_gate_cfg: dict = dict(type='Sigmoid'),
                 norm_cfg: Optional[dict] = dict(type='BN', momentum=0.01),
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(
            in_channels,
            ratio=ratio,
            squeeze_channels=squeeze_channels,
            dropout=dropout,
            use_norm=use_norm,
            kernel_size=kernel_size,
            use_channel=use_channel,
            use_spatial=use_spatial,
            act_cfg=act_cfg,
            channel_gate_cfg=channel_gate_cfg,
            spatial_gate_cfg=spatial_gate_cfg,
            norm_cfg=norm_cfg,
            init_cfg=init_cfg)
