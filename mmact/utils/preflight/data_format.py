"""Check the fields of a config's annotation files and that its images exist.

What a job would otherwise meet hours in, as a ``KeyError`` in a dataloader
worker or a missing image in epoch 3:

- COCO-format JSON (COCO, LVIS v1, V3Det, Objects365 v2): the top-level
  lists, and in every image, annotation and category the fields mmdet's
  datasets read, with their types (``bbox`` four numbers, ``category_id``
  among the categories, ``image_id`` among the images, polygons of at least
  three points, RLE with ``size`` and ``counts``); LVIS images by
  ``coco_url``, the others by ``file_name``;
- mmpretrain annotation lists (``meta/train.txt``): ``<path> <label>`` on
  every line, an integer label;
- :func:`missing_images`: every sample's image file, from the datasets
  :func:`~.data_content.check_datasets` built (the dataset's own path
  rules).

Each problem names the file and the field (``annotations[12].bbox``) or the
line.
"""
import json
import os.path as osp
from numbers import Number
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from mmengine.config import Config

from .data_content import _built_leaves
from .data_paths import _dataset_class, _leaf_datasets

__all__ = ['annotation_problems', 'check_annotation_file', 'missing_images']

#: problems listed per file before "... and N more"
FIRST = 10


def _is_number(value: Any) -> bool:
    return isinstance(value, Number) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _segmentation_problem(seg: Any) -> Optional[str]:
    if isinstance(seg, dict):
        if 'counts' not in seg or not isinstance(seg.get('size'), list) or \
                len(seg['size']) != 2:
            return "an RLE dict needs 'counts' and 'size' [height, width]"
        return None
    if not isinstance(seg, list):
        return f'expected polygons (a list) or an RLE dict, got ' \
            f'{type(seg).__name__}'
    for i, poly in enumerate(seg):
        if not isinstance(poly, list) or len(poly) < 6 or len(poly) % 2 or \
                not all(_is_number(v) for v in poly):
            return (f'polygon {i} must be a flat list of at least 3 x, y '
                    'number pairs')
    return None


def _coco_problems(data: Any, image_field: str,
                   with_mask: bool) -> Iterator[str]:
    """Field problems of a loaded COCO-format annotation file."""
    if not isinstance(data, dict):
        yield f'expected a JSON object, got {type(data).__name__}'
        return
    for key in ('images', 'annotations', 'categories'):
        if not isinstance(data.get(key), list):
            yield (f"'{key}' is missing" if key not in data else
                   f"'{key}' is a {type(data[key]).__name__}, not a list")
    if any(not isinstance(data.get(k), list)
           for k in ('images', 'annotations', 'categories')):
        return
    category_ids = set()
    for i, cat in enumerate(data['categories']):
        if not isinstance(cat, dict) or not _is_int(cat.get('id')):
            yield f'categories[{i}].id: missing or not an integer'
            continue
        category_ids.add(cat['id'])
        if not isinstance(cat.get('name'), str):
            yield f'categories[{i}].name: missing or not a string'
    image_ids = set()
    for i, img in enumerate(data['images']):
        if not isinstance(img, dict) or not _is_int(img.get('id')):
            yield f'images[{i}].id: missing or not an integer'
            continue
        image_ids.add(img['id'])
        where = f'images[{i}] (id {img["id"]})'
        if not isinstance(img.get(image_field), str) or \
                not img[image_field]:
            yield f'{where}.{image_field}: missing or not a string'
        for key in ('width', 'height'):
            if not _is_number(img.get(key)) or img[key] <= 0:
                yield (f'{where}.{key}: {img.get(key)!r}, expected a '
                       'positive number')
    for i, ann in enumerate(data['annotations']):
        if not isinstance(ann, dict):
            yield f'annotations[{i}]: not an object'
            continue
        where = f'annotations[{i}]' + (f' (id {ann["id"]})'
                                       if 'id' in ann else '')
        if not _is_int(ann.get('id')):
            yield f'{where}.id: missing or not an integer'
        if ann.get('image_id') not in image_ids:
            yield (f'{where}.image_id: {ann.get("image_id")!r} is not the '
                   'id of an image of the file')
        if ann.get('category_id') not in category_ids:
            yield (f'{where}.category_id: {ann.get("category_id")!r} is '
                   'not the id of a category of the file')
        bbox = ann.get('bbox')
        if not isinstance(bbox, list) or len(bbox) != 4 or \
                not all(_is_number(v) for v in bbox):
            yield (f'{where}.bbox: {bbox!r}, expected [x, y, width, '
                   'height], four numbers')
        if 'area' in ann and not _is_number(ann['area']):
            yield f'{where}.area: {ann["area"]!r}, expected a number'
        if with_mask and not ann.get('iscrowd', 0):
            if 'segmentation' not in ann:
                yield (f'{where}.segmentation: missing (the pipeline '
                       'loads masks)')
            else:
                problem = _segmentation_problem(ann['segmentation'])
                if problem:
                    yield f'{where}.segmentation: {problem}'


def _list_problems(path: str) -> Iterator[str]:
    """Line problems of an mmpretrain ``<path> <label>`` list."""
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            parts = line.rsplit(' ', 1)
            if len(parts) != 2:
                yield (f'line {number}: {line!r} has no label (expected '
                       '`<image path> <integer label>`)')
            elif not parts[1].lstrip('-').isdigit() or int(parts[1]) < 0:
                yield (f'line {number}: label {parts[1]!r} is not a '
                       'non-negative integer')


def check_annotation_file(path: str,
                          kind: str,
                          image_field: str = 'file_name',
                          with_mask: bool = False) -> List[str]:
    """The field problems of one annotation file.

    Args:
        path (str): The file.
        kind (str): ``'coco'`` (COCO-format JSON) or ``'list'`` (an
            mmpretrain ``<path> <label>`` list).
        image_field (str): The image path field of a JSON's images
            (``'coco_url'`` for LVIS v1).
        with_mask (bool): Annotations need a ``segmentation``.

    Returns:
        list[str]: One line per problem, each starting with ``path``.
    """
    if kind == 'list':
        problems = list(_list_problems(path))
    else:
        try:
            with open(path) as f:
                data = json.load(f)
        except ValueError as error:
            return [f'{path}: not valid JSON ({error})']
        problems = list(_coco_problems(data, image_field, with_mask))
    return [f'{path}: {p}' for p in problems]


def _loads_masks(dataset: dict) -> bool:
    pipeline = dataset.get('pipeline')
    return any(
        isinstance(t, dict) and t.get('type') == 'LoadAnnotations'
        and t.get('with_mask', False)
        for t in (pipeline if isinstance(pipeline, (list, tuple)) else []))


def _annotation_files(cfg: Config,
                      splits: Sequence[str]) -> Iterator[Tuple[str, dict]]:
    """(path, arguments of :func:`check_annotation_file`) of every local
    annotation file of ``splits``, once each."""
    scope = cfg.get('default_scope')
    seen = set()
    for split in splits:
        loader = cfg.get(f'{split}_dataloader')
        if not isinstance(loader, dict):
            continue
        for _, dataset in _leaf_datasets(
                loader.get('dataset'), f'{split}_dataloader.dataset'):
            ann_file = dataset.get('ann_file')
            if not isinstance(ann_file, str) or not ann_file:
                continue
            root = dataset.get('data_root') or ''
            path = ann_file if osp.isabs(ann_file) else osp.join(
                root, ann_file)
            if path in seen or not osp.isfile(path):
                continue
            seen.add(path)
            cls = _dataset_class(dataset, scope)
            names = [c.__name__ for c in getattr(cls, '__mro__', ())]
            if 'CocoDataset' in names:
                yield path, dict(
                    kind='coco',
                    image_field='coco_url' if any(
                        n.startswith('LVIS') for n in names) else 'file_name',
                    with_mask=_loads_masks(dataset))
            elif path.endswith('.txt'):
                yield path, dict(kind='list')


def annotation_problems(cfg: Config,
                        splits: Sequence[str],
                        first: int = FIRST) -> List[str]:
    """The field problems of every annotation file ``splits`` read.

    Args:
        cfg (Config): A full runner config whose paths exist (see
            :func:`~.data_paths.check_data_paths`).
        splits (Sequence[str]): Which of ``'train'``, ``'val'``, ``'test'``.
        first (int): Problems listed per file; the rest are counted.

    Returns:
        list[str]: One line per problem, naming the file and the field or
        line.
    """
    lines = []
    for path, kwargs in _annotation_files(cfg, splits):
        problems = check_annotation_file(path, **kwargs)
        lines += problems[:first]
        if len(problems) > first:
            lines.append(f'{path}: ... and {len(problems) - first} more')
    return lines


def missing_images(datasets: Dict[str, Any],
                   first: int = FIRST) -> List[str]:
    """The samples whose image file does not exist.

    Args:
        datasets (dict[str, Any]): :func:`~.data_content.check_datasets`'
            result.
        first (int): Images listed per dataset; the rest are counted.

    Returns:
        list[str]: One line per missing image, naming the split.
    """
    lines = []
    for split, dataset in datasets.items():
        for where, leaf in _built_leaves(dataset,
                                         f'{split}_dataloader.dataset'):
            if not hasattr(leaf, 'get_data_info'):
                continue
            paths = [leaf.get_data_info(i).get('img_path')
                     for i in range(len(leaf))]  # serialized samples too
            missing = [
                path for path in paths if isinstance(path, str)
                and '://' not in path and not osp.exists(path)
            ]
            lines += [f'{path} ({where}: image of a sample)'
                      for path in missing[:first]]
            if len(missing) > first:
                lines.append(f'{where}: ... and {len(missing) - first} more '
                             f'of {len(paths)} images missing')
    return lines
