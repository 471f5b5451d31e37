"""Classification heads (mmpretrain ``MODELS``): PC-Softmax for long-tailed
test sets."""
from .pc_softmax import (PCSoftmaxArcFaceClsHead, PCSoftmaxLinearClsHead,
                         PostCompensatedSoftmaxMixin)

__all__ = [
    'PostCompensatedSoftmaxMixin', 'PCSoftmaxLinearClsHead',
    'PCSoftmaxArcFaceClsHead'
]
