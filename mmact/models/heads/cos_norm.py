"""Cosine classifier with a squashed feature norm (Liu et al., Large-Scale
Long-Tailed Recognition in an Open World, CVPR 2019, "cosine
normalisation").

    logits = s * <x / (1 + |x|), w_c / |w_c|>

The feature keeps its direction and is shrunk to length |x| / (1 + |x|) < 1,
so confident (long) features saturate instead of growing the logits
without bound. The APA authors' ImageNet-LT classifiers use it with s = 16
(GitHub kostas1515/AGLU, ``classification/resnet_cifar.py``,
``CosNorm_Classifier``; ``--classif_norm cosine``).
"""
import math
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmpretrain.models.heads import ClsHead
from mmpretrain.registry import MODELS

__all__ = ['CosNormLinear', 'CosNormClsHead']


class CosNormLinear(nn.Module):
    """``scale * <x / (1 + |x|), w / |w|>`` for every class (no bias).

    Args:
        in_features (int): Feature size.
        out_features (int): Classes.
        scale (float): Logit scale ``s``. Defaults to 16.
    """

    def __init__(self,
                 in_features: int,
                 out_features: int,
                 scale: float = 16.0) -> None:
        super().__init__()
        if not scale > 0:
            raise ValueError(f'CosNormLinear: scale must be > 0, got {scale}')
        self.in_features, self.out_features = in_features, out_features
        self.scale = float(scale)
        bound = 1 / math.sqrt(in_features)
        self.weight = nn.Parameter(
            torch.empty(out_features, in_features).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        squashed = x / (1 + x.norm(dim=1, keepdim=True))
        return self.scale * F.linear(squashed, F.normalize(self.weight, dim=1))

    def extra_repr(self) -> str:
        return (f'in_features={self.in_features}, out_features='
                f'{self.out_features}, scale={self.scale}')


@MODELS.register_module()
class CosNormClsHead(ClsHead):
    """Classification head with a :class:`CosNormLinear` classifier
    (``fc``).

    Args:
        num_classes (int): Classes.
        in_channels (int): Feature channels.
        scale (float): Logit scale. Defaults to 16 (the APA authors'
            ImageNet-LT models).
        init_cfg (dict, optional): Initialisation config; the classifier
            draws its own U(-1/sqrt(C), 1/sqrt(C)) weights.
        **kwargs: ``ClsHead`` arguments (``loss``, ``topk``, ...).
    """

    def __init__(self,
                 num_classes: int,
                 in_channels: int,
                 scale: float = 16.0,
                 init_cfg: Optional[dict] = None,
                 **kwargs) -> None:
        super().__init__(init_cfg=init_cfg, **kwargs)
        if num_classes <= 0:
            raise ValueError(f'CosNormClsHead: num_classes must be positive, '
                             f'got {num_classes}')
        self.num_classes = num_classes
        self.in_channels = in_channels
        self.fc = CosNormLinear(in_channels, num_classes, scale)

    def pre_logits(self, feats: Tuple[torch.Tensor]) -> torch.Tensor:
        """The last stage's pooled feature."""
        return feats[-1]

    def forward(self, feats: Tuple[torch.Tensor]) -> torch.Tensor:
        """Logits of the last stage's pooled feature."""
        return self.fc(self.pre_logits(feats))
