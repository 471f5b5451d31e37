"""Top-1 accuracy split by training-class frequency (long-tailed protocol).

ImageNet-LT results (Alexandridis et al., Adaptive Parametric Activation,
2024, Table II) are reported for *Many* (more than 100 training images),
*Medium* (20 to 100) and *Few* (fewer than 20) shot classes, following Liu et
al., "Large-Scale Long-Tailed Recognition in an Open World".
:class:`ShotAccuracy` computes them from the training split's annotation
file, so no class list is hard-coded.
"""
from typing import Optional, Sequence

import numpy as np
from mmengine.evaluator import BaseMetric
from mmengine.registry import METRICS

from mmact.datasets.class_counts import (SHOT_GROUPS,
                                         class_counts_from_ann_file,
                                         shot_groups)

__all__ = ['ShotAccuracy']


@METRICS.register_module()
class ShotAccuracy(BaseMetric):
    """Top-1 accuracy overall and on many / medium / few-shot classes.

    Registered in mmengine's root ``METRICS`` (it reads plain prediction
    dicts), so mmpretrain configs use it directly::

        val_evaluator = [
            dict(type='Accuracy', topk=(1, 5)),
            dict(type='ShotAccuracy',
                 train_ann_file='data/imagenet/meta/ImageNet_LT_train.txt'),
        ]

    Reports ``shot/top1``, ``shot/many``, ``shot/medium`` and ``shot/few`` in
    percent (a group without evaluated samples is left out), each the share
    of correct top-1 predictions among the samples of that group.

    Args:
        train_ann_file (str, optional): Training annotation file the counts
            are read from (see
            :func:`mmact.datasets.class_counts_from_ann_file`).
        class_counts (Sequence[int], optional): Training count of every
            class, instead of ``train_ann_file``.
        many_threshold (int): Classes with more training samples are
            ``many``. Defaults to 100.
        few_threshold (int): Classes with fewer are ``few``. Defaults to 20.
        collect_device (str): Device for collecting results across ranks.
        prefix (str, optional): Key prefix. Defaults to ``'shot'``.
    """

    default_prefix = 'shot'

    def __init__(self,
                 train_ann_file: Optional[str] = None,
                 class_counts: Optional[Sequence[int]] = None,
                 many_threshold: int = 100,
                 few_threshold: int = 20,
                 collect_device: str = 'cpu',
                 prefix: Optional[str] = None) -> None:
        super().__init__(collect_device=collect_device, prefix=prefix)
        if (train_ann_file is None) == (class_counts is None):
            raise ValueError('ShotAccuracy needs exactly one of '
                             'train_ann_file and class_counts')
        shot_groups([], many_threshold, few_threshold)  # checks thresholds
        self.many_threshold = many_threshold
        self.few_threshold = few_threshold
        self.counts = (
            class_counts_from_ann_file(train_ann_file)
            if class_counts is None else np.asarray(class_counts))

    def process(self, data_batch, data_samples: Sequence[dict]) -> None:
        for sample in data_samples:
            self.results.append((int(sample['pred_label'].reshape(-1)[0]),
                                 int(sample['gt_label'].reshape(-1)[0])))

    def compute_metrics(self, results: list) -> dict:
        pred, gt = np.array(results, dtype=np.int64).reshape(-1, 2).T
        if gt.size and gt.max() >= len(self.counts):
            raise ValueError(
                f'ShotAccuracy: label {gt.max()} has no training count '
                f'({len(self.counts)} classes in the training annotations)')
        groups = np.array(
            shot_groups(self.counts, self.many_threshold,
                        self.few_threshold))[gt]
        correct = pred == gt
        metrics = {'top1': 100.0 * float(correct.mean())}
        for name in SHOT_GROUPS:
            mask = groups == name
            if mask.any():
                metrics[name] = 100.0 * float(correct[mask].mean())
        return metrics
