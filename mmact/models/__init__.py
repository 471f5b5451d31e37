"""mmact's models.

``activations``, ``layers`` and ``utils`` need only torch / mmcv / mmengine
and are imported with ``mmact``. ``backbones``, ``heads`` and ``losses``
build on mmdet / mmpretrain models; they are imported when the mmdet or
mmpretrain registry first looks a name up (see :mod:`mmact.registry`), or
explicitly: ``from mmact.models.backbones import ActResNet``.
"""
from . import activations, layers, utils  # noqa: F401

__all__ = ['activations', 'layers', 'utils']
