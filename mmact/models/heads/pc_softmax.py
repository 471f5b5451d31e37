"""Post-compensated softmax (PC-Softmax) for long-tailed classification.

Hong et al., "Disentangling Label Distribution for Long-tailed Visual
Recognition" (CVPR 2021): a classifier trained with plain softmax on a
long-tailed set learns the training label prior; at test time, against a
balanced test set, the prior is removed from the logits,

    score_c = softmax_c(z - log p_train),

where ``p_train(c)`` is the share of class ``c`` in the training set.
Alexandridis et al. (Adaptive Parametric Activation, 2024) use it for every
ImageNet-LT number (their Table XIX: +5.4pp). Training is unchanged: only the
head's predictions are compensated.
"""
import torch
from mmpretrain.models.heads import ArcFaceClsHead, LinearClsHead
from mmpretrain.registry import MODELS

from mmact.datasets.class_counts import class_counts_from_ann_file
from .cos_norm import CosNormClsHead

__all__ = [
    'PostCompensatedSoftmaxMixin', 'PCSoftmaxLinearClsHead',
    'PCSoftmaxArcFaceClsHead', 'PCSoftmaxCosNormClsHead'
]


class PostCompensatedSoftmaxMixin:
    """PC-Softmax for an mmpretrain ``ClsHead`` subclass.

    Subtracts ``log_prior`` from the scores the head turns into predictions
    (``_get_predictions``); losses are untouched. ``log_prior`` is a
    non-persistent buffer, so state-dict keys are those of the plain head
    and a checkpoint trained without PC-Softmax loads as is.

    Args:
        *args: Arguments of the head.
        train_ann_file (str): Training annotation file (text ``<path>
            <label>`` lines or OpenMMLab 2.0 JSON) the prior is counted from.
        **kwargs: Keyword arguments of the head.
    """

    def __init__(self, *args, train_ann_file: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        name = type(self).__name__
        counts = class_counts_from_ann_file(train_ann_file, self.num_classes)
        if len(counts) != self.num_classes:
            raise ValueError(f'{name}: {train_ann_file!r} has labels up to '
                             f'{len(counts) - 1}, the head {self.num_classes} '
                             'classes')
        missing = (counts == 0).nonzero()[0]
        if len(missing):
            raise ValueError(
                f'{name}: classes {missing[:10].tolist()} have no sample in '
                f'{train_ann_file!r}; their prior (and log prior) would be 0')
        prior = torch.as_tensor(counts, dtype=torch.float64)
        self.register_buffer(
            'log_prior', (prior / prior.sum()).log().float(), persistent=False)

    def _get_predictions(self, cls_score, data_samples):
        return super()._get_predictions(
            cls_score - self.log_prior.to(cls_score), data_samples)


@MODELS.register_module()
class PCSoftmaxLinearClsHead(PostCompensatedSoftmaxMixin, LinearClsHead):
    """``LinearClsHead`` with PC-Softmax predictions.

    Example::

        head=dict(type='PCSoftmaxLinearClsHead', num_classes=1000,
                  in_channels=2048,
                  train_ann_file='data/imagenet/meta/ImageNet_LT_train.txt')
    """


@MODELS.register_module()
class PCSoftmaxArcFaceClsHead(PostCompensatedSoftmaxMixin, ArcFaceClsHead):
    """``ArcFaceClsHead`` (with ``margins=0.0`` a cosine classifier) with
    PC-Softmax predictions."""


@MODELS.register_module()
class PCSoftmaxCosNormClsHead(PostCompensatedSoftmaxMixin, CosNormClsHead):
    """:class:`~mmact.models.heads.CosNormClsHead` with PC-Softmax
    predictions: the APA authors' ImageNet-LT classifier (cosine
    normalisation, scale 16, PC-Softmax at test)."""
