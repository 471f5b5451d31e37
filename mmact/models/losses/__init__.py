"""Losses for long-tailed detection (DESIGN §4).

``GOLLoss`` is registered in ``mmdet.registry.MODELS`` when mmdet is
installed; without mmdet a root-registry placeholder makes a config asking for
it fail with an ImportError naming mmdet. ``gol`` and ``class_frequency``
need only torch / mmengine, so importing them never imports mmdet.
"""
from mmact.registry import optional_models, register_unavailable

from .class_frequency import (image_counts_from_annotations,
                              image_counts_from_dataset, unwrap_datasets)
from .gol import GOLLoss, gumbel_activation, gumbel_binary_cross_entropy

__all__ = [
    'GOLLoss', 'gumbel_activation', 'gumbel_binary_cross_entropy',
    'image_counts_from_annotations', 'image_counts_from_dataset',
    'unwrap_datasets'
]

_MMDET = optional_models('mmdet')
if _MMDET is not None:
    _MMDET.register_module(module=GOLLoss)
else:
    register_unavailable('GOLLoss', 'mmdet>=3.0')
