"""Classification heads (mmpretrain ``MODELS``): PC-Softmax for long-tailed
test sets, the cosine-normalised classifier of the APA authors' ImageNet-LT
models."""
from .cos_norm import CosNormClsHead, CosNormLinear
from .pc_softmax import (PCSoftmaxArcFaceClsHead, PCSoftmaxCosNormClsHead,
                         PCSoftmaxLinearClsHead, PostCompensatedSoftmaxMixin)

__all__ = [
    'PostCompensatedSoftmaxMixin', 'PCSoftmaxLinearClsHead',
    'PCSoftmaxArcFaceClsHead', 'PCSoftmaxCosNormClsHead', 'CosNormClsHead',
    'CosNormLinear'
]
