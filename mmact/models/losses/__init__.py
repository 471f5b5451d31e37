"""Losses for long-tailed detection, registered in ``mmdet.registry.MODELS``.
"""
from .gol import GOLLoss, gumbel_activation, gumbel_binary_cross_entropy

__all__ = ['GOLLoss', 'gumbel_activation', 'gumbel_binary_cross_entropy']
