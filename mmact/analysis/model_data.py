"""Build a config's model and data for the analysis tools, without a Runner.

The analysis tools run a trained (or freshly initialised) model over a few
batches of a config's dataset. This module does what the Runner would --
default scope, top-level ``data_preprocessor``, strict checkpoint loading,
the split's dataloader -- and adds what the paper's analyses need on top:
the labels of each sample and the frequency group (frequent / common / rare,
or many / medium / few) of each class.
"""
import copy
import os.path as osp
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.fileio import load
from mmengine.registry import MODELS, init_default_scope
from mmengine.runner import Runner, load_checkpoint

from mmact.datasets.class_counts import (SHOT_GROUPS,
                                         image_counts_from_dataset,
                                         shot_groups, unwrap_datasets)
from mmact.utils.preflight import check_checkpoint, check_data_paths

__all__ = [
    'LVIS_GROUPS', 'SHOT_GROUPS', 'load_model', 'build_split_dataloader',
    'sample_batches', 'sample_labels', 'class_groups', 'sample_group'
]

#: LVIS frequency groups, rarest last.
LVIS_GROUPS = ('frequent', 'common', 'rare')
_LVIS_CODES = {'f': 'frequent', 'c': 'common', 'r': 'rare'}


def load_model(cfg: Config,
               checkpoint: Optional[str] = None,
               device: str = 'cpu') -> nn.Module:
    """The config's model in eval mode, from a checkpoint or freshly
    initialised (``init_weights``, the state training starts from).

    Args:
        cfg (Config): An mmdet or mmpretrain config.
        checkpoint (str, optional): Checkpoint path; its keys must match the
            model exactly.
        device (str): Device to put the model on.

    Returns:
        nn.Module: The model, ``eval()``.
    """
    if checkpoint is not None:
        check_checkpoint(checkpoint)  # before the (seconds-long) build
    init_default_scope(cfg.get('default_scope', 'mmengine'))
    model_cfg = copy.deepcopy(cfg.model)
    # The Runner gives a top-level data_preprocessor to the model.
    if cfg.get('data_preprocessor') is not None:
        model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor)
    model = MODELS.build(model_cfg)
    if checkpoint is None:
        model.init_weights()
    else:
        load_checkpoint(model, checkpoint, map_location='cpu', strict=True)
    return model.to(device).eval()


def build_split_dataloader(cfg: Config,
                           split: str = 'val',
                           batch_size: Optional[int] = None,
                           num_workers: int = 0):
    """The config's ``<split>_dataloader`` in a fixed order.

    Args:
        cfg (Config): The config.
        split (str): ``'train'``, ``'val'`` or ``'test'``. The train split
            keeps its own pipeline (with its augmentations).
        batch_size (int, optional): Overrides the config's batch size.
        num_workers (int): Dataloader workers. Defaults to 0.
    """
    if split not in ('train', 'val', 'test'):
        raise ValueError(f"split must be 'train', 'val' or 'test', got "
                         f'{split!r}')
    key = f'{split}_dataloader'
    if cfg.get(key) is None:
        raise ValueError(f'the config has no {key}')
    check_data_paths(cfg, (split, ))
    init_default_scope(cfg.get('default_scope', 'mmengine'))
    loader_cfg = copy.deepcopy(cfg[key])
    loader_cfg.update(num_workers=num_workers, persistent_workers=False)
    loader_cfg['sampler'] = dict(type='DefaultSampler', shuffle=False)
    loader_cfg.pop('batch_sampler', None)
    if batch_size is not None:
        loader_cfg['batch_size'] = batch_size
    return Runner.build_dataloader(loader_cfg)


def sample_labels(data_sample) -> np.ndarray:
    """Class labels of one sample: its ``gt_label`` (classification) or its
    ``gt_instances.labels`` (detection); empty when it has none.

    Args:
        data_sample: An mmpretrain ``DataSample`` or mmdet ``DetDataSample``.
    """
    if 'gt_label' in data_sample:
        return data_sample.gt_label.reshape(-1).cpu().numpy()
    if 'gt_instances' in data_sample and 'labels' in data_sample.gt_instances:
        return data_sample.gt_instances.labels.cpu().numpy()
    return np.zeros(0, dtype=np.int64)


def sample_batches(model: nn.Module, dataloader,
                   num_samples: int) -> Iterator[Tuple[dict, List[np.ndarray]]]:
    """Preprocessed batches of at most ``num_samples`` samples in total.

    Args:
        model (nn.Module): The model whose ``data_preprocessor`` is applied.
        dataloader: A dataloader of the config (see
            :func:`build_split_dataloader`).
        num_samples (int): Samples to yield in total, >= 1.

    Yields:
        tuple[dict, list[np.ndarray]]: ``data`` for ``model(**data,
        mode=...)`` and the labels of each of its samples.
    """
    if num_samples < 1:
        raise ValueError(f'num_samples must be >= 1, got {num_samples}')
    seen = 0
    for batch in dataloader:
        take = min(len(batch['data_samples']), num_samples - seen)
        batch = {key: value[:take] for key, value in batch.items()}
        with torch.no_grad():
            data = model.data_preprocessor(batch, False)
        yield data, [sample_labels(s) for s in data['data_samples']]
        seen += take
        if seen >= num_samples:
            return


def _lvis_groups(dataset) -> Optional[List[str]]:
    """Per-label LVIS group from the annotation file's ``frequency``."""
    ann_file = getattr(dataset, 'ann_file', None)
    cat_ids = getattr(dataset, 'cat_ids', None)
    if not ann_file or cat_ids is None or not osp.isfile(ann_file):
        return None
    categories = {c['id']: c for c in load(ann_file).get('categories', [])}
    codes = [categories.get(i, {}).get('frequency') for i in cat_ids]
    if any(code not in _LVIS_CODES for code in codes):
        return None
    return [_LVIS_CODES[code] for code in codes]


def _training_counts(cfg: Config) -> Optional[List[int]]:
    """Samples per class in the config's training set (images per class for
    detection)."""
    if cfg.get('train_dataloader') is None:
        return None
    init_default_scope(cfg.get('default_scope', 'mmengine'))
    from mmengine.registry import DATASETS
    dataset = DATASETS.build(copy.deepcopy(cfg.train_dataloader.dataset))
    return image_counts_from_dataset(dataset, source='count')[0]


def class_groups(cfg: Config,
                 dataset,
                 many_threshold: int = 100,
                 few_threshold: int = 20
                 ) -> Tuple[Optional[List[str]], Sequence[str]]:
    """Frequency group of every class, for splitting the statistics.

    LVIS-format annotations give ``frequent`` / ``common`` / ``rare`` from
    their ``frequency`` field. Otherwise the config's training set is
    counted and classes with more than ``many_threshold`` training samples
    are ``many``, fewer than ``few_threshold`` ``few``, the rest ``medium``
    (the ImageNet-LT convention is 100 / 20).

    Args:
        cfg (Config): The config.
        dataset: The analysed (built) dataset.
        many_threshold (int): Lower bound (exclusive) of ``many``.
        few_threshold (int): Upper bound (exclusive) of ``few``.

    Returns:
        tuple: ``(group of each label or None, group names rarest last)``.
        None when the training set cannot be counted.
    """
    shot_groups([], many_threshold, few_threshold)  # checks thresholds
    leaves = unwrap_datasets(dataset)
    groups = _lvis_groups(leaves[0])
    if groups is not None:
        return groups, LVIS_GROUPS
    counts = _training_counts(cfg)
    if counts is None:
        return None, ()
    return shot_groups(counts, many_threshold, few_threshold), SHOT_GROUPS


def sample_group(labels: np.ndarray, groups: Sequence[str],
                 order: Sequence[str]) -> Optional[str]:
    """Group of a sample: the rarest group among its labels (so an image
    with any rare object counts as rare); None without labels.

    Args:
        labels (np.ndarray): The sample's class labels.
        groups (Sequence[str]): Group of every class (:func:`class_groups`).
        order (Sequence[str]): Group names, rarest last.
    """
    present = {groups[int(label)] for label in labels}
    for name in reversed(order):
        if name in present:
            return name
    return None


def _bbox_head_logits(output, num_classes: int) -> torch.Tensor:
    """Foreground class logits from a detector head's forward output."""
    cls_scores = output[0]
    if isinstance(cls_scores, (list, tuple)):  # dense head: one per level
        return torch.cat([
            s.permute(0, 2, 3, 1).reshape(-1, num_classes) for s in cls_scores
        ])
    # RoI head: num_classes + 1 columns, background last
    return cls_scores[:, :num_classes]


@torch.no_grad()
def forward_logits(model: nn.Module, data: dict) -> np.ndarray:
    """Classification logits of one preprocessed batch.

    * mmpretrain classifiers: the head's ``(N, C)`` scores.
    * Two-stage detectors: the last RoI head stage's scores of every RoI
      (all proposals, background column dropped).
    * Single-stage detectors: the scores of every anchor / location.

    Args:
        model (nn.Module): The model, in eval mode.
        data (dict): A batch from :func:`sample_batches`.

    Returns:
        np.ndarray: ``(M, C)`` float64 logits.
    """
    roi_head = getattr(model, 'roi_head', None)
    if roi_head is not None and hasattr(roi_head, 'bbox_head'):
        head = roi_head.bbox_head
        head = head[-1] if isinstance(head, nn.ModuleList) else head
    else:
        head = getattr(model, 'bbox_head', None)
    if head is None:
        logits = model(**data, mode='tensor')
        if not isinstance(logits, torch.Tensor) or logits.dim() != 2:
            raise ValueError(
                f'{type(model).__name__} returned no (N, C) logits in '
                "mode='tensor'; supported: mmpretrain classifiers and mmdet "
                'detectors with roi_head.bbox_head or bbox_head')
        return logits.double().cpu().numpy()
    num_classes = head.num_classes
    captured = []
    handle = head.register_forward_hook(
        lambda _m, _i, output: captured.append(
            _bbox_head_logits(output, num_classes)))
    try:
        model(**data, mode='tensor')
    finally:
        handle.remove()
    if not captured:
        raise ValueError(f'the {type(head).__name__} of '
                         f"{type(model).__name__} did not run in mode='tensor'")
    return captured[-1].double().cpu().numpy()
