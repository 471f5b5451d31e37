"""How often each class occurs in a training set: the one place that counts.

Frequency-aware parts read per-class counts from what the training run
actually uses -- an annotation file or a built dataset -- so no category list
is ever hard-coded:

- the GOL loss and its hook: images per class of a detection set
  (:func:`image_counts_from_annotations`, :func:`image_counts_from_dataset`);
- PC-Softmax and ShotAccuracy: samples per class of an mmpretrain annotation
  file (:func:`class_counts_from_ann_file`) and the many / medium / few
  groups (:func:`shot_groups`);
- the analysis tools: either, through :func:`image_counts_from_dataset`;
- generated long-tailed sets (the toy classification data, the long-tail
  benchmark): :func:`long_tailed_counts`.

mmdet / mmpretrain datasets are handled by duck typing (``cat_ids``,
``ann_file``, ``get_data_info``), so this module needs only mmengine.

The image frequency of class ``c`` is ``image_count[c] / num_images`` where
``num_images`` counts the images with at least one annotation, the definition
the GOL / EQL reference code uses for LVIS (``image_count`` over the images
that appear in the annotations).
"""
import math
import os.path as osp
from typing import (Any, Dict, Iterable, List, Optional, Sequence, Tuple,
                    Union)

import numpy as np
from mmengine.fileio import get_text, load

__all__ = [
    'ClassImageCounts', 'SHOT_GROUPS', 'unwrap_datasets',
    'image_counts_from_labels', 'image_counts_from_annotations',
    'image_counts_from_dataset', 'class_counts_from_ann_file', 'shot_groups',
    'long_tailed_counts'
]

#: ``(image_count per label, number of annotated images)``
ClassImageCounts = Tuple[List[int], int]

#: Shot group names, most frequent first.
SHOT_GROUPS = ('many', 'medium', 'few')

_SOURCES = ('auto', 'image_count', 'count')


def _check_source(source: str) -> None:
    if source not in _SOURCES:
        raise ValueError(f"source must be 'auto', 'image_count' or 'count', "
                         f'got {source!r}')


def unwrap_datasets(dataset: Any) -> List[Any]:
    """Leaf datasets behind mmengine / mmdet dataset wrappers.

    ``ClassBalancedDataset`` (RFS), ``RepeatDataset`` and
    ``MultiImageMixDataset`` hold one ``dataset``; ``ConcatDataset`` holds
    ``datasets``. Class frequencies are those of the original data, not of
    the re-sampled stream, so every wrapper is looked through.

    Args:
        dataset: A dataset, possibly wrapped (any depth).

    Returns:
        list: The leaf datasets, in order.
    """
    if hasattr(dataset, 'datasets'):
        leaves: List[Any] = []
        for sub in dataset.datasets:
            leaves.extend(unwrap_datasets(sub))
        return leaves
    inner = getattr(dataset, 'dataset', None)
    if inner is not None and inner is not dataset:
        return unwrap_datasets(inner)
    return [dataset]


def image_counts_from_labels(labels_per_image: Iterable[Iterable[int]],
                             num_classes: int) -> ClassImageCounts:
    """Images per class from the labels of each image.

    Args:
        labels_per_image (Iterable[Iterable[int]]): Labels of every image
            (repeats allowed; an image counts once per class).
        num_classes (int): Number of classes.

    Returns:
        tuple[list[int], int]: Image count of every label and the number of
        images with at least one label.
    """
    counts = [0] * num_classes
    num_images = 0
    for labels in labels_per_image:
        present = {int(label) for label in labels}
        if not present:
            continue
        num_images += 1
        for label in present:
            if not 0 <= label < num_classes:
                raise ValueError(f'label {label} outside [0, {num_classes})')
            counts[label] += 1
    return counts, num_images


def _load_annotations(ann: Union[str, dict],
                      backend_args: Optional[dict] = None) -> dict:
    return ann if isinstance(ann, dict) else load(
        ann, backend_args=backend_args)


def image_counts_from_annotations(
        ann: Union[str, dict],
        cat_ids: Optional[Sequence[int]] = None,
        source: str = 'auto',
        backend_args: Optional[dict] = None) -> ClassImageCounts:
    """Per-class image counts from a COCO- or LVIS-format annotation file.

    Args:
        ann (str | dict): Path of the JSON file or its loaded content.
        cat_ids (Sequence[int], optional): Category id of each label, in label
            order (mmdet datasets keep it as ``dataset.cat_ids``). Defaults to
            the order of the file's ``categories`` list, which is the order
            mmdet's ``LVISV1Dataset`` and (for the classes present)
            ``CocoDataset`` assign labels in.
        source (str): ``'image_count'`` uses the categories' ``image_count``
            field (LVIS), ``'count'`` counts images per category from
            ``annotations``, ``'auto'`` uses ``image_count`` when every
            category has it and counts otherwise.
        backend_args (dict, optional): mmengine file backend arguments.

    Returns:
        tuple[list[int], int]: Image count of every label and the number of
        images that have at least one annotation.
    """
    _check_source(source)
    data = _load_annotations(ann, backend_args)
    categories = data.get('categories')
    if not categories:
        raise ValueError('the annotation file has no "categories"')
    by_id: Dict[int, dict] = {c['id']: c for c in categories}
    if cat_ids is None:
        cat_ids = [c['id'] for c in categories]
    missing = [i for i in cat_ids if i not in by_id]
    if missing:
        raise ValueError(f'category ids {missing[:10]} are not in the '
                         'annotation file')
    annotations = data.get('annotations', [])
    num_images = len({a['image_id'] for a in annotations})

    has_image_count = all('image_count' in by_id[i] for i in cat_ids)
    if source == 'image_count' and not has_image_count:
        raise ValueError('source="image_count" but the categories carry no '
                         '"image_count" (not an LVIS-format file)')
    if source != 'count' and has_image_count:
        counts = [int(by_id[i]['image_count']) for i in cat_ids]
    else:
        images_of: Dict[int, set] = {i: set() for i in cat_ids}
        for a in annotations:
            if a.get('iscrowd', 0):
                # crowd regions are ignored in training (mmdet ignore_flag)
                continue
            if a['category_id'] in images_of:
                images_of[a['category_id']].add(a['image_id'])
        counts = [len(images_of[i]) for i in cat_ids]
    if num_images == 0:
        raise ValueError('the annotation file has no annotated image')
    return counts, num_images


def _sample_labels(info: dict) -> Iterable[int]:
    """Labels of one data-list item: mmpretrain ``gt_label`` or the
    non-ignored mmdet ``instances``."""
    if 'gt_label' in info:
        return np.atleast_1d(info['gt_label']).tolist()
    return [
        inst['bbox_label'] for inst in info.get('instances', [])
        if not inst.get('ignore_flag', 0)
    ]


def _leaf_counts(dataset: Any, source: str) -> ClassImageCounts:
    if hasattr(dataset, 'full_init'):
        # lazy_init datasets have no data_list (nor cat_ids) until now
        dataset.full_init()
    cat_ids = getattr(dataset, 'cat_ids', None)
    ann_file = getattr(dataset, 'ann_file', None)
    if source != 'count' and cat_ids is not None and ann_file and \
            str(ann_file).endswith('.json'):
        # mmdet drops its LVIS/COCO api object after loading, so the
        # category info (``image_count``) is re-read from the file.
        data = _load_annotations(ann_file,
                                 getattr(dataset, 'backend_args', None))
        cats = {c['id']: c for c in data.get('categories', [])}
        if all('image_count' in cats.get(i, {}) for i in cat_ids):
            return image_counts_from_annotations(
                data, cat_ids=cat_ids, source='image_count')
    if source == 'image_count':
        raise ValueError(f'{type(dataset).__name__} has no LVIS-style '
                         '"image_count" category info (use source="count")')
    num_classes = len(
        cat_ids if cat_ids is not None else dataset.metainfo['classes'])
    counts, num_images = image_counts_from_labels(
        (_sample_labels(dataset.get_data_info(i))
         for i in range(len(dataset))), num_classes)
    if num_images == 0:
        raise ValueError(f'{type(dataset).__name__} has no annotated image')
    return counts, num_images


def image_counts_from_dataset(dataset: Any,
                              source: str = 'auto') -> ClassImageCounts:
    """Per-class image counts of a built mmdet or mmpretrain dataset.

    Wrappers are looked through (:func:`unwrap_datasets`); the counts of the
    leaves of a ``ConcatDataset`` are summed (they must share the classes).
    For a leaf with ``cat_ids`` and a JSON ``ann_file`` whose categories
    carry ``image_count`` (LVIS), those counts are used; otherwise samples
    are counted per label from the loaded data list (mmpretrain
    ``gt_label``, or the non-ignored mmdet instances).

    Args:
        dataset: The training dataset, e.g.
            ``runner.train_dataloader.dataset``.
        source (str): ``'auto'``, ``'image_count'`` or ``'count'`` (see
            :func:`image_counts_from_annotations`).

    Returns:
        tuple[list[int], int]: Image count of every label and the number of
        annotated images.
    """
    _check_source(source)
    total: Optional[List[int]] = None
    total_images = 0
    for leaf in unwrap_datasets(dataset):
        counts, num_images = _leaf_counts(leaf, source)
        if total is None:
            total = list(counts)
        elif len(total) != len(counts):
            raise ValueError('concatenated datasets have different numbers '
                             f'of classes ({len(total)} vs {len(counts)})')
        else:
            total = [a + b for a, b in zip(total, counts)]
        total_images += num_images
    assert total is not None
    return total, total_images


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
            f'training annotation file {path!r} not found (train_ann_file '
            'must be the file the training split reads)')
    if path.endswith(('.json', '.pkl', '.pickle')):
        labels = [
            int(np.atleast_1d(item['gt_label'])[0])
            for item in load(path)['data_list']
        ]
    else:
        labels = [
            int(line.rsplit(maxsplit=1)[-1])
            for line in get_text(path).splitlines() if line.strip()
        ]
    if not labels:
        raise ValueError(f'{path!r} lists no sample')
    return np.bincount(labels, minlength=num_classes or 0)


def shot_groups(counts: Sequence[int],
                many_threshold: int = 100,
                few_threshold: int = 20) -> List[str]:
    """Group of every class from its training count.

    ``many``: more than ``many_threshold``; ``few``: fewer than
    ``few_threshold``; ``medium``: the rest (Liu et al., Large-Scale
    Long-Tailed Recognition in an Open World, 2019, use 100 / 20).

    Args:
        counts (Sequence[int]): Training count of every class.
        many_threshold (int): Lower bound (exclusive) of ``many``.
        few_threshold (int): Upper bound (exclusive) of ``few``.

    Returns:
        list[str]: One of :data:`SHOT_GROUPS` per class.
    """
    if few_threshold > many_threshold:
        raise ValueError(f'few_threshold ({few_threshold}) must not exceed '
                         f'many_threshold ({many_threshold})')
    return [
        'many'
        if n > many_threshold else 'few' if n < few_threshold else 'medium'
        for n in counts
    ]


def long_tailed_counts(num_classes: int, max_per_class: int,
                       imbalance: float) -> List[int]:
    """Samples per class of an exponentially long-tailed set.

    Class ``i`` keeps ``floor(max_per_class * imbalance ** (-i / (C - 1)))``
    samples, at least one: the CIFAR-LT convention (Cao et al., 2019), so
    that ``imbalance`` is the ratio of the largest class to the smallest.

    Args:
        num_classes (int): Number of classes ``C``.
        max_per_class (int): Size of class 0, the largest.
        imbalance (float): Ratio of the largest class to the smallest, >= 1.

    Returns:
        list[int]: Size of each class, largest first.

    Raises:
        ValueError: An argument is out of range.
    """
    if num_classes < 1 or max_per_class < 1 or imbalance < 1:
        raise ValueError(
            'long_tailed_counts needs num_classes >= 1, max_per_class >= 1 '
            f'and imbalance >= 1, got {num_classes}, {max_per_class}, '
            f'{imbalance}')
    if num_classes == 1:
        return [max_per_class]
    # 1e-9: a count that is whole in exact arithmetic stays whole
    return [
        max(
            1,
            math.floor(max_per_class * imbalance**(-i / (num_classes - 1)) +
                       1e-9)) for i in range(num_classes)
    ]
