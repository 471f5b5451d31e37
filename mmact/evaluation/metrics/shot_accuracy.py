"""Top-1 accuracy split by training-class frequency (long-tailed protocol).

ImageNet-LT results (paper 000, Table II) are reported for *Many* (more than
100 training images), *Medium* (20 to 100) and *Few* (fewer than 20) shot
classes, following Liu et al., "Large-Scale Long-Tailed Recognition in an
Open World". :class:`ShotAccuracy` computes them from the training split's
annotation file, so no class list is hard-coded.
"""
import os.path as osp
from typing import List, Optional, Sequence

import numpy as np
from mmengine.evaluator import BaseMetric
from mmengine.fileio import get_text, load
from mmengine.registry import METRICS

__all__ = ['SHOT_GROUPS', 'shot_groups', 'class_counts_from_ann_file',
           'ShotAccuracy']

#: Group names, most frequent first.
SHOT_GROUPS = ('many', 'medium', 'few')


def shot_groups(counts: Sequence[int],
                many_threshold: int = 100,
                few_threshold: int = 20) -> List[str]:
    """Group of every class from its training count.

    ``many``: more than ``many_threshold``; ``few``: fewer than
    ``few_threshold``; ``medium``: the rest.
    """
    if few_threshold > many_threshold:
        raise ValueError(f'few_threshold ({few_threshold}) must not exceed '
                         f'many_threshold ({many_threshold})')
    return [
        'many' if n > many_threshold else 'few' if n < few_threshold else
        'medium' for n in counts
    ]


def class_counts_from_ann_file(path: str,
                               num_classes: Optional[int] = None
                               ) -> np.ndarray:
    """Training samples per class from an mmpretrain annotation file.

    Reads the text format (``<path> <label>`` per line, as ImageNet-LT's
    split files) or the OpenMMLab 2.0 JSON / pickle format (``data_list``
    items with ``gt_label``).

    Args:
        path (str): The annotation file.
        num_classes (int, optional): Length of the result; defaults to the
            largest label + 1.

    Returns:
        np.ndarray: ``(num_classes,)`` int64 counts.
    """
    if not osp.isfile(path):
        raise FileNotFoundError(
            f'ShotAccuracy: training annotation file {path!r} not found '
            '(train_ann_file must be the file the training split reads)')
    if path.endswith(('.json', '.pkl', '.pickle')):
        labels = [int(np.atleast_1d(item['gt_label'])[0])
                  for item in load(path)['data_list']]
    else:
        labels = [
            int(line.rsplit(maxsplit=1)[-1])
            for line in get_text(path).splitlines() if line.strip()
        ]
    if not labels:
        raise ValueError(f'ShotAccuracy: {path!r} lists no sample')
    return np.bincount(labels, minlength=num_classes or 0)


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
            are read from (see :func:`class_counts_from_ann_file`).
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
