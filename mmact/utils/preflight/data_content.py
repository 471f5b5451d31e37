"""Check the samples a config trains or tests on, before the model is built.

:func:`check_datasets` builds each dataset of the requested splits once,
runs the checks between mmengine's loading steps (``load_data_list``,
``filter_data``, ``full_init``), and :func:`use_checked_datasets` hands the
built datasets to the Runner, so the annotations are still read only once:

- an annotation file without samples, or a ``filter_cfg`` that removes them
  all (mmengine would fail with "need at least one array to concatenate");
- labels the model cannot predict: a label >= a head's ``num_classes``, or
  a detection dataset whose ``classes`` differ in number from a head's
  ``num_classes`` (mmdet's metrics map labels to the dataset's classes);
- an mmpretrain ``split=`` dataset without its ``meta/<split>.txt``, whose
  split folder does not hold one folder per class;
- boxes mmdet's COCO-format datasets drop while loading (no overlap with the
  image, zero or negative size, under a pixel, a category outside the
  classes), counted by reason in a warning.
"""
import copy
import inspect
import logging
import os
import os.path as osp
from collections import Counter
from typing import Any, Callable, Dict, Iterator, List, Sequence, Tuple

import numpy as np
from mmengine.config import Config
from mmengine.dataset import BaseDataset
from mmengine.logging import print_log
from mmengine.registry import DATASETS, DefaultScope

from .data_paths import _SPLIT_FOLDER_DATASETS, _dataset_class, _leaf_datasets

__all__ = [
    'DataCheckError', 'head_num_classes', 'check_datasets',
    'use_checked_datasets'
]

# Heads whose num_classes is not the dataset's: class-agnostic proposals,
# stuff classes of a semantic branch.
_OTHER_CLASS_HEADS = ('rpn_head', 'semantic_head')
# The registered builder that returns a dataset check_datasets built.
CHECKED_DATASET_TYPE = 'PreflightCheckedDataset'
_CHECKED: Dict[str, Any] = {}


class DataCheckError(ValueError):
    """The data of a config cannot train or test its model."""


@DATASETS.register_module(name=CHECKED_DATASET_TYPE)
def _checked_dataset(key: str) -> Any:
    """The dataset :func:`use_checked_datasets` left for the Runner."""
    return _CHECKED.pop(key)


def head_num_classes(cfg: Config) -> List[Tuple[str, int]]:
    """Every ``num_classes`` of the model and its data preprocessor.

    Args:
        cfg (Config): A full runner config.

    Returns:
        list[tuple[str, int]]: Config key and value, e.g.
        ``('model.roi_head.bbox_head.num_classes', 1203)``; class-agnostic
        heads (``rpn_head``, ``semantic_head``) left out.
    """
    found = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == 'num_classes' and isinstance(value, int):
                    found.append((f'{where}.num_classes', value))
                elif key not in _OTHER_CLASS_HEADS:
                    walk(value, f'{where}.{key}')
        elif isinstance(node, (list, tuple)):
            for i, value in enumerate(node):
                walk(value, f'{where}[{i}]')

    walk(cfg.get('model'), 'model')
    walk(cfg.get('data_preprocessor'), 'data_preprocessor')
    return found


def _drop_reason(ann: dict, img: dict, cat_ids: set) -> Any:
    """Why mmdet's ``CocoDataset.parse_data_info`` drops ``ann`` (its rule;
    None when it keeps it)."""
    x1, y1, w, h = ann['bbox']
    if w <= 0 or h <= 0:
        return 'zero or negative width / height'
    inter_w = max(0, min(x1 + w, img['width']) - max(x1, 0))
    inter_h = max(0, min(y1 + h, img['height']) - max(y1, 0))
    if inter_w * inter_h == 0:
        return 'outside the image'
    if ann.get('area', 1) <= 0:
        return 'zero area'
    if w < 1 or h < 1:
        return 'under one pixel wide or high'
    if ann.get('category_id') not in cat_ids:
        return 'a category outside the classes'
    return None


def _counting_boxes(parse: Callable, dataset: Any, boxes: Counter,
                    dropped: Counter) -> Callable:
    """``parse`` (a COCO-format ``parse_data_info``) that also counts the
    boxes it reads and those it drops, by reason."""
    cat_ids: List[set] = []

    def parse_and_count(raw: Any) -> Any:
        anns = raw.get('raw_ann_info') if isinstance(raw, dict) else None
        img = raw.get('raw_img_info') if isinstance(raw, dict) else None
        if isinstance(anns, list) and isinstance(img, dict):
            if not cat_ids:  # set by load_data_list before the first parse
                cat_ids.append(set(getattr(dataset, 'cat_ids', ())))
            for ann in anns:
                if ann.get('ignore', False) or 'bbox' not in ann:
                    continue
                boxes['read'] += 1
                reason = _drop_reason(ann, img, cat_ids[0])
                if reason is not None:
                    dropped[reason] += 1
        return parse(raw)

    return parse_and_count


def _max_label(data_list: Sequence[dict]) -> Tuple[int, bool]:
    """The largest label of the samples, and whether they are detection
    samples (``instances``) rather than classification ones
    (``gt_label``)."""
    largest, detection = -1, False
    for info in data_list:
        instances = info.get('instances')
        if instances is not None:
            detection = True
            labels = [i['bbox_label'] for i in instances if 'bbox_label' in i]
        else:
            labels = np.ravel(info.get('gt_label', -1)).tolist()
        if labels:
            largest = max(largest, int(max(labels)))
    return largest, detection


def _check_labels(data_list: Sequence[dict], metainfo: dict, source: str,
                  where: str, heads: List[Tuple[str, int]]) -> None:
    """Raise when a head cannot predict every label of the samples."""
    largest, detection = _max_label(data_list)
    classes = metainfo.get('classes')
    count = len(classes) if isinstance(classes, (list, tuple)) else None
    wrong = [(key, n) for key, n in heads
             if largest >= n or (detection and count not in (None, n))]
    if not wrong:
        return
    if detection and count is not None:
        need, has = count, f'{count} classes ({where}.metainfo.classes)'
        if largest >= count:
            has += f' and labels up to {largest}'
    else:  # mmpretrain's classes default to the full set (ImageNet: 1000)
        need, has = largest + 1, f'labels 0-{largest}'
    heads_text = ', '.join(f'{key} = {n}' for key, n in wrong)
    raise DataCheckError(
        f'{source} has {has}, but {heads_text}. Set num_classes to {need}, '
        f'or give {where}.metainfo.classes the classes the model predicts.')


def _check_split_folder(dataset_cfg: dict, where: str, scope: Any) -> None:
    """An mmpretrain ``split=`` dataset without ``meta/<split>.txt`` reads
    its split folder as one subfolder per class: refuse a folder that is
    not."""
    cls = _dataset_class(dataset_cfg, scope)
    split = dataset_cfg.get('split')
    if (cls is None or not isinstance(split, str) or split in ('', 'test')
            or dataset_cfg.get('ann_file')
            or not any(c.__name__ in _SPLIT_FOLDER_DATASETS
                       for c in cls.__mro__)):
        return
    root = dataset_cfg.get('data_root') or ''
    prefix = dataset_cfg.get('data_prefix') or split
    if isinstance(prefix, dict):
        prefix = prefix.get('img_path') or split
    meta = osp.join(root, 'meta', f'{split}.txt')
    folder = osp.join(root, prefix)
    metainfo = dataset_cfg.get('metainfo') or getattr(cls, 'METAINFO', {})
    classes = metainfo.get('classes')
    if osp.exists(meta) or not osp.isdir(folder) or not isinstance(
            classes, (list, tuple)):
        return
    subfolders = [
        d for d in os.listdir(folder) if osp.isdir(osp.join(folder, d))
    ]
    if len(subfolders) == len(classes):
        return
    raise DataCheckError(
        f'{meta} does not exist ({where}.split={split!r} reads it when '
        f'{where}.ann_file is empty), so mmpretrain would take each '
        f'subfolder of {folder} for a class: {len(subfolders)} subfolders '
        f'for {len(classes)} classes. Add {meta} (a line `<image path under '
        f'{folder}> <label>` per image) or set {where}.ann_file.')


def _takes_lazy_init(cls: Any) -> bool:
    """Whether ``cls`` or a base it passes ``**kwargs`` to takes
    ``lazy_init`` (mmdet's datasets take it through ``**kwargs``)."""
    for base in getattr(cls, '__mro__', ()):
        try:
            if 'lazy_init' in inspect.signature(base.__init__).parameters:
                return True
        except (TypeError, ValueError):
            return False
    return False


def _lazy(dataset_cfg: Any, scope: Any) -> Any:
    """``dataset_cfg`` with ``lazy_init=True`` wherever the class takes it,
    so that building it reads no annotations."""
    if not isinstance(dataset_cfg, dict):
        return dataset_cfg
    if _takes_lazy_init(_dataset_class(dataset_cfg, scope)):
        dataset_cfg['lazy_init'] = True
    for key in ('dataset', 'datasets'):
        child = dataset_cfg.get(key)
        if isinstance(child, dict):
            _lazy(child, scope)
        elif isinstance(child, (list, tuple)):
            for item in child:
                _lazy(item, scope)
    return dataset_cfg


def _built_leaves(dataset: Any, where: str) -> Iterator[Tuple[str, Any]]:
    """The datasets that read files, under their config keys."""
    children = getattr(dataset, 'datasets', None)
    if isinstance(children, (list, tuple)):
        for i, child in enumerate(children):
            yield from _built_leaves(child, f'{where}.datasets[{i}]')
    elif getattr(dataset, 'dataset', None) is not None:
        yield from _built_leaves(dataset.dataset, f'{where}.dataset')
    else:
        yield where, dataset


def _load_and_check(dataset: BaseDataset, where: str,
                    heads: List[Tuple[str, int]], warn: bool) -> None:
    """Load a lazily built dataset, check its samples, then initialise it
    from the samples loaded here."""
    ann_file = getattr(dataset, 'ann_file', '') or ''
    source = f'{where} ({ann_file})' if ann_file else where
    boxes, dropped = Counter(), Counter()
    dataset.parse_data_info = _counting_boxes(dataset.parse_data_info, dataset,
                                              boxes, dropped)
    try:
        data_list = dataset.load_data_list()
    finally:
        del dataset.parse_data_info
    if not data_list:
        raise DataCheckError(
            f'{source}: no samples. Check that {where}.ann_file (or the '
            f'folder {where}.data_prefix scans) is the split you meant and '
            'holds images with annotations.')
    dataset.data_list = data_list
    kept = dataset.filter_data()
    if not kept:
        raise DataCheckError(
            f'{source}: {where}.filter_cfg={dataset.filter_cfg!r} removes '
            f'all {len(data_list)} samples (filter_empty_gt: none has an '
            f'annotation of the {len(dataset.metainfo.get("classes") or ())}'
            ' classes kept; min_size: every image is smaller). Check '
            f'{where}.metainfo.classes and filter_cfg.')
    _check_labels(kept, dataset.metainfo, source, where, heads)
    if dropped and warn:
        reasons = ', '.join(f'{n} {reason}'
                            for reason, n in dropped.most_common())
        print_log(
            f'Data check: {source}: mmdet drops {sum(dropped.values())} of '
            f'{boxes["read"]} boxes while loading: {reasons}.',
            logger='current',
            level=logging.WARNING)
    dataset.load_data_list = lambda: data_list  # not read a second time
    try:
        dataset.full_init()
    finally:
        del dataset.load_data_list


def check_datasets(cfg: Config,
                   splits: Sequence[str],
                   warn: bool = True) -> Dict[str, Any]:
    """Build the datasets of ``splits`` and check their samples.

    Args:
        cfg (Config): A full runner config (dataset paths checked, e.g. by
            :func:`check_data_paths`).
        splits (Sequence[str]): Which of ``'train'``, ``'val'``,
            ``'test'``.
        warn (bool): Log the dropped-box counts (the main process's job).

    Returns:
        dict[str, Any]: Split -> its built, fully initialised dataset, for
        :func:`use_checked_datasets`. Splits without a dataloader config
        are left out.

    Raises:
        DataCheckError: A dataset has no samples, labels a head cannot
            predict, or a split folder that does not match its classes;
            the message names the config key and the file.
    """
    heads = head_num_classes(cfg)
    scope = cfg.get('default_scope')
    built = {}
    for split in splits:
        loader = cfg.get(f'{split}_dataloader')
        if not isinstance(loader, dict) or not isinstance(
                loader.get('dataset'), dict):
            continue
        where = f'{split}_dataloader.dataset'
        for leaf_where, leaf_cfg in _leaf_datasets(loader['dataset'], where):
            _check_split_folder(leaf_cfg, leaf_where, scope)
        # wrappers build their inner datasets in the default scope
        with DefaultScope.overwrite_default_scope(scope):
            dataset = DATASETS.build(
                _lazy(copy.deepcopy(loader['dataset']), scope))
            for leaf_where, leaf in _built_leaves(dataset, where):
                if isinstance(leaf, BaseDataset) and \
                        not leaf._fully_initialized:
                    _load_and_check(leaf, leaf_where, heads, warn)
            if hasattr(dataset, 'full_init'):
                dataset.full_init()
        built[split] = dataset
    return built


def use_checked_datasets(runner: Any, datasets: Dict[str, Any]) -> None:
    """Have ``runner`` use the datasets :func:`check_datasets` built.

    The Runner builds its dataloaders from ``runner._<split>_dataloader``
    when it starts a loop; the dataset entry becomes a registered builder
    that returns the checked dataset (a dataset object there would be
    deep-copied, doubling its memory). The config the Runner dumps is not
    changed.

    Args:
        runner (Runner): A Runner whose loops are not built yet.
        datasets (dict[str, Any]): :func:`check_datasets`' result.
    """
    for split, dataset in datasets.items():
        loader = getattr(runner, f'_{split}_dataloader', None)
        if isinstance(loader, dict) and isinstance(
                loader.get('dataset'), dict):
            key = f'{split}:{id(dataset)}'
            _CHECKED[key] = dataset
            loader['dataset'] = dict(type=CHECKED_DATASET_TYPE, key=key)
