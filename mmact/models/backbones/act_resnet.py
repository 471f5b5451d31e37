"""ResNet / ResNeXt with configurable activations and channel attention.

A small subclass of mmpretrain's ``ResNet`` / ``ResNeXt``. The
same classes are registered in mmpretrain's and mmdet's ``MODELS``, so the
classification and detection variants are one class with one set of
state-dict keys: an mmpretrain ``ImageClassifier`` checkpoint initialises a
detector backbone through ``init_cfg=dict(type='Pretrained',
prefix='backbone.')``.

Key layout (upstream's names, except the activations and the attention):

- stem: ``conv1``, ``bn1``, ``relu`` (the name is upstream's; it holds
  whatever ``act_cfg`` builds) -- or ``stem.{0,1,2}`` with ``deep_stem``.
- Bottleneck ``layer{i}.{j}``: ``conv{1,2,3}``, ``bn{1,2,3}``, own
  activations ``act1`` (after bn1), ``act2`` (after bn2), ``act3`` (after the
  residual add), optional ``attn`` (after bn3, before the add) and
  ``downsample.{0,1}``. Upstream's single shared ``relu`` is removed.
- BasicBlock: ``act1`` (after bn1), ``act2`` (after the add), ``attn`` after
  bn2.

Plain ReLU without attention therefore has exactly upstream's parameters
(activations without parameters add no keys), and SE attention matches
mmpretrain's ``SEResNet`` parameter count.
"""
from typing import Optional

import torch
import torch.nn as nn
import torch.utils.checkpoint as cp
from mmcv.cnn import build_activation_layer
from mmdet.registry import MODELS as MMDET_MODELS
from mmengine.registry import MODELS as ROOT_MODELS
from mmengine.runner.checkpoint import CheckpointLoader
from mmpretrain.models.backbones.resnet import BasicBlock, Bottleneck, ResNet
from mmpretrain.models.backbones.resnext import Bottleneck as XBottleneck
from mmpretrain.models.backbones.resnext import ResNeXt
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS

from ...compat import forward_ad_active, is_tracing
from .recompute import (can_fuse_residual, default_recompute, norm_act,
                        residual_act)
from .reference_layout import check_pretrained_layout

__all__ = [
    'ActBasicBlock', 'ActBottleneck', 'ActResNeXtBottleneck', 'ActResNet',
    'ActResNeXt', 'build_attention'
]

_ATTENTION_HINT = ("e.g. dict(type='SEAttention') or dict(type='APASELayer')")


def _resolve(cfg: Optional[dict], what: str) -> None:
    """Raise a KeyError naming ``what`` when ``cfg['type']`` is unknown.

    Checked once in the backbone constructor so a typo fails before dozens of
    blocks are built, with the argument name in the message.
    """
    if cfg is None:
        return
    if not isinstance(cfg, dict) or 'type' not in cfg:
        raise TypeError(f'{what} must be None or a dict with a "type" key, '
                        f'got {cfg!r}')
    layer_type = cfg['type']
    if isinstance(layer_type, type):
        return
    # Same lookup as Registry.build: current default scope, then its parents.
    with ROOT_MODELS.switch_scope_and_registry(None) as registry:
        found = registry.get(layer_type)
    if found is None:
        hint = f' ({_ATTENTION_HINT})' if what == 'attention_cfg' else ''
        raise KeyError(f'{what}: type {layer_type!r} is not registered{hint}; '
                       'is the module imported (custom_imports) and spelled '
                       'correctly?')


def build_attention(cfg: Optional[dict],
                    in_channels: int) -> Optional[nn.Module]:
    """Build an attention layer for a block output of ``in_channels``.

    Args:
        cfg (dict, optional): Layer config; ``in_channels`` is filled in.
        in_channels (int): Channels of the tensor the layer rescales.

    Returns:
        nn.Module or None: The layer, None when ``cfg`` is None.
    """
    if cfg is None:
        return None
    cfg = dict(cfg)
    given = cfg.pop('in_channels', None)
    if given is not None and given != in_channels:
        raise ValueError(f'attention_cfg sets in_channels={given} but the '
                         f'block output it rescales has {in_channels} '
                         'channels; drop in_channels from attention_cfg')
    return ROOT_MODELS.build(dict(cfg, in_channels=in_channels))


def _run(block: nn.Module, inner, x: torch.Tensor) -> torch.Tensor:
    """Upstream's checkpointing rule, shared by both block types."""
    if block.with_cp and x.requires_grad:
        return cp.checkpoint(inner, x, use_reentrant=False)
    return inner(x)


def _use_recompute(block: nn.Module) -> bool:
    # Only worth it when backward will run; with_cp already recomputes all.
    # Traced (torch.compile): the compiler's partitioner decides what to
    # keep, and torch 2.1's dynamo cannot pass a module into the Function.
    # Forward-mode AD: the plain ops carry the tangents (the Function has no
    # jvp).
    return (block.recompute_act and torch.is_grad_enabled()
            and not block.with_cp and not is_tracing()
            and not forward_ad_active())


class ActBasicBlock(BasicBlock):
    """BasicBlock: conv1-bn1-act1, conv2-bn2, attn, add, act2.

    Args:
        in_channels (int): Input channels.
        out_channels (int): Output channels.
        act_cfg (dict): Activation config; each position builds its own.
        attention_cfg (dict, optional): Attention after bn2.
        recompute_act (bool): Rebuild activation inputs in backward instead
            of saving them (see :mod:`.recompute`). Defaults to False.
        **kwargs: Passed to mmpretrain's ``BasicBlock``.
    """

    def __init__(self,
                 in_channels: int,
                 out_channels: int,
                 act_cfg: dict = dict(type='ReLU', inplace=True),
                 attention_cfg: Optional[dict] = None,
                 recompute_act: bool = False,
                 **kwargs) -> None:
        super().__init__(in_channels, out_channels, **kwargs)
        # Upstream calls one `relu` at every position; replace it by one
        # module per position so learnable activations are not tied.
        del self.relu
        self.act1 = build_activation_layer(act_cfg)
        self.act2 = build_activation_layer(act_cfg)
        self.attn = build_attention(attention_cfg, out_channels)
        self.recompute_act = recompute_act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Forward one block."""
        if _use_recompute(self):
            out = norm_act(self.norm1, self.act1, self.conv1(x))
            return _tail(self, self.act2, self.norm2, self.conv2(out), x)

        def _inner_forward(x):
            identity = x
            out = self.act1(self.norm1(self.conv1(x)))
            out = self.norm2(self.conv2(out))
            if self.attn is not None:
                out = self.attn(out)
            if self.downsample is not None:
                identity = self.downsample(x)
            out = self.drop_path(out)
            # In-place like upstream: neither BN nor x * gate needs its own
            # output for backward (autograd's version check guards the rest).
            out += identity
            return out

        return self.act2(_run(self, _inner_forward, x))


class ActBottleneck(Bottleneck):
    """Bottleneck: conv1-bn1-act1, conv2-bn2-act2, conv3-bn3, attn, add, act3.

    Args:
        in_channels (int): Input channels.
        out_channels (int): Output channels.
        act_cfg (dict): Activation config; each position builds its own.
        attention_cfg (dict, optional): Attention after bn3.
        recompute_act (bool): See :class:`ActBasicBlock`.
        **kwargs: Passed to the upstream Bottleneck.
    """

    def __init__(self,
                 in_channels: int,
                 out_channels: int,
                 act_cfg: dict = dict(type='ReLU', inplace=True),
                 attention_cfg: Optional[dict] = None,
                 recompute_act: bool = False,
                 **kwargs) -> None:
        super().__init__(in_channels, out_channels, **kwargs)
        del self.relu  # see ActBasicBlock
        self.act1 = build_activation_layer(act_cfg)
        self.act2 = build_activation_layer(act_cfg)
        self.act3 = build_activation_layer(act_cfg)
        self.attn = build_attention(attention_cfg, out_channels)
        self.recompute_act = recompute_act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Forward one block."""
        if _use_recompute(self):
            out = norm_act(self.norm1, self.act1, self.conv1(x))
            out = norm_act(self.norm2, self.act2, self.conv2(out))
            return _tail(self, self.act3, self.norm3, self.conv3(out), x)

        def _inner_forward(x):
            identity = x
            out = self.act1(self.norm1(self.conv1(x)))
            out = self.act2(self.norm2(self.conv2(out)))
            out = self.norm3(self.conv3(out))
            if self.attn is not None:
                out = self.attn(out)
            if self.downsample is not None:
                identity = self.downsample(x)
            out = self.drop_path(out)
            out += identity  # in-place as upstream, see ActBasicBlock
            return out

        return self.act3(_run(self, _inner_forward, x))


def _tail(block: nn.Module, act: nn.Module, norm: nn.Module,
          conv_out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """norm - attention - add - act of the recompute path."""
    if can_fuse_residual(block):
        return residual_act(block, act, norm, conv_out, x)
    # Another attention type or drop path: plain composition.
    out = norm(conv_out)
    if block.attn is not None:
        out = block.attn(out)
    identity = x if block.downsample is None else block.downsample(x)
    return act(block.drop_path(out) + identity)


class ActResNeXtBottleneck(ActBottleneck, XBottleneck):
    """ResNeXt bottleneck (grouped conv2) with ActBottleneck's layout.

    ``ActBottleneck.__init__`` reaches mmpretrain's ResNeXt ``Bottleneck``
    through the MRO, which consumes ``groups``, ``width_per_group`` and
    ``base_channels``.
    """


class _ActResNetMixin:
    """What ActResNet and ActResNeXt add to their upstream class."""

    def __init__(self,
                 depth: int,
                 act_cfg: dict = dict(type='ReLU', inplace=True),
                 attention_cfg: Optional[dict] = None,
                 recompute_act: Optional[bool] = None,
                 **kwargs) -> None:
        name = type(self).__name__
        if depth not in self.arch_settings:
            raise ValueError(f'{name}: unsupported depth {depth!r}; choose '
                             f'one of {sorted(self.arch_settings)}')
        num_stages = kwargs.get('num_stages', 4)
        frozen = kwargs.get('frozen_stages', -1)
        if not isinstance(frozen, int) or not -1 <= frozen <= num_stages:
            raise ValueError(f'{name}: frozen_stages={frozen!r} is out of '
                             f'range [-1, {num_stages}] (num_stages='
                             f'{num_stages})')
        out_indices = kwargs.get('out_indices', (3, ))
        if isinstance(out_indices, int):
            out_indices = (out_indices, )
        bad = [i for i in out_indices if not 0 <= i < num_stages]
        if bad:
            raise ValueError(f'{name}: out_indices {tuple(out_indices)} has '
                             f'{bad} outside [0, {num_stages - 1}]')
        kwargs['out_indices'] = tuple(out_indices)
        _resolve(act_cfg, 'act_cfg')
        _resolve(attention_cfg, 'attention_cfg')
        if act_cfg is None:
            raise TypeError(f'{name}: act_cfg must be a dict, got None')
        # Needed by the overridden builders, which upstream's __init__ calls.
        self.act_cfg = act_cfg
        self.attention_cfg = attention_cfg
        # decided by what the activation is, not by its `inplace` argument
        self.recompute_act = (
            default_recompute(build_activation_layer(act_cfg))
            if recompute_act is None else recompute_act)
        super().__init__(depth, **kwargs)

    def make_res_layer(self, **kwargs) -> nn.Module:
        """Pass the activation and attention configs to every block."""
        return super().make_res_layer(
            act_cfg=self.act_cfg,
            attention_cfg=self.attention_cfg,
            recompute_act=self.recompute_act,
            **kwargs)

    def _make_stem_layer(self, in_channels: int, stem_channels: int) -> None:
        super()._make_stem_layer(in_channels, stem_channels)
        # Upstream hard-codes ReLU in the stem; rebuild it from act_cfg.
        if self.deep_stem:
            for conv_module in self.stem:
                conv_module.activate = build_activation_layer(self.act_cfg)
        else:
            self.relu = build_activation_layer(self.act_cfg)

    def _freeze_stages(self) -> None:
        super()._freeze_stages()
        # Upstream freezes conv1/bn1 only, which would leave a learnable
        # stem activation training inside a frozen stem.
        if self.frozen_stages >= 0 and not self.deep_stem:
            self.relu.eval()
            for param in self.relu.parameters():
                param.requires_grad = False

    def train(self, mode: bool = True) -> nn.Module:
        """Upstream ``train`` returns None, which breaks ``model.eval()``
        chaining; return the module as ``nn.Module.train`` does."""
        super().train(mode)
        return self

    def init_weights(self) -> None:
        """Check a ``Pretrained`` checkpoint's layout, then load as upstream.

        mmengine's ``Pretrained`` init loads with ``strict=False``; a
        reference-code checkpoint (weights under ``'model'``, keys like
        ``unirect1``) would therefore load nothing and only log warnings.
        The check raises instead and names the converter to use. It reads the
        checkpoint once more than mmengine does.
        """
        cfg = self.init_cfg
        if isinstance(cfg, dict) and cfg.get('type') == 'Pretrained':
            checkpoint = CheckpointLoader.load_checkpoint(
                cfg['checkpoint'], map_location='cpu')
            check_pretrained_layout(
                checkpoint,
                self.state_dict().keys(),
                prefix=cfg.get('prefix'),
                source=str(cfg['checkpoint']))
        super().init_weights()


@MMDET_MODELS.register_module()
@MMPRETRAIN_MODELS.register_module()
class ActResNet(_ActResNetMixin, ResNet):
    """ResNet with any registered activation and channel attention.

    One class covers ResNet (default), SE-ResNet
    (``attention_cfg=dict(type='SEAttention')``), APA*-ResNet
    (``attention_cfg=dict(type='APASELayer')``) and APA*+AGLU-ResNet (add
    ``act_cfg=dict(type='AGLU')``). Every activation position, the stem's
    included, owns its own module; ``frozen_stages`` freezes activation and
    attention parameters with their stage.

    Args:
        depth (int): 18, 34, 50, 101 or 152.
        act_cfg (dict): Activation for the stem and every block position.
            Defaults to ``dict(type='ReLU', inplace=True)``.
        attention_cfg (dict, optional): Layer applied to the residual branch
            before the add (after bn3 / bn2); built with ``in_channels``.
            Defaults to None (no attention).
        recompute_act (bool, optional): Keep activation memory at the level
            of an in-place ReLU network: each block activation saves the
            tensors its input is computed from (kept anyway by BN / the
            attention product / the next conv) and rebuilds the input in
            backward, at the cost of one more elementwise pass. Defaults to
            None: on for learnable activations (which never run in place,
            whatever their ``inplace`` argument) and for other modules that
            do not run in place (see :func:`~.recompute.default_recompute`).
        **kwargs: mmpretrain ``ResNet`` arguments (``out_indices``,
            ``frozen_stages``, ``norm_cfg``, ``norm_eval``, ``with_cp``,
            ``deep_stem``, ``init_cfg``, ...).

    Example:
        >>> import mmact, torch
        >>> m = ActResNet(50, attention_cfg=dict(type='SEAttention'),
        ...               out_indices=(0, 1, 2, 3))
        >>> [o.shape[1] for o in m(torch.rand(1, 3, 64, 64))]
        [256, 512, 1024, 2048]
    """

    arch_settings = {
        18: (ActBasicBlock, (2, 2, 2, 2)),
        34: (ActBasicBlock, (3, 4, 6, 3)),
        50: (ActBottleneck, (3, 4, 6, 3)),
        101: (ActBottleneck, (3, 4, 23, 3)),
        152: (ActBottleneck, (3, 8, 36, 3)),
    }


@MMDET_MODELS.register_module()
@MMPRETRAIN_MODELS.register_module()
class ActResNeXt(_ActResNetMixin, ResNeXt):
    """ResNeXt with any registered activation and channel attention.

    Args:
        depth (int): 50, 101 or 152.
        act_cfg (dict): As in :class:`ActResNet`.
        attention_cfg (dict, optional): As in :class:`ActResNet`.
        recompute_act (bool): As in :class:`ActResNet`.
        **kwargs: mmpretrain ``ResNeXt`` arguments (``groups``,
            ``width_per_group``, ...).
    """

    arch_settings = {
        50: (ActResNeXtBottleneck, (3, 4, 6, 3)),
        101: (ActResNeXtBottleneck, (3, 4, 23, 3)),
        152: (ActResNeXtBottleneck, (3, 8, 36, 3)),
    }
