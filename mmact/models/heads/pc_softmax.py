"""Post-compensated softmax (PC-Softmax) for long-tailed classification.

Hong et al., "Disentangling Label Distribution for Long-tailed Visual
Recognition" (CVPR 2021): a classifier trained with plain softmax on a
long-tailed set learns the training label prior; at test time, against a
balanced test set, the prior is removed from the logits,

    score_c = softmax_c(z - log p_train),

where ``p_train(c)`` is the share of class ``c`` in the training set. Paper
000 uses it for every ImageNet-LT number (Table XIX: +5.4pp). Training is
unchanged: only the head's predictions are compensated.
"""
from typing import Dict

import torch
import torch.nn as nn

from mmact.evaluation.metrics.shot_accuracy import class_counts_from_ann_file

__all__ = ['build_pc_softmax_head', 'PostCompensatedSoftmaxMixin']


class PostCompensatedSoftmaxMixin:
    """Subtract ``log_prior`` from the scores an mmpretrain ``ClsHead``
    turns into predictions (``_get_predictions``); losses are untouched."""

    def _get_predictions(self, cls_score, data_samples):
        return super()._get_predictions(
            cls_score - self.log_prior.to(cls_score), data_samples)


_COMPENSATED: Dict[type, type] = {}


def _compensated_class(cls: type) -> type:
    """``cls`` with the mixin in front, one class per head type."""
    if cls not in _COMPENSATED:
        _COMPENSATED[cls] = type(f'PCSoftmax{cls.__name__}',
                                 (PostCompensatedSoftmaxMixin, cls), {})
    return _COMPENSATED[cls]


def build_pc_softmax_head(head: dict, train_ann_file: str) -> nn.Module:
    """Config builder ``type='PCSoftmaxHead'``: ``head`` with PC-Softmax.

    Returns the built head itself, re-classed to a subclass of its type that
    compensates its predictions, so state-dict keys stay those of ``head``
    (a checkpoint trained without PC-Softmax loads as is) and
    ``isinstance`` checks still hold. The log prior is a non-persistent
    buffer computed from ``train_ann_file``.

    Example::

        model = dict(head=dict(
            type='PCSoftmaxHead',
            train_ann_file='data/imagenet/meta/ImageNet_LT_train.txt',
            head=dict(type='LinearClsHead', num_classes=1000,
                      in_channels=2048)))

    Args:
        head (dict): Config of an mmpretrain ``ClsHead`` (or subclass).
        train_ann_file (str): Training annotation file (text ``<path>
            <label>`` lines or OpenMMLab 2.0 JSON) the prior is counted from.
    """
    from mmpretrain.models.heads import ClsHead
    from mmpretrain.registry import MODELS
    built = MODELS.build(head)
    if not isinstance(built, ClsHead):
        raise TypeError('PCSoftmaxHead: head must be an mmpretrain ClsHead '
                        f'(it post-processes _get_predictions), got '
                        f'{type(built).__name__}')
    num_classes = getattr(built, 'num_classes', None)
    counts = class_counts_from_ann_file(train_ann_file, num_classes)
    if num_classes is not None and len(counts) != num_classes:
        raise ValueError(f'PCSoftmaxHead: {train_ann_file!r} has labels up '
                         f'to {len(counts) - 1}, the head {num_classes} '
                         'classes')
    if (counts == 0).any():
        missing = torch.nonzero(torch.as_tensor(counts == 0)).flatten()
        raise ValueError(
            f'PCSoftmaxHead: classes {missing[:10].tolist()} have no sample '
            f'in {train_ann_file!r}; their prior (and log prior) would be 0')
    prior = torch.as_tensor(counts, dtype=torch.float64)
    built.__class__ = _compensated_class(type(built))
    built.register_buffer(
        'log_prior', (prior / prior.sum()).log().float(), persistent=False)
    return built
