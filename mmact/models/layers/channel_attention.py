"""Channel attention: SE baseline and APA-SE ("APA*"); math in
docs/design/operators.md.

    A(X) = gate(Dropout(W2 act(W1 LN(GAP(X))))),    X' = A(X) * X

Both classes live in mmengine's root ``MODELS`` so they resolve under any
default scope, and both take ``in_channels`` first so that
:func:`mmcv.cnn.build_plugin_layer` (which calls ``cls(in_channels=C, **cfg)``)
can build them as plugins of a stock mmdet ``ResNet``.

Naming: mmpretrain and mmdet both already ship a ``SELayer`` (1x1 convs,
different arguments), so the sigmoid baseline is called ``SEAttention`` here
to avoid a name that means two different layers depending on the scope.
"""
from typing import Optional

import torch
import torch.nn as nn
from mmcv.cnn import build_activation_layer
from mmengine.model import BaseModule
from mmengine.registry import MODELS

__all__ = ['APASELayer', 'SEAttention']


@MODELS.register_module()
class APASELayer(BaseModule):
    """APA* channel attention (Alexandridis et al. 2025, Sec. V-B).

    ``GAP -> LayerNorm -> Linear(C, C/r) -> act -> Linear(C/r, C) -> Dropout
    -> gate``; the result rescales the input per channel. The defaults are the
    APA* setting (LayerNorm, dropout 0.1, no bias, gate ``APA``). Every part
    can be switched off or replaced, which gives the ablations of Table IV-e.

    Parameter names (``norm``, ``fc1``, ``fc2``, ``gate``) map one-to-one to
    the reference implementation's ``se.norm``, ``se.excitation.0``,
    ``se.excitation.2`` and ``se.uniact`` (see
    ``tools/model_converters/apa_to_mmact.py``).

    Args:
        in_channels (int): Channels C of the input (and output).
        ratio (int): Squeeze ratio r; hidden width is ``C // r``. Ignored when
            ``squeeze_channels`` is given. Defaults to 16.
        squeeze_channels (int, optional): Hidden width, overrides ``ratio``.
        bias (bool): Whether the two linear layers have a bias. Defaults to
            False (APA*).
        use_norm (bool): LayerNorm over channels after pooling. Defaults to
            True.
        dropout (float): Dropout probability on the gate input; 0 disables
            it. Defaults to 0.1.
        act_cfg (dict): Activation between the two linear layers. Defaults to
            ``dict(type='ReLU', inplace=True)``.
        gate_cfg (dict): Gate activation, any registered type. Defaults to
            ``dict(type='APA')``.
        init_cfg (dict or list[dict], optional): Initialisation config.
    """

    # Name used by mmcv's build_plugin_layer for the attribute in the block.
    _abbr_ = 'apa_se'
    # Submodule whose output is the attention weights A(X) (mmact.analysis
    # records it).
    attention_source = 'gate'

    def __init__(self,
                 in_channels: int,
                 ratio: int = 16,
                 squeeze_channels: Optional[int] = None,
                 bias: bool = False,
                 use_norm: bool = True,
                 dropout: float = 0.1,
                 act_cfg: dict = dict(type='ReLU', inplace=True),
                 gate_cfg: dict = dict(type='APA'),
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        if not isinstance(in_channels, int) or in_channels <= 0:
            raise ValueError(f'{type(self).__name__}: in_channels must be a '
                             f'positive int, got {in_channels!r}')
        if squeeze_channels is None:
            if not isinstance(ratio, int) or ratio <= 0:
                raise ValueError(f'{type(self).__name__}: ratio must be a '
                                 f'positive int, got {ratio!r}')
            squeeze_channels = in_channels // ratio
        if not isinstance(squeeze_channels, int) or squeeze_channels <= 0:
            raise ValueError(
                f'{type(self).__name__}: hidden width must be positive, got '
                f'squeeze_channels={squeeze_channels!r} (in_channels='
                f'{in_channels}, ratio={ratio})')
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f'{type(self).__name__}: dropout must be in '
                             f'[0, 1), got {dropout!r}')
        if not isinstance(gate_cfg, dict):
            raise TypeError(f'{type(self).__name__}: gate_cfg must be a dict, '
                            f'got {gate_cfg!r}')
        self.in_channels = in_channels
        self.squeeze_channels = squeeze_channels

        self.norm = nn.LayerNorm(in_channels) if use_norm else None
        self.fc1 = nn.Linear(in_channels, squeeze_channels, bias=bias)
        self.act = build_activation_layer(act_cfg)
        self.fc2 = nn.Linear(squeeze_channels, in_channels, bias=bias)
        self.drop = nn.Dropout(dropout) if dropout > 0 else None
        self.gate = build_activation_layer(gate_cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Rescale ``x`` (N, C, *spatial) channel-wise."""
        return x * self.weights(x)

    def weights(self, x: torch.Tensor) -> torch.Tensor:
        """Attention ``A(x)`` shaped (N, C, 1, ...) so ``forward = x * A(x)``.

        Exposed so a backbone can fuse the product with the residual add
        (see :mod:`mmact.models.backbones.recompute`).
        """
        if x.dim() < 3 or x.shape[1] != self.in_channels:
            # A plugin placed at a position with another width would
            # otherwise fail deep inside F.linear with a shape message that
            # names neither the layer nor the expected width.
            raise ValueError(
                f'{type(self).__name__} was built for in_channels='
                f'{self.in_channels} but got input of shape '
                f'{tuple(x.shape)} ({x.shape[1] if x.dim() > 1 else "?"} '
                'channels); check the plugin position / in_channels')
        s = x.mean(dim=tuple(range(2, x.dim())))  # GAP -> (N, C)
        if self.norm is not None:
            s = self.norm(s)
        s = self.fc2(self.act(self.fc1(s)))
        if self.drop is not None:
            s = self.drop(s)
        a = self.gate(s)
        return a.reshape(*a.shape, *([1] * (x.dim() - 2)))

    def extra_repr(self) -> str:
        return (f'in_channels={self.in_channels}, '
                f'squeeze_channels={self.squeeze_channels}')


@MODELS.register_module()
class SEAttention(APASELayer):
    """Squeeze-and-Excitation baseline (Hu et al.) as used by the paper.

    Same layer as :class:`APASELayer` with the SE defaults: no LayerNorm, no
    dropout, linear layers with bias, sigmoid gate. With ``ratio=16`` its
    parameter count equals mmpretrain's ``SELayer`` on ResNet widths (which
    uses 1x1 convs with bias), so ``ActResNet(attention_cfg=SEAttention)``
    matches mmpretrain's ``SEResNet``.

    Args:
        in_channels (int): Channels C of the input (and output).
        ratio (int): Squeeze ratio r. Defaults to 16.
        squeeze_channels (int, optional): Hidden width, overrides ``ratio``.
        bias (bool): Bias in the linear layers. Defaults to True.
        use_norm (bool): LayerNorm after pooling. Defaults to False.
        dropout (float): Dropout on the gate input. Defaults to 0.
        act_cfg (dict): Hidden activation. Defaults to ReLU.
        gate_cfg (dict): Gate activation. Defaults to ``Sigmoid``.
        init_cfg (dict or list[dict], optional): Initialisation config.
    """

    _abbr_ = 'se'

    def __init__(self,
                 in_channels: int,
                 ratio: int = 16,
                 squeeze_channels: Optional[int] = None,
                 bias: bool = True,
                 use_norm: bool = False,
                 dropout: float = 0.0,
                 act_cfg: dict = dict(type='ReLU', inplace=True),
                 gate_cfg: dict = dict(type='Sigmoid'),
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(
            in_channels,
            ratio=ratio,
            squeeze_channels=squeeze_channels,
            bias=bias,
            use_norm=use_norm,
            dropout=dropout,
            act_cfg=act_cfg,
            gate_cfg=gate_cfg,
            init_cfg=init_cfg)
