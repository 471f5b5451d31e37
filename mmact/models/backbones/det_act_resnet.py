"""ResNet / ResNetV1d / ResNeXt with configurable activations and channel
attention: mmdet's face.

Registered in mmdet's ``MODELS`` as ``ActResNet``, ``ActResNetV1d`` and
``ActResNeXt``: an mmdet config's backbone becomes learnable by changing its
``type`` (``ResNet`` -> ``ActResNet``) and adding ``act_cfg`` /
``attention_cfg``. mmdet 3.3's classes with
:class:`~.act_res_block.ActBlockMixin` blocks and
:class:`~.act_res_backbone.ActResNetMixin`, so every mmdet argument
(``dcn`` / ``stage_with_dcn``, ``plugins``, the deprecated ``pretrained``,
ResNeXt's ``groups`` / ``base_width``), every mmdet default
(``out_indices=(0, 1, 2, 3)``, ``norm_eval=True``, ``stem_channels=None``,
``groups=1``), mmdet's module layout and state-dict keys (the V1d stem is one
flat ``Sequential`` of nine modules; ``avg_down`` pools in every shortcut,
stride 1 included), DCN and plugins are mmdet's. Plugins run after the
activation of their position (mmdet's order); the attention follows the
plugins after the last convolution.

mmpretrain's registry holds :mod:`.act_resnet`'s classes under the same
names. With the plain stem both faces have the same state-dict keys.
"""
from mmdet.registry import MODELS

from mmact.models.mmdet_support import importing_mmdet_models
from .act_res_backbone import ActResNetMixin, with_blocks
from .act_res_block import ActBlockMixin

# mmdet's models import mmcv's compiled ops: where those do not load, the
# error names this module's components (mmact.models.mmdet_support).
with importing_mmdet_models(__name__):
    from mmdet.models.backbones.resnet import (BasicBlock, Bottleneck, ResNet,
                                               ResNetV1d)
    from mmdet.models.backbones.resnext import Bottleneck as XBottleneck
    from mmdet.models.backbones.resnext import ResNeXt

__all__ = [
    'DetActBasicBlock', 'DetActBottleneck', 'DetActResNeXtBottleneck',
    'DetActResNet', 'DetActResNetV1d', 'DetActResNeXt'
]


class DetActBasicBlock(ActBlockMixin, BasicBlock):
    """mmdet's BasicBlock with :class:`~.act_res_block.ActBlockMixin`'s
    activations and attention."""

    zero_init_norm = 'norm2'


class DetActBottleneck(ActBlockMixin, Bottleneck):
    """mmdet's Bottleneck (DCN, plugins) with
    :class:`~.act_res_block.ActBlockMixin`'s activations and attention."""

    zero_init_norm = 'norm3'


class DetActResNeXtBottleneck(ActBlockMixin, XBottleneck):
    """mmdet's ResNeXt bottleneck (``groups``, ``base_width``) with
    :class:`~.act_res_block.ActBlockMixin`'s activations and attention."""

    # mmdet's ResNet zero-initialises a block only when its class *is*
    # mmdet's BasicBlock / Bottleneck, which its ResNeXt block is not.
    zero_init_norm = None


class _DetInit(ActResNetMixin):
    """mmdet's ``zero_init_residual``: with neither ``init_cfg`` nor
    ``pretrained`` given, the blocks get an ``init_cfg`` that zeroes their
    last norm. mmdet tests ``block is Bottleneck``, false for any subclass,
    so the face restates it."""

    def __init__(self, *args, **kwargs) -> None:
        self._default_init = (kwargs.get('init_cfg') is None
                              and kwargs.get('pretrained') is None)
        super().__init__(*args, **kwargs)

    def make_res_layer(self, **kwargs):
        """Add the zero init of mmdet's blocks, then build the stage."""
        norm = self.block.zero_init_norm
        if self._default_init and self.zero_init_residual and norm:
            kwargs['init_cfg'] = dict(
                type='Constant', val=0, override=dict(name=norm))
        return super().make_res_layer(**kwargs)


@MODELS.register_module(name='ActResNet')
class DetActResNet(_DetInit, ResNet):
    """mmdet's ResNet with any registered activation and channel attention;
    ``ActResNet`` in mmdet's registry.

    Args:
        depth (int): 18, 34, 50, 101 or 152.
        act_cfg (dict): As in :class:`~.act_resnet.ActResNet`.
        attention_cfg (dict, optional): As in :class:`~.act_resnet.ActResNet`.
        recompute_act (bool, optional): As in
            :class:`~.act_resnet.ActResNet`.
        **kwargs: mmdet ``ResNet`` arguments, with its defaults.

    Example:
        >>> import mmact, torch
        >>> from mmdet.registry import MODELS
        >>> m = MODELS.build(dict(type='ActResNet', depth=50,
        ...                       act_cfg=dict(type='AGLU')))
        >>> [o.shape[1] for o in m(torch.rand(1, 3, 64, 64))]
        [256, 512, 1024, 2048]
    """

    arch_settings = with_blocks(ResNet.arch_settings, {
        BasicBlock: DetActBasicBlock,
        Bottleneck: DetActBottleneck
    })


@MODELS.register_module(name='ActResNetV1d')
class DetActResNetV1d(DetActResNet, ResNetV1d):
    """:class:`DetActResNet` with mmdet's ``ResNetV1d`` stem and shortcut
    (``deep_stem=True``, ``avg_down=True``, set by the class)."""

    fixed_arguments = ('deep_stem', 'avg_down')


@MODELS.register_module(name='ActResNeXt')
class DetActResNeXt(_DetInit, ResNeXt):
    """mmdet's ResNeXt with any registered activation and channel attention;
    ``ActResNeXt`` in mmdet's registry.

    Args:
        depth (int): 50, 101 or 152.
        act_cfg (dict): As in :class:`~.act_resnet.ActResNet`.
        attention_cfg (dict, optional): As in :class:`~.act_resnet.ActResNet`.
        recompute_act (bool, optional): As in
            :class:`~.act_resnet.ActResNet`.
        **kwargs: mmdet ``ResNeXt`` arguments (``groups=1``,
            ``base_width=4``, and mmdet ``ResNet``'s), with its defaults.
    """

    arch_settings = with_blocks(ResNeXt.arch_settings,
                                {XBottleneck: DetActResNeXtBottleneck})
