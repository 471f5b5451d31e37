"""Backbones for mmdet and mmpretrain.

``ActResNet`` / ``ActResNetV1d`` / ``ActResNeXt`` are registered in both
registries, each with that registry's contract: mmpretrain's classes in
:mod:`.act_resnet`, mmdet's (``DetActResNet`` ...) in :mod:`.det_act_resnet`,
one block and one backbone implementation underneath (:mod:`.act_res_block`,
:mod:`.act_res_backbone`); with the plain stem both share state-dict keys.
``ActSwapBackbone`` swaps the activations of any backbone of either;
``FleSSwinTransformer`` hands the token grid to FleS inside Swin blocks.

mmdet's classes load with :mod:`.det_act_resnet`, on their first use here
or when mmdet's registry first looks a name up
(:mod:`mmact.models.mmdet_components`): mmdet's models need mmcv's compiled
ops, which the mmpretrain classes do not.
"""
import importlib

from .act_res_backbone import (FrozenStagesError, StageArgumentError,
                               UnsupportedDepthError)
from .act_res_block import build_attention
from .act_resnet import (ActBasicBlock, ActBottleneck, ActResNet,
                         ActResNetV1d, ActResNeXt, ActResNeXtBottleneck)
from .act_swap import ActSwapBackbone
from .fles_swin import FleSSwinTransformer

_DET_CLASSES = ('DetActBasicBlock', 'DetActBottleneck',
                'DetActResNeXtBottleneck', 'DetActResNet', 'DetActResNetV1d',
                'DetActResNeXt')


def __getattr__(name: str):
    """mmdet's classes of :mod:`.det_act_resnet`, imported on first use
    (:class:`~mmact.models.mmdet_support.MmcvOpsMissingError` where mmcv's
    compiled ops do not load)."""
    if name in _DET_CLASSES:
        return getattr(
            importlib.import_module('.det_act_resnet', __name__), name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


__all__ = [
    'ActBasicBlock', 'ActBottleneck', 'ActResNeXtBottleneck', 'ActResNet',
    'ActResNetV1d', 'ActResNeXt', 'DetActBasicBlock', 'DetActBottleneck',
    'DetActResNeXtBottleneck', 'DetActResNet', 'DetActResNetV1d',
    'DetActResNeXt', 'ActSwapBackbone', 'FleSSwinTransformer',
    'build_attention', 'UnsupportedDepthError', 'StageArgumentError',
    'FrozenStagesError'
]
