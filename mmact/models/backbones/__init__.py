"""Backbones for mmdet and mmpretrain.

``ActResNet`` / ``ActResNeXt`` subclass mmpretrain's ResNet and are registered
in mmpretrain's and mmdet's ``MODELS`` (one class, so both share state-dict
keys); ``ActSwapBackbone`` swaps the activations of any backbone of either;
``FleSSwinTransformer`` hands the token grid to FleS inside Swin blocks.
"""
from .act_resnet import (ActBasicBlock, ActBottleneck, ActResNet, ActResNeXt,
                         ActResNeXtBottleneck, build_attention)
from .act_swap import ActSwapBackbone
from .fles_swin import FleSSwinTransformer

__all__ = [
    'ActBasicBlock', 'ActBottleneck', 'ActResNeXtBottleneck', 'ActResNet',
    'ActResNeXt', 'ActSwapBackbone', 'FleSSwinTransformer', 'build_attention'
]
