"""Backbones for mmdet and mmpretrain (DESIGN §3).

``ActResNet`` / ``ActResNeXt`` subclass mmpretrain's ResNet and are registered
in mmpretrain's and, when installed, mmdet's ``MODELS`` (one class, so both
share state-dict keys). Without mmpretrain they are registered in the root
registry as placeholders that raise an ImportError naming the requirement.
"""
from mmact.registry import optional_models, register_unavailable
from mmact.utils.swap import register_swap_backbone

__all__ = []

_MMPRETRAIN = optional_models('mmpretrain')
_MMDET = optional_models('mmdet')

if _MMPRETRAIN is not None:
    from .act_resnet import (ActBasicBlock, ActBottleneck, ActResNet,
                             ActResNeXt, ActResNeXtBottleneck, build_attention,
                             register)
    register([_MMPRETRAIN, _MMDET])
    __all__ += [
        'ActBasicBlock', 'ActBottleneck', 'ActResNeXtBottleneck', 'ActResNet',
        'ActResNeXt', 'build_attention'
    ]
else:
    # ActResNet subclasses mmpretrain's ResNet, so mmdet alone is not enough.
    for _name in ('ActResNet', 'ActResNeXt'):
        register_unavailable(
            _name, 'mmpretrain>=1.0 (mmact builds ActResNet on its ResNet; '
            'needed for mmdet configs too)')

if _MMPRETRAIN is None and _MMDET is None:
    register_unavailable('ActSwapBackbone', 'mmdet>=3.0 or mmpretrain>=1.0')
else:
    register_swap_backbone([_MMPRETRAIN, _MMDET])
