"""ResNet / ResNetV1d / ResNeXt with configurable activations and channel
attention: mmpretrain's face.

mmpretrain's classes with :class:`~.act_res_block.ActBlockMixin` blocks and
:class:`~.act_res_backbone.ActResNetMixin`: mmpretrain's arguments, defaults
and state-dict keys, plus ``act_cfg`` / ``attention_cfg`` /
``recompute_act``. Registered in mmpretrain's ``MODELS``; mmdet's registry
holds :mod:`.det_act_resnet`'s classes under the same names (mmdet's
arguments and defaults). With the plain stem both faces have the same keys,
so an mmpretrain ``ImageClassifier`` checkpoint initialises a detector
backbone through ``init_cfg=dict(type='Pretrained', prefix='backbone.')``.

Key layout (upstream's names, except the activations and the attention):

- stem: ``conv1``, ``bn1``, ``relu`` (the name is upstream's; it holds
  whatever ``act_cfg`` builds) -- or ``stem.{0,1,2}`` (``ConvModule``\\ s)
  with ``deep_stem``.
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
from mmpretrain.models.backbones.resnet import (BasicBlock, Bottleneck,
                                                ResNet, ResNetV1d)
from mmpretrain.models.backbones.resnext import Bottleneck as XBottleneck
from mmpretrain.models.backbones.resnext import ResNeXt
from mmpretrain.registry import MODELS

from .act_res_backbone import ActResNetMixin, with_blocks
from .act_res_block import ActBlockMixin

__all__ = [
    'ActBasicBlock', 'ActBottleneck', 'ActResNeXtBottleneck', 'ActResNet',
    'ActResNetV1d', 'ActResNeXt'
]


class ActBasicBlock(ActBlockMixin, BasicBlock):
    """mmpretrain's BasicBlock: conv1-bn1-act1, conv2-bn2, attn, add, act2.

    Args and keyword arguments: :class:`~.act_res_block.ActBlockMixin`'s,
    then mmpretrain's ``BasicBlock``'s.
    """


class ActBottleneck(ActBlockMixin, Bottleneck):
    """mmpretrain's Bottleneck: conv1-bn1-act1, conv2-bn2-act2, conv3-bn3,
    attn, add, act3.

    Args and keyword arguments: :class:`~.act_res_block.ActBlockMixin`'s,
    then mmpretrain's ``Bottleneck``'s.
    """


class ActResNeXtBottleneck(ActBlockMixin, XBottleneck):
    """mmpretrain's ResNeXt bottleneck (grouped conv2, ``groups``,
    ``width_per_group``) with :class:`ActBottleneck`'s layout."""


@MODELS.register_module()
class ActResNet(ActResNetMixin, ResNet):
    """ResNet with any registered activation and channel attention
    (mmpretrain's arguments and defaults).

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
        **kwargs: mmpretrain ``ResNet`` arguments, with its defaults
            (``out_indices=(3, )``, ``norm_eval=False``, ``stem_channels=64``,
            ``frozen_stages``, ``norm_cfg``, ``with_cp``, ``deep_stem``,
            ``avg_down``, ``drop_path_rate``, ``init_cfg``, ...).

    Example:
        >>> import mmact, torch
        >>> m = ActResNet(50, attention_cfg=dict(type='SEAttention'),
        ...               out_indices=(0, 1, 2, 3))
        >>> [o.shape[1] for o in m(torch.rand(1, 3, 64, 64))]
        [256, 512, 1024, 2048]
    """

    arch_settings = with_blocks(ResNet.arch_settings, {
        BasicBlock: ActBasicBlock,
        Bottleneck: ActBottleneck
    })


@MODELS.register_module()
class ActResNetV1d(ActResNet, ResNetV1d):
    """:class:`ActResNet` with mmpretrain's ``ResNetV1d`` stem and shortcut
    (``deep_stem=True``, ``avg_down=True``, set by the class)."""

    fixed_arguments = ('deep_stem', 'avg_down')


@MODELS.register_module()
class ActResNeXt(ActResNetMixin, ResNeXt):
    """ResNeXt with any registered activation and channel attention
    (mmpretrain's arguments and defaults).

    Args:
        depth (int): 50, 101 or 152.
        act_cfg (dict): As in :class:`ActResNet`.
        attention_cfg (dict, optional): As in :class:`ActResNet`.
        recompute_act (bool, optional): As in :class:`ActResNet`.
        **kwargs: mmpretrain ``ResNeXt`` arguments (``groups=32``,
            ``width_per_group=4``, and :class:`ActResNet`'s).
    """

    arch_settings = with_blocks(ResNeXt.arch_settings,
                                {XBottleneck: ActResNeXtBottleneck})
