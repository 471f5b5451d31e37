"""The toy dataset formats as a table, and the one writer that renders them.

Each entry of :data:`FORMATS` says what differs between the stock layouts:
annotation file names, where images go and what their json record holds,
the category records, which splits are long-tailed, the options and their
defaults. :func:`generate_toy_data` renders any entry; the classification
format has its own small writer because it has no annotation json.
"""
import json
import os
import os.path as osp
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from mmact.datasets.class_counts import (image_counts_from_labels,
                                         long_tailed_counts)

from .classes import COCO_CATEGORY_IDS, coco_supercategories, toy_classes
from .labels import (covering_labels, lvis_frequency,
                     lvis_frequency_thresholds, lvis_long_tail_labels,
                     with_extra_instances)
from .render import (category_appearance, check_image_size,
                     render_classification_image, render_instances, split_rng,
                     write_image, write_json, write_lines)

__all__ = [
    'ToyFormat', 'FORMATS', 'TOY_FORMATS', 'MANIFEST', 'generate_toy_data',
    'resolve_options', 'missing_files'
]

#: Written last into every generated root; lists the options and files.
MANIFEST = 'toy_manifest.json'
_LVIS_URL = 'http://images.cocodataset.org/'
_SPLITS = ('train', 'val')

#: ``progress(split, done, total)``, called after each written image.
Progress = Callable[[str, int, int], None]


@dataclass
class _Job:
    """One generation run: the options plus what is derived from them.

    The hooks of :class:`ToyFormat` read options as attributes
    (``job.num_classes``).
    """
    fmt: 'ToyFormat'
    out_dir: str
    options: Dict[str, Any]
    width: int = 0
    height: int = 0
    info: Dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__['options'][name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass(frozen=True)
class ToyFormat:
    """What one stock dataset layout looks like.

    Args:
        name (str): Format name, e.g. ``'lvis'``.
        title (str): Name in the json ``info.description``.
        defaults (Mapping[str, Any]): Accepted options and their defaults.
        ann_files (tuple[str, str]): Train and val annotation files,
            relative to the root.
        image_record (Callable): ``(job, rng, split, image_id, labels)`` ->
            ``(json image record, image path relative to the root)``.
        categories (Callable): ``(job, names, train_labels)`` -> category
            records.
        train_labels (Callable, optional): ``(job, rng)`` -> labels of the
            training images; every split covers all categories when None.
        prepare (Callable, optional): ``(job)`` -> entries added to the json
            ``info`` (and seen by the other hooks as ``job.info``).
        extra_files (Callable, optional): ``(job, names)`` -> writes files
            beside the annotations (e.g. a label list), returns their paths
            relative to the root.
        iscrowd (bool): Annotations carry ``iscrowd=0`` (LVIS has none).
        writer (Callable, optional): ``(job, progress)`` -> writes the set
            and returns its files relative to the root; replaces the
            detection writer (classification).
    """
    name: str
    title: str
    defaults: Mapping[str, Any]
    ann_files: Tuple[str, str] = ('', '')
    image_record: Optional[Callable] = None
    categories: Optional[Callable] = None
    train_labels: Optional[Callable] = None
    prepare: Optional[Callable] = None
    extra_files: Optional[Callable] = None
    iscrowd: bool = True
    writer: Optional[Callable] = None


# ---------------------------------------------------------------------------
# detection writer
# ---------------------------------------------------------------------------
def _split_labels(job: _Job, rng, split: str, num: int) -> List[List[int]]:
    if split == 'train' and job.fmt.train_labels is not None:
        return job.fmt.train_labels(job, rng)
    return with_extra_instances(
        rng, covering_labels(rng, num, job.num_classes, job.max_instances),
        job.max_instances)


def _write_detection(job: _Job, progress: Optional[Progress]) -> List[str]:
    """Render both splits of a detection format; return the written files."""
    fmt = job.fmt
    job.width, job.height = check_image_size(job.image_size, 32)
    names = toy_classes(fmt.name, job.num_classes)
    if fmt.prepare is not None:
        job.info.update(fmt.prepare(job))
    written: List[str] = []
    categories: List[dict] = []
    next_image_id = next_ann_id = 1
    for split, num, ann_file in zip(_SPLITS, (job.num_train, job.num_val),
                                    fmt.ann_files):
        rng = split_rng(job.seed, fmt.name, split)
        labels_list = _split_labels(job, rng, split, num)
        if split == 'train':
            categories = fmt.categories(job, names, labels_list)
        label_to_cat = [c['id'] for c in categories]
        images, paths = [], []
        for offset, labels in enumerate(labels_list):
            record, rel = fmt.image_record(job, rng, split,
                                           next_image_id + offset, labels)
            images.append(record)
            paths.append(rel)
        annotations = []
        for done, (labels, rel,
                   record) in enumerate(zip(labels_list, paths, images), 1):
            img, instances = render_instances(rng, labels, job.width,
                                              job.height)
            write_image(osp.join(job.out_dir, rel), img)
            written.append(rel)
            for inst in instances:
                ann = dict(
                    id=next_ann_id,
                    image_id=record['id'],
                    category_id=label_to_cat[inst['label']],
                    bbox=inst['bbox'],
                    area=inst['area'])
                if fmt.iscrowd:
                    ann['iscrowd'] = 0
                # COCO and LVIS always have masks, the others on request
                if job.options.get('with_segm', True):
                    ann['segmentation'] = inst['segmentation']
                annotations.append(ann)
                next_ann_id += 1
            if progress is not None:
                progress(split, done, len(labels_list))
        write_json(
            osp.join(job.out_dir, ann_file),
            dict(
                info=dict(
                    description=f'mmact toy {fmt.title} {split} set',
                    version='1.0',
                    year=2024,
                    contributor='mmact.testing.toy_data',
                    seed=job.seed,
                    **job.info),
                licenses=[dict(id=1, name='synthetic', url='')],
                images=images,
                annotations=annotations,
                categories=categories))
        written.append(ann_file)
        next_image_id += len(labels_list)
    if fmt.extra_files is not None:
        written.extend(fmt.extra_files(job, names))
    return written


def _numbered_categories(job: _Job, names, train_labels) -> List[dict]:
    return [dict(id=i + 1, name=name) for i, name in enumerate(names)]


# ---------------------------------------------------------------------------
# COCO, V3Det, Objects365
# ---------------------------------------------------------------------------
def _coco_image(job: _Job, rng, split: str, image_id: int, labels):
    name = f'{image_id:012d}.jpg'
    return dict(
        id=image_id,
        file_name=name,
        height=job.height,
        width=job.width,
        license=1), osp.join(f'{split}2017', name)


def _coco_categories(job: _Job, names, train_labels) -> List[dict]:
    supercats = coco_supercategories()
    return [
        dict(supercategory=supercats[i], id=COCO_CATEGORY_IDS[i], name=name)
        for i, name in enumerate(names)
    ]


def _v3det_image(job: _Job, rng, split: str, image_id: int, labels):
    rel = osp.join('images', split, f'{image_id:012d}.jpg')
    return dict(
        id=image_id,
        file_name=rel,
        height=job.height,
        width=job.width,
        license=1), rel


def _v3det_label_file(job: _Job, names) -> List[str]:
    # V3DetDataset reads its class names from this file, in label order.
    rel = osp.join('annotations', 'category_name_13204_v3det_2023_v1.txt')
    write_lines(osp.join(job.out_dir, rel), names)
    return [rel]


def _objects365_image(job: _Job, rng, split: str, image_id: int, labels):
    # As in Objects365 v2, file_name is images/v2/patch0/<name>.jpg, of which
    # Objects365V2Dataset keeps patch0/<name>.jpg under train/ or val/.
    name = f'objects365_v2_{image_id:08d}.jpg'
    return dict(
        id=image_id,
        file_name=f'images/v2/patch0/{name}',
        height=job.height,
        width=job.width,
        license=1), osp.join(split, 'patch0', name)


# ---------------------------------------------------------------------------
# LVIS v1
# ---------------------------------------------------------------------------
def _lvis_prepare(job: _Job) -> dict:
    rare_max, common_max = lvis_frequency_thresholds(job.num_train,
                                                     job.num_classes)
    if job.rare_max is not None:
        rare_max = int(job.rare_max)
    if job.common_max is not None:
        common_max = int(job.common_max)
    if not 1 <= rare_max < common_max:
        raise ValueError('need 1 <= rare_max < common_max, got '
                         f'rare_max={rare_max}, common_max={common_max}')
    return dict(
        frequency_thresholds=dict(rare_max=rare_max, common_max=common_max))


def _lvis_train_labels(job: _Job, rng) -> List[List[int]]:
    thr = job.info['frequency_thresholds']
    return lvis_long_tail_labels(rng, job.num_train, job.num_classes,
                                 thr['rare_max'], thr['common_max'],
                                 job.max_instances)


def _lvis_categories(job: _Job, names, train_labels) -> List[dict]:
    # Both splits list the training statistics, as LVIS does.
    thr = job.info['frequency_thresholds']
    image_counts, _ = image_counts_from_labels(train_labels, len(names))
    instance_counts = np.bincount(
        [label for labels in train_labels for label in labels],
        minlength=len(names)).tolist()
    return [
        dict(
            id=i + 1,
            name=name,
            synset=f'{name}.n.01',
            synonyms=[name],
            frequency=lvis_frequency(image_counts[i], thr['rare_max'],
                                     thr['common_max']),
            image_count=image_counts[i],
            instance_count=instance_counts[i],
            **{'def': f'toy category {i}: a {category_appearance(i)[0]}'})
        for i, name in enumerate(names)
    ]


def _lvis_image(job: _Job, rng, split: str, image_id: int, labels):
    # LVISV1Dataset derives the file name from coco_url; the federated
    # fields list a few absent (negative) and not-exhaustive categories.
    rel = f'{split}2017/{image_id:012d}.jpg'
    present = set(labels)
    absent = [c for c in range(job.num_classes) if c not in present]
    n_neg = min(len(absent), int(rng.integers(0, 4)))
    neg = sorted(int(c) for c in rng.choice(absent, n_neg, False))
    not_exhaustive = []
    if rng.random() < 0.15:
        not_exhaustive = [int(rng.choice(sorted(present)))]
    return dict(
        id=image_id,
        license=1,
        height=job.height,
        width=job.width,
        coco_url=_LVIS_URL + rel,
        flickr_url='',
        date_captured='2013-11-14 00:00:00',
        neg_category_ids=[c + 1 for c in neg],
        not_exhaustive_category_ids=[c + 1 for c in not_exhaustive]), rel


# ---------------------------------------------------------------------------
# long-tailed classification (ImageNet layout)
# ---------------------------------------------------------------------------
def _write_classification(job: _Job,
                          progress: Optional[Progress]) -> List[str]:
    width, height = check_image_size(job.image_size, 8)
    if job.imbalance < 1:
        raise ValueError(f'imbalance must be >= 1, got {job.imbalance}')
    names = toy_classes('cls', job.num_classes)
    counts = long_tailed_counts(job.num_classes, job.max_per_class,
                                job.imbalance)
    train = [(f'class_{label:03d}/{label:03d}_{i:05d}.jpg', label)
             for label, count in enumerate(counts) for i in range(count)]
    val_rng = split_rng(job.seed, 'cls', 'val')
    val_labels = val_rng.permutation(
        np.repeat(np.arange(job.num_classes), job.num_val_per_class))
    val = [(f'val_{i:05d}.jpg', int(label))
           for i, label in enumerate(val_labels)]
    written = []
    for split, items, rng in (('train', train,
                               split_rng(job.seed, 'cls',
                                         'train')), ('val', val, val_rng)):
        for done, (rel, label) in enumerate(items, 1):
            write_image(
                osp.join(job.out_dir, split, rel),
                render_classification_image(rng, label, width, height))
            written.append(osp.join(split, rel))
            if progress is not None:
                progress(split, done, len(items))
        meta = osp.join('meta', f'{split}.txt')
        write_lines(
            osp.join(job.out_dir, meta),
            [f'{rel} {label}' for rel, label in items])
        written.append(meta)
    write_lines(osp.join(job.out_dir, 'meta', 'classes.txt'), names)
    return written + [osp.join('meta', 'classes.txt')]


# ---------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------
_DETECTION_DEFAULTS = dict(
    num_train=16,
    num_val=8,
    image_size=(160, 128),
    num_classes=8,
    seed=0,
    max_instances=4)

#: Format name -> :class:`ToyFormat`; the layouts are those the stock
#: mmdet / mmpretrain dataset configs expect under their ``data_root``.
FORMATS: Dict[str, ToyFormat] = {
    fmt.name: fmt
    for fmt in (
        ToyFormat(
            name='coco',
            title='coco',
            defaults=_DETECTION_DEFAULTS,
            ann_files=('annotations/instances_train2017.json',
                       'annotations/instances_val2017.json'),
            image_record=_coco_image,
            categories=_coco_categories),
        ToyFormat(
            name='lvis',
            title='LVIS v1',
            defaults=dict(
                _DETECTION_DEFAULTS,
                num_train=24,
                num_classes=20,
                rare_max=None,
                common_max=None),
            ann_files=('annotations/lvis_v1_train.json',
                       'annotations/lvis_v1_val.json'),
            image_record=_lvis_image,
            categories=_lvis_categories,
            train_labels=_lvis_train_labels,
            prepare=_lvis_prepare,
            iscrowd=False),
        ToyFormat(
            name='v3det',
            title='v3det',
            defaults=dict(_DETECTION_DEFAULTS, with_segm=False),
            ann_files=('annotations/v3det_2023_v1_train.json',
                       'annotations/v3det_2023_v1_val.json'),
            image_record=_v3det_image,
            categories=_numbered_categories,
            extra_files=_v3det_label_file),
        ToyFormat(
            name='objects365',
            title='objects365',
            defaults=dict(_DETECTION_DEFAULTS, with_segm=False),
            ann_files=('annotations/zhiyuan_objv2_train.json',
                       'annotations/zhiyuan_objv2_val.json'),
            image_record=_objects365_image,
            categories=_numbered_categories),
        ToyFormat(
            name='cls',
            title='classification',
            defaults=dict(
                num_classes=10,
                imbalance=10,
                max_per_class=20,
                num_val_per_class=5,
                image_size=(32, 32),
                seed=0),
            writer=_write_classification),
    )
}

#: Names of the toy formats, the keys of :data:`FORMATS`.
TOY_FORMATS: Tuple[str, ...] = tuple(FORMATS)


def resolve_options(fmt: str, options: Mapping[str, Any]) -> Dict[str, Any]:
    """The full option set of a format: its defaults updated by ``options``.

    Args:
        fmt (str): One of :data:`TOY_FORMATS`.
        options (Mapping[str, Any]): Options given by the caller.

    Returns:
        dict: Every option of the format, JSON-friendly (tuples as lists).
    """
    if fmt not in FORMATS:
        raise ValueError(f'unknown toy format {fmt!r}, expected one of '
                         f'{TOY_FORMATS}')
    defaults = FORMATS[fmt].defaults
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise ValueError(f'{fmt}: unknown option(s) {unknown}; accepted: '
                         f'{sorted(defaults)}')
    resolved = dict(defaults, **options)
    if 'image_size' in resolved:
        resolved['image_size'] = [int(v) for v in resolved['image_size']]
    return resolved


def generate_toy_data(fmt: str,
                      out_dir: str,
                      progress: Optional[Progress] = None,
                      **options) -> str:
    """Write a toy dataset of format ``fmt`` under ``out_dir``.

    Everything is a function of the options (``seed`` included): two runs
    with the same options write byte-identical json/txt files and identical
    images. Existing files are overwritten; stale files of an earlier,
    larger run stay but are not referenced. :data:`MANIFEST` is written
    last, so a root without it is incomplete (see
    :func:`missing_files`).

    Args:
        fmt (str): One of :data:`TOY_FORMATS`.
        out_dir (str): Dataset root to write, e.g. ``'data/toy_lvis'``.
        progress (Callable, optional): ``progress(split, done, total)``,
            called after each written image.
        **options: Options of the format, see ``FORMATS[fmt].defaults``:
            ``num_train``, ``num_val`` (images per split), ``image_size``
            (``(width, height)``), ``num_classes``, ``seed``,
            ``max_instances`` (most shapes per image), ``with_segm``
            (polygons; V3Det and Objects365 only), ``rare_max`` /
            ``common_max`` (LVIS frequency thresholds, default from
            :func:`lvis_frequency_thresholds`); classification:
            ``num_classes``, ``imbalance``, ``max_per_class``,
            ``num_val_per_class``, ``image_size``, ``seed``.

    Returns:
        str: ``out_dir``.
    """
    resolved = resolve_options(fmt, options)
    spec = FORMATS[fmt]
    job = _Job(spec, str(out_dir), resolved)
    manifest = osp.join(job.out_dir, MANIFEST)
    if osp.exists(manifest):
        os.remove(manifest)  # incomplete until this run has finished
    writer = spec.writer or _write_detection
    files = writer(job, progress)
    with open(manifest, 'w', encoding='utf-8') as f:
        json.dump(
            dict(format=fmt, options=resolved, files=sorted(files)),
            f,
            indent=1)
        f.write('\n')
    return job.out_dir


def missing_files(out_dir: str, fmt: str, **options) -> List[str]:
    """What keeps ``out_dir`` from being the set these options generate.

    Args:
        out_dir (str): Dataset root.
        fmt (str): One of :data:`TOY_FORMATS`.
        **options: Options as for :func:`generate_toy_data`.

    Returns:
        list[str]: One line per problem (no manifest, other options, a
        missing file); empty when the root is complete.
    """
    resolved = resolve_options(fmt, options)
    path = osp.join(out_dir, MANIFEST)
    if not osp.isfile(path):
        return [f'{path} (written last; generation did not finish)']
    try:
        with open(path, encoding='utf-8') as f:
            manifest = json.load(f)
        files = list(manifest['files'])
        wrote = (manifest['format'], manifest['options'])
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [f'{path} is unreadable ({e})']
    if wrote != (fmt, resolved):
        return [
            f'{path} records format {wrote[0]!r} with options '
            f'{wrote[1]}, not {fmt!r} with {resolved}'
        ]
    return [
        osp.join(out_dir, rel) for rel in files
        if not osp.isfile(osp.join(out_dir, rel))
    ]
