"""Backbones for mmdet and mmpretrain.

``ActResNet`` / ``ActResNetV1d`` / ``ActResNeXt`` are registered in both
registries, each with that registry's contract: mmpretrain's classes in
:mod:`.act_resnet`, mmdet's (``DetActResNet`` ...) in :mod:`.det_act_resnet`,
one block and one backbone implementation underneath (:mod:`.act_res_block`,
:mod:`.act_res_backbone`); with the plain stem both share state-dict keys.
``ActSwapBackbone`` swaps the activations of any backbone of either;
``FleSSwinTransformer`` hands the token grid to FleS inside Swin blocks.
"""
from .act_res_backbone import (FrozenStagesError, StageArgumentError,
                               UnsupportedDepthError)
from .act_res_block import build_attention
from .act_resnet import (ActBasicBlock, ActBottleneck, ActResNet,
                         ActResNetV1d, ActResNeXt, ActResNeXtBottleneck)
from .act_swap import ActSwapBackbone
from .det_act_resnet import (DetActBasicBlock, DetActBottleneck,
                             DetActResNet, DetActResNetV1d, DetActResNeXt,
                             DetActResNeXtBottleneck)
from .fles_swin import FleSSwinTransformer

__all__ = [
    'ActBasicBlock', 'ActBottleneck', 'ActResNeXtBottleneck', 'ActResNet',
    'ActResNetV1d', 'ActResNeXt', 'DetActBasicBlock', 'DetActBottleneck',
    'DetActResNeXtBottleneck', 'DetActResNet', 'DetActResNetV1d',
    'DetActResNeXt', 'ActSwapBackbone', 'FleSSwinTransformer',
    'build_attention', 'UnsupportedDepthError', 'StageArgumentError',
    'FrozenStagesError'
]
