"""Deterministic generator of small toy datasets in stock OpenMMLab layouts.

No real dataset can be downloaded where this project is tested, so every
test, smoke run and example config that needs data uses a tiny synthetic set
written by this module. Each generator writes a dataset root whose directory
layout and annotation file names are those the stock mmdet / mmpretrain
configs expect, so a config only has to swap ``data_root``:

===============  =============================================================
format           layout under the returned root
===============  =============================================================
COCO             ``annotations/instances_{train,val}2017.json``,
                 ``{train,val}2017/<12-digit id>.jpg``
LVIS v1          ``annotations/lvis_v1_{train,val}.json``,
                 ``{train,val}2017/<12-digit id>.jpg`` (file names derived
                 from ``coco_url`` as ``LVISV1Dataset`` does)
V3Det            ``annotations/v3det_2023_v1_{train,val}.json``,
                 ``annotations/category_name_13204_v3det_2023_v1.txt``,
                 ``images/{train,val}/<12-digit id>.jpg``
Objects365 v2    ``annotations/zhiyuan_objv2_{train,val}.json``,
                 ``{train,val}/patch0/objects365_v2_<8-digit id>.jpg``
classification   ``meta/{train,val}.txt``, ``meta/classes.txt``,
                 ``train/class_<k>/<k>_<i>.jpg``, ``val/val_<i>.jpg``
===============  =============================================================

Images show a plain noisy background with 1-4 filled shapes (ellipses,
rectangles, triangles, diamonds, hexagons, stars). Shape kind and colour are
a function of the category, so a detector can learn them. Annotations are
exact: every instance's polygon is rasterised with pycocotools and that very
mask is painted into the image, the bbox is the mask's extent and ``area`` is
its pixel count. Shapes never overlap, so no instance is occluded.

Everything is a function of the arguments and the seed: two runs with the
same arguments write byte-identical json/txt files and identical images.
Existing files are overwritten, stale files from an earlier, larger run are
left in place (they are not referenced by the new annotation files).
"""
import ast
import importlib.util
import json
import math
import os
import os.path as osp
import zlib
from functools import lru_cache
from typing import Dict, List, Optional, Sequence, Tuple

import cv2
import numpy as np
import pycocotools.mask as mask_utils

__all__ = [
    'generate_coco', 'generate_lvis', 'generate_v3det', 'generate_objects365',
    'generate_classification', 'toy_classes', 'lvis_frequency',
    'lvis_frequency_thresholds', 'category_appearance', 'COCO_CATEGORY_IDS',
    'V3DET_TOY_CLASSES', 'SHAPE_KINDS', 'TOY_FORMATS'
]

#: COCO's category ids, in the order of mmdet's ``CocoDataset`` classes.
COCO_CATEGORY_IDS: Tuple[int, ...] = (
    *range(1, 12), *range(13, 26), 27, 28, *range(31, 45), *range(46, 66), 67,
    70, *range(72, 83), *range(84, 91))

# COCO supercategories, run-length encoded in class order (80 classes).
_COCO_SUPERCATEGORY_RUNS = (('person', 1), ('vehicle', 8), ('outdoor', 5),
                            ('animal', 10), ('accessory', 5), ('sports', 10),
                            ('kitchen', 7), ('food', 10), ('furniture', 6),
                            ('electronic', 6), ('appliance', 5),
                            ('indoor', 7))

#: Category names for the V3Det-style set. mmdet's ``V3DetDataset`` has no
#: built-in class list (it reads the names from the label file), so these
#: are everyday object names of the kind V3Det uses.
V3DET_TOY_CLASSES: Tuple[str, ...] = (
    'Abacus', 'Accordion', 'Acorn', 'Airship', 'Alarm clock', 'Anchor',
    'Armadillo', 'Avocado', 'Backgammon', 'Bagpipe', 'Balalaika', 'Banjo',
    'Barometer', 'Bassoon', 'Beehive', 'Bellows', 'Binoculars', 'Birdhouse',
    'Blowtorch', 'Boomerang', 'Bow tie', 'Buoy', 'Cactus', 'Calliper',
    'Candelabrum', 'Canoe', 'Carousel', 'Castanets', 'Cello', 'Chandelier',
    'Chessboard', 'Cider press')

#: The shape kinds drawn; category ``k`` is drawn as ``SHAPE_KINDS[k % 6]``.
SHAPE_KINDS: Tuple[str, ...] = ('ellipse', 'rectangle', 'triangle', 'diamond',
                                'hexagon', 'star')

#: Formats of :func:`toy_classes` and `tools/misc/generate_toy_data.py`.
TOY_FORMATS: Tuple[str, ...] = ('coco', 'lvis', 'v3det', 'objects365', 'cls')

_JPEG_QUALITY = 95
_LVIS_URL = 'http://images.cocodataset.org/'


# ---------------------------------------------------------------------------
# class names
# ---------------------------------------------------------------------------
def _literal_from_source(package: str, relpath: str, name: str,
                         owner: Optional[str] = None):
    """Read a literal assignment from an installed package's source.

    Parsing the source instead of importing keeps the generator fast: the
    stock dataset modules pull in torch and mmcv when imported.

    Args:
        package (str): Top-level package, e.g. ``'mmdet'``.
        relpath (str): Module file relative to the package directory.
        name (str): Name assigned to, e.g. ``'METAINFO'``.
        owner (str, optional): Class whose body holds the assignment; module
            level when None.

    Returns:
        The evaluated literal.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ImportError(f'{package} is not installed')
    path = osp.join(osp.dirname(spec.origin), relpath)
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read(), filename=path)
    bodies = [tree.body]
    if owner is not None:
        bodies = [
            node.body for node in tree.body
            if isinstance(node, ast.ClassDef) and node.name == owner
        ]
    for body in bodies:
        for stmt in body:
            if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name)
                    and stmt.targets[0].id == name):
                return ast.literal_eval(stmt.value)
    raise LookupError(f'{owner or "module"}.{name} not found in {path}')


@lru_cache(maxsize=None)
def _all_classes(kind: str) -> Tuple[str, ...]:
    """All class names of a stock dataset, in the stock order."""
    if kind == 'coco':
        meta = _literal_from_source('mmdet', 'datasets/coco.py', 'METAINFO',
                                    'CocoDataset')
        return tuple(meta['classes'])
    if kind == 'lvis':
        meta = _literal_from_source('mmdet', 'datasets/lvis.py', 'METAINFO',
                                    'LVISV1Dataset')
        return tuple(meta['classes'])
    if kind == 'objects365':
        meta = _literal_from_source('mmdet', 'datasets/objects365.py',
                                    'METAINFO', 'Objects365V2Dataset')
        return tuple(meta['classes'])
    if kind == 'v3det':
        return V3DET_TOY_CLASSES
    if kind == 'cls':
        return tuple(
            _literal_from_source('mmpretrain', 'datasets/categories.py',
                                 'IMAGENET_CATEGORIES'))
    raise ValueError(f'unknown toy format {kind!r}, expected one of '
                     f'{TOY_FORMATS}')


def toy_classes(kind: str, num_classes: int) -> Tuple[str, ...]:
    """Class names a toy dataset of the given format uses.

    They are the first ``num_classes`` classes of the stock dataset class
    (mmdet ``CocoDataset``, ``LVISV1Dataset``, ``Objects365V2Dataset``,
    mmpretrain ``ImageNet``), so stock datasets and metrics map labels to
    the right names; for V3Det, :data:`V3DET_TOY_CLASSES`. Label ``i`` of a
    stock dataset built on the toy files is ``toy_classes(kind, K)[i]``.

    Args:
        kind (str): One of :data:`TOY_FORMATS`.
        num_classes (int): Number of classes K.

    Returns:
        tuple[str]: K class names.
    """
    names = _all_classes(kind)
    if not 1 <= num_classes <= len(names):
        raise ValueError(f'{kind}: num_classes must be in [1, {len(names)}], '
                         f'got {num_classes}')
    return names[:num_classes]


def _coco_supercategories() -> List[str]:
    out: List[str] = []
    for name, count in _COCO_SUPERCATEGORY_RUNS:
        out.extend([name] * count)
    return out


# ---------------------------------------------------------------------------
# appearance and rendering
# ---------------------------------------------------------------------------
def category_appearance(index: int) -> Tuple[str, Tuple[int, int, int]]:
    """Shape kind and BGR colour of the category with 0-based ``index``.

    Hues are spread by the golden ratio; saturation and value change every
    six categories, and the shape kind cycles through :data:`SHAPE_KINDS`,
    so neighbouring categories differ in both shape and colour.

    Args:
        index (int): 0-based category index (the label).

    Returns:
        tuple: ``(shape_kind, (b, g, r))``.
    """
    kind = SHAPE_KINDS[index % len(SHAPE_KINDS)]
    hue = (index * 0.61803398875) % 1.0
    sat = (1.0, 0.65)[(index // len(SHAPE_KINDS)) % 2]
    val = (0.95, 0.7, 0.45)[(index // (2 * len(SHAPE_KINDS))) % 3]
    hsv = np.array([[[hue * 180.0, sat * 255.0, val * 255.0]]],
                   dtype=np.float32)
    bgr = cv2.cvtColor(hsv.astype(np.uint8), cv2.COLOR_HSV2BGR)[0, 0]
    return kind, (int(bgr[0]), int(bgr[1]), int(bgr[2]))


def _shape_polygon(kind: str, x0: float, y0: float, w: float, h: float,
                   angle: float) -> List[float]:
    """Outline of a shape inscribed in the box ``(x0, y0, w, h)``.

    Returns a flat ``[x1, y1, x2, y2, ...]`` list rounded to 2 decimals.
    Rotated outlines are rescaled to stay inside the box.
    """
    if kind == 'rectangle':
        pts = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], np.float64)
        angle = 0.0
    elif kind == 'ellipse':
        t = np.linspace(0, 2 * np.pi, 32, endpoint=False)
        pts = np.stack([np.cos(t), np.sin(t)], axis=1)
    elif kind == 'triangle':
        t = -np.pi / 2 + np.arange(3) * 2 * np.pi / 3
        pts = np.stack([np.cos(t), np.sin(t)], axis=1)
    elif kind == 'diamond':
        pts = np.array([[0, -1], [1, 0], [0, 1], [-1, 0]], np.float64)
    elif kind == 'hexagon':
        t = np.arange(6) * np.pi / 3
        pts = np.stack([np.cos(t), np.sin(t)], axis=1)
    elif kind == 'star':
        t = -np.pi / 2 + np.arange(10) * np.pi / 5
        r = np.where(np.arange(10) % 2 == 0, 1.0, 0.45)
        pts = np.stack([r * np.cos(t), r * np.sin(t)], axis=1)
    else:
        raise ValueError(f'unknown shape kind {kind!r}')
    if angle:
        c, s = math.cos(angle), math.sin(angle)
        pts = pts @ np.array([[c, s], [-s, c]])
    # normalise to [0, 1] x [0, 1] and place in the box
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    pts = (pts - lo) / (hi - lo)
    xs = x0 + pts[:, 0] * w
    ys = y0 + pts[:, 1] * h
    return [round(float(v), 2) for xy in zip(xs, ys) for v in xy]


def _polygon_mask(polygon: List[float], height: int, width: int) -> np.ndarray:
    """Rasterise one polygon exactly as pycocotools' ``annToMask`` does."""
    rles = mask_utils.frPyObjects([polygon], height, width)
    return mask_utils.decode(mask_utils.merge(rles)).astype(bool)


def _mask_bbox(mask: np.ndarray) -> List[float]:
    """``[x, y, w, h]`` of the tight pixel extent of a non-empty mask."""
    ys = np.flatnonzero(mask.any(axis=1))
    xs = np.flatnonzero(mask.any(axis=0))
    return [
        float(xs[0]),
        float(ys[0]),
        float(xs[-1] - xs[0] + 1),
        float(ys[-1] - ys[0] + 1)
    ]


def _place_boxes(rng: np.random.Generator, n: int, width: int, height: int,
                 min_size: int, max_size: int) -> List[Tuple[int, ...]]:
    """Sample ``n`` pairwise separated boxes ``(x0, y0, w, h)`` in the image.

    Boxes keep a 1 px border to the image edge and 2 px to each other, so the
    shapes drawn in them are neither clipped nor occluded.
    """
    boxes: List[Tuple[int, ...]] = []
    for _ in range(n):
        scale = 1.0
        for attempt in range(400):
            if attempt and attempt % 50 == 0:
                scale *= 0.8
            size = max(4.0, rng.uniform(min_size, max_size) * scale)
            aspect = math.exp(rng.uniform(-0.35, 0.35))
            w = int(min(width - 2, max(4, round(size * aspect))))
            h = int(min(height - 2, max(4, round(size / aspect))))
            x0 = int(rng.integers(1, width - w))
            y0 = int(rng.integers(1, height - h))
            if all(x0 + w + 2 <= bx or bx + bw + 2 <= x0 or y0 + h + 2 <= by
                   or by + bh + 2 <= y0 for bx, by, bw, bh in boxes):
                boxes.append((x0, y0, w, h))
                break
        else:
            raise RuntimeError(f'could not place {n} shapes in a '
                               f'{width}x{height} image')
    return boxes


def _background(rng: np.random.Generator, width: int,
                height: int) -> np.ndarray:
    """Low-saturation noisy background with a gentle gradient (float32)."""
    base = rng.uniform(70, 180)
    tint = rng.uniform(-12, 12, size=3)
    gx = np.linspace(-1, 1, width, dtype=np.float32)[None, :, None]
    gy = np.linspace(-1, 1, height, dtype=np.float32)[:, None, None]
    grad = gx * rng.uniform(-15, 15) + gy * rng.uniform(-15, 15)
    noise = rng.normal(0, 10, size=(height, width, 3))
    return (base + tint + grad + noise).astype(np.float32)


def _render(rng: np.random.Generator, labels: Sequence[int], width: int,
            height: int) -> Tuple[np.ndarray, List[dict]]:
    """Draw one image with one shape per label.

    Args:
        rng (np.random.Generator): Random source.
        labels (Sequence[int]): 0-based category index of each instance.
        width (int): Image width.
        height (int): Image height.

    Returns:
        tuple: the uint8 BGR image and, per instance, a dict with
        ``label``, ``segmentation`` (one polygon), ``bbox`` (xywh, the mask
        extent) and ``area`` (mask pixel count).
    """
    img = _background(rng, width, height)
    short = min(width, height)
    boxes = _place_boxes(rng, len(labels), width, height,
                         max(8, short // 7), max(10, int(short / 2.6)))
    instances = []
    for label, (x0, y0, w, h) in zip(labels, boxes):
        kind, colour = category_appearance(int(label))
        angle = float(rng.uniform(-0.3, 0.3))
        polygon = _shape_polygon(kind, x0, y0, w, h, angle)
        mask = _polygon_mask(polygon, height, width)
        if not mask.any():  # cannot happen for >= 4 px boxes; be explicit
            raise RuntimeError('empty toy mask')
        shade = rng.normal(0, 6, size=(int(mask.sum()), 3))
        img[mask] = np.asarray(colour, np.float32) + shade
        instances.append(
            dict(
                label=int(label),
                segmentation=[polygon],
                bbox=_mask_bbox(mask),
                area=float(mask.sum())))
    return np.clip(np.rint(img), 0, 255).astype(np.uint8), instances


def _write_image(path: str, img: np.ndarray) -> None:
    os.makedirs(osp.dirname(path), exist_ok=True)
    ext = osp.splitext(path)[1].lower()
    params = [cv2.IMWRITE_JPEG_QUALITY, _JPEG_QUALITY] if ext in (
        '.jpg', '.jpeg') else []
    if not cv2.imwrite(path, img, params):
        raise OSError(f'failed to write {path}')


def _write_json(path: str, obj: dict) -> None:
    os.makedirs(osp.dirname(path), exist_ok=True)
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(obj, f, separators=(',', ':'))
        f.write('\n')


def _write_lines(path: str, lines: Sequence[str]) -> None:
    os.makedirs(osp.dirname(path), exist_ok=True)
    with open(path, 'w', encoding='utf-8', newline='\n') as f:
        f.write(''.join(line + '\n' for line in lines))


def _rng(seed: int, *tags: str) -> np.random.Generator:
    """Independent stream for (seed, tags), stable across runs."""
    words = [int(seed)] + [zlib.crc32(t.encode()) for t in tags]
    return np.random.default_rng(words)


def _check_size(image_size: Sequence[int], minimum: int) -> Tuple[int, int]:
    width, height = (int(v) for v in image_size)
    if width < minimum or height < minimum:
        raise ValueError(f'image_size must be at least {minimum}x{minimum}, '
                         f'got {width}x{height}')
    return width, height


# ---------------------------------------------------------------------------
# label layouts
# ---------------------------------------------------------------------------
def _covering_labels(rng: np.random.Generator, num_images: int,
                     num_classes: int, max_instances: int) -> List[List[int]]:
    """Per-image label lists with 1..max_instances distinct labels each.

    Labels are uniform, except that all classes are used once before any is
    repeated, and images get more labels when needed for that: every class
    is present when ``num_images * max_instances >= num_classes``.
    """
    counts = rng.integers(1, max_instances + 1, size=num_images)
    need = min(num_classes, num_images * max_instances)
    while num_images and counts.sum() < need:
        counts[int(np.argmin(counts))] += 1
    queue = list(rng.permutation(num_classes))
    out = []
    for n in counts:
        n = min(int(n), num_classes)
        labels: List[int] = []
        while queue and len(labels) < n:
            labels.append(int(queue.pop(0)))
        if len(labels) < n:
            rest = [c for c in range(num_classes) if c not in labels]
            labels += [
                int(c) for c in rng.choice(rest, n - len(labels), False)
            ]
        out.append(sorted(labels))
    return out


def lvis_frequency_thresholds(num_train: int,
                              num_classes: int = 20) -> Tuple[int, int]:
    """Image-count thresholds of the toy LVIS frequency groups.

    LVIS labels a category rare with 1-10 training images, common with
    11-100 and frequent with more (out of ~100k images). The toy set keeps
    the rule but scales the thresholds to its size. With
    ``mean = 3 * num_train / num_classes`` (the image count per category if
    every image held three categories spread evenly), a category is rare up
    to ``max(1, round(0.6 * mean))`` images, common up to
    ``max(rare_max + 1, round(2 * mean))`` (at most ``num_train - 1``) and
    frequent above.

    Args:
        num_train (int): Number of training images (at least 3).
        num_classes (int): Number of categories.

    Returns:
        tuple[int, int]: ``(rare_max, common_max)``.
    """
    if num_train < 3:
        raise ValueError('the toy LVIS set needs num_train >= 3')
    mean = 3 * num_train / num_classes
    common_max = min(num_train - 1, max(2, round(2 * mean)))
    rare_max = min(common_max - 1, max(1, round(0.6 * mean)))
    return rare_max, common_max


def lvis_frequency(image_count: int, rare_max: int, common_max: int) -> str:
    """LVIS frequency group ('r', 'c' or 'f') of a category.

    Args:
        image_count (int): Number of training images with the category.
        rare_max (int): Largest image count that is still rare.
        common_max (int): Largest image count that is still common.

    Returns:
        str: ``'r'`` if ``image_count <= rare_max``, ``'c'`` if
        ``image_count <= common_max``, else ``'f'``.
    """
    if image_count <= rare_max:
        return 'r'
    if image_count <= common_max:
        return 'c'
    return 'f'


def _lvis_target_counts(rng: np.random.Generator, num_train: int,
                        num_classes: int, rare_max: int, common_max: int,
                        max_instances: int) -> List[int]:
    """Long-tailed per-category training image counts (index = label)."""
    if num_classes < 3:
        raise ValueError('LVIS toy set needs num_classes >= 3')
    if num_train <= common_max:
        raise ValueError(f'num_train={num_train} leaves no room for frequent '
                         f'categories (common_max={common_max})')
    n_f = max(1, round(0.15 * num_classes))
    n_r = max(1, round(0.5 * num_classes))
    n_c = num_classes - n_f - n_r
    if n_c < 1:
        n_r -= 1
        n_c = 1
    f_hi = max(common_max + 1, round(num_train / 2))
    lows = [common_max + 1] * n_f + [rare_max + 1] * n_c + [1] * n_r
    highs = [
        float(v) for v in (*np.linspace(f_hi, common_max + 1, n_f),
                           *np.linspace(common_max, rare_max + 1, n_c),
                           *np.linspace(rare_max, 1, n_r))
    ]
    capacity = num_train * max_instances
    # Many categories on few images: squeeze every group towards its lower
    # bound (which keeps its frequency) until the pairs fit in the images.
    for step in range(100, -1, -1):
        counts = [
            int(round(lo + (hi - lo) * step / 100))
            for lo, hi in zip(lows, highs)
        ]
        if sum(counts) <= capacity:
            break
    else:
        raise ValueError(f'{num_classes} long-tailed categories need at '
                         f'least {sum(counts)} category-image pairs but '
                         f'{num_train} images hold at most {capacity}; '
                         'raise num_train or lower num_classes')
    # every image needs one category: top frequent categories up if short
    i = 0
    while sum(counts) < num_train:
        if counts[i % n_f] < num_train:
            counts[i % n_f] += 1
        i += 1
    # frequency is independent of the category id, as in LVIS
    order = rng.permutation(num_classes)
    out = [0] * num_classes
    for count, label in zip(counts, order):
        out[int(label)] = count
    return out


def _assign_to_images(rng: np.random.Generator, counts: Sequence[int],
                      num_images: int) -> List[List[int]]:
    """Put label ``k`` into exactly ``counts[k]`` distinct images.

    Images are filled least-loaded first (random tie break), so loads stay
    within one of each other and every image gets a label when
    ``sum(counts) >= num_images``.
    """
    images: List[List[int]] = [[] for _ in range(num_images)]
    for label in sorted(range(len(counts)), key=lambda k: -counts[k]):
        keys = rng.random(num_images)
        order = sorted(range(num_images),
                       key=lambda i: (len(images[i]), keys[i]))
        for i in order[:counts[label]]:
            images[i].append(label)
    return [sorted(labels) for labels in images]


# ---------------------------------------------------------------------------
# detection writers
# ---------------------------------------------------------------------------
def _render_split(rng: np.random.Generator, label_lists: List[List[int]],
                  width: int, height: int, image_paths: List[str],
                  first_ann_id: int, image_ids: List[int],
                  label_to_cat: Sequence[int],
                  with_segm: bool) -> List[dict]:
    """Render and write the images of one split; return COCO annotations."""
    annotations = []
    ann_id = first_ann_id
    for labels, path, image_id in zip(label_lists, image_paths, image_ids):
        img, instances = _render(rng, labels, width, height)
        _write_image(path, img)
        for inst in instances:
            ann = dict(
                id=ann_id,
                image_id=image_id,
                category_id=label_to_cat[inst['label']],
                bbox=inst['bbox'],
                area=inst['area'],
                iscrowd=0)
            if with_segm:
                ann['segmentation'] = inst['segmentation']
            annotations.append(ann)
            ann_id += 1
    return annotations


def _with_extra_instances(rng: np.random.Generator,
                          label_lists: List[List[int]],
                          max_instances: int) -> List[List[int]]:
    """Sometimes repeat a present label, up to ``max_instances`` in all."""
    out = []
    for labels in label_lists:
        labels = list(labels)
        room = max_instances - len(labels)
        if room > 0 and rng.random() < 0.35:
            extra = int(rng.integers(1, room + 1))
            labels += [int(c) for c in rng.choice(labels, extra)]
        out.append(sorted(labels))
    return out


def _coco_like(out_dir: str, kind: str, ann_names: Tuple[str, str],
               image_path_fn, num_train: int, num_val: int,
               image_size: Sequence[int], num_classes: int, seed: int,
               max_instances: int, with_segm: bool,
               categories: List[dict]) -> Dict[str, dict]:
    """Shared writer of COCO-format sets (COCO, V3Det, Objects365).

    Returns:
        dict: split name -> written annotation dict.
    """
    width, height = _check_size(image_size, 32)
    label_to_cat = [c['id'] for c in categories]
    written = {}
    next_image_id, next_ann_id = 1, 1
    for split, num, ann_name in (('train', num_train, ann_names[0]),
                                 ('val', num_val, ann_names[1])):
        rng = _rng(seed, kind, split)
        label_lists = _with_extra_instances(
            rng, _covering_labels(rng, num, num_classes, max_instances),
            max_instances)
        image_ids = list(range(next_image_id, next_image_id + num))
        images = []
        paths = []
        for image_id in image_ids:
            file_name, rel_path = image_path_fn(split, image_id)
            paths.append(osp.join(out_dir, rel_path))
            images.append(
                dict(
                    id=image_id,
                    file_name=file_name,
                    height=height,
                    width=width,
                    license=1))
        annotations = _render_split(rng, label_lists, width, height, paths,
                                    next_ann_id, image_ids, label_to_cat,
                                    with_segm)
        data = dict(
            info=dict(
                description=f'mmact toy {kind} {split} set',
                version='1.0',
                year=2024,
                contributor='mmact.testing.toy_data',
                seed=seed),
            licenses=[dict(id=1, name='synthetic', url='')],
            images=images,
            annotations=annotations,
            categories=categories)
        _write_json(osp.join(out_dir, 'annotations', ann_name), data)
        written[split] = data
        next_image_id += num
        next_ann_id += len(annotations)
    return written


def generate_coco(out_dir: str,
                  num_train: int = 16,
                  num_val: int = 8,
                  image_size: Sequence[int] = (160, 128),
                  num_classes: int = 8,
                  seed: int = 0,
                  max_instances: int = 4) -> str:
    """Write a toy COCO instance-segmentation set.

    Layout (what ``configs/_base_/datasets/coco_instance.py`` expects)::

        out_dir/annotations/instances_train2017.json
        out_dir/annotations/instances_val2017.json
        out_dir/train2017/000000000001.jpg ...
        out_dir/val2017/000000000017.jpg ...

    Categories are the first ``num_classes`` COCO classes with COCO's ids
    and supercategories, so mmdet's 80-class ``CocoDataset`` and
    ``CocoMetric`` work unchanged (they only see the present categories;
    label ``i`` is ``toy_classes('coco', num_classes)[i]``). Every class
    appears in each split when there are enough instances.

    Args:
        out_dir (str): Dataset root to write, e.g. ``'data/toy_coco'``.
        num_train (int): Number of training images.
        num_val (int): Number of validation images.
        image_size (Sequence[int]): ``(width, height)``.
        num_classes (int): Number of categories (1-80).
        seed (int): Random seed.
        max_instances (int): Most shapes per image (at least 1 each).

    Returns:
        str: ``out_dir``.
    """
    names = toy_classes('coco', num_classes)
    supercats = _coco_supercategories()
    categories = [
        dict(supercategory=supercats[i], id=COCO_CATEGORY_IDS[i], name=name)
        for i, name in enumerate(names)
    ]

    def path_fn(split: str, image_id: int) -> Tuple[str, str]:
        name = f'{image_id:012d}.jpg'
        return name, osp.join(f'{split}2017', name)

    _coco_like(out_dir, 'coco',
               ('instances_train2017.json', 'instances_val2017.json'),
               path_fn, num_train, num_val, image_size, num_classes, seed,
               max_instances, True, categories)
    return out_dir


def generate_v3det(out_dir: str,
                   num_train: int = 16,
                   num_val: int = 8,
                   image_size: Sequence[int] = (160, 128),
                   num_classes: int = 8,
                   seed: int = 0,
                   max_instances: int = 4,
                   with_segm: bool = False) -> str:
    """Write a toy V3Det-style (COCO-format) detection set.

    Layout (what ``configs/_base_/datasets/v3det.py`` expects, with
    ``data_prefix=dict(img='')``)::

        out_dir/annotations/v3det_2023_v1_train.json
        out_dir/annotations/v3det_2023_v1_val.json
        out_dir/annotations/category_name_13204_v3det_2023_v1.txt
        out_dir/images/train/000000000001.jpg ...
        out_dir/images/val/000000000017.jpg ...

    ``V3DetDataset`` reads its classes from the label file, which here lists
    the ``num_classes`` toy classes (:data:`V3DET_TOY_CLASSES`), one per
    line, in label order. Like V3Det, annotations have boxes only unless
    ``with_segm``.

    Args:
        out_dir (str): Dataset root to write.
        num_train (int): Number of training images.
        num_val (int): Number of validation images.
        image_size (Sequence[int]): ``(width, height)``.
        num_classes (int): Number of categories.
        seed (int): Random seed.
        max_instances (int): Most shapes per image.
        with_segm (bool): Also write polygon segmentations.

    Returns:
        str: ``out_dir``.
    """
    names = toy_classes('v3det', num_classes)
    categories = [dict(id=i + 1, name=name) for i, name in enumerate(names)]

    def path_fn(split: str, image_id: int) -> Tuple[str, str]:
        rel = osp.join('images', split, f'{image_id:012d}.jpg')
        return rel, rel

    _coco_like(out_dir, 'v3det',
               ('v3det_2023_v1_train.json', 'v3det_2023_v1_val.json'),
               path_fn, num_train, num_val, image_size, num_classes, seed,
               max_instances, with_segm, categories)
    _write_lines(
        osp.join(out_dir, 'annotations',
                 'category_name_13204_v3det_2023_v1.txt'), names)
    return out_dir


def generate_objects365(out_dir: str,
                        num_train: int = 16,
                        num_val: int = 8,
                        image_size: Sequence[int] = (160, 128),
                        num_classes: int = 8,
                        seed: int = 0,
                        max_instances: int = 4,
                        with_segm: bool = False) -> str:
    """Write a toy Objects365 v2-style (COCO-format) detection set.

    Layout (what ``configs/_base_/datasets/objects365v2_detection.py``
    expects)::

        out_dir/annotations/zhiyuan_objv2_train.json
        out_dir/annotations/zhiyuan_objv2_val.json
        out_dir/train/patch0/objects365_v2_00000001.jpg ...
        out_dir/val/patch0/objects365_v2_00000017.jpg ...

    As in Objects365 v2, ``file_name`` is ``images/v2/patch0/<name>.jpg``;
    ``Objects365V2Dataset`` keeps only ``patch0/<name>.jpg`` and prefixes
    ``train/`` or ``val/``. Categories are the first ``num_classes`` of
    ``Objects365V2Dataset.METAINFO['classes']`` with ids 1..K. Boxes only
    unless ``with_segm``.

    Args:
        out_dir (str): Dataset root to write.
        num_train (int): Number of training images.
        num_val (int): Number of validation images.
        image_size (Sequence[int]): ``(width, height)``.
        num_classes (int): Number of categories (1-365).
        seed (int): Random seed.
        max_instances (int): Most shapes per image.
        with_segm (bool): Also write polygon segmentations.

    Returns:
        str: ``out_dir``.
    """
    names = toy_classes('objects365', num_classes)
    categories = [dict(id=i + 1, name=name) for i, name in enumerate(names)]

    def path_fn(split: str, image_id: int) -> Tuple[str, str]:
        name = f'objects365_v2_{image_id:08d}.jpg'
        return (f'images/v2/patch0/{name}', osp.join(split, 'patch0', name))

    _coco_like(out_dir, 'objects365',
               ('zhiyuan_objv2_train.json', 'zhiyuan_objv2_val.json'),
               path_fn, num_train, num_val, image_size, num_classes, seed,
               max_instances, with_segm, categories)
    return out_dir


def generate_lvis(out_dir: str,
                  num_train: int = 24,
                  num_val: int = 8,
                  image_size: Sequence[int] = (160, 128),
                  num_classes: int = 20,
                  seed: int = 0,
                  max_instances: int = 4,
                  rare_max: Optional[int] = None,
                  common_max: Optional[int] = None) -> str:
    """Write a toy long-tailed LVIS v1 instance-segmentation set.

    Layout (what ``configs/_base_/datasets/lvis_v1_instance.py`` expects,
    with ``data_prefix=dict(img='')``)::

        out_dir/annotations/lvis_v1_train.json
        out_dir/annotations/lvis_v1_val.json
        out_dir/train2017/000000000001.jpg ...
        out_dir/val2017/000000000025.jpg ...

    Images carry ``coco_url`` (``http://images.cocodataset.org/train2017/
    000000000001.jpg``), from which ``LVISV1Dataset`` derives the file name,
    plus ``neg_category_ids`` and ``not_exhaustive_category_ids``.
    Categories are the first ``num_classes`` LVIS v1 classes with ids 1..K
    and carry ``synset``, ``synonyms``, ``def``, ``image_count``,
    ``instance_count`` and ``frequency``. Training image counts are
    long-tailed: about 15% of the categories are frequent, 35% common and
    50% rare, in random id order; ``frequency`` follows LVIS's rule
    (:func:`lvis_frequency`) applied to the generated training image counts
    with thresholds scaled to the set size
    (:func:`lvis_frequency_thresholds`). Both files hold the same category
    list with the training statistics, as in LVIS. The val split covers
    every category when it has enough instances. The thresholds are also
    stored in ``info['frequency_thresholds']``.

    Args:
        out_dir (str): Dataset root to write, e.g. ``'data/toy_lvis'``.
        num_train (int): Number of training images.
        num_val (int): Number of validation images.
        image_size (Sequence[int]): ``(width, height)``.
        num_classes (int): Number of categories (3-1203).
        seed (int): Random seed.
        max_instances (int): Most shapes per image.
        rare_max (int, optional): Largest rare image count; default from
            :func:`lvis_frequency_thresholds`.
        common_max (int, optional): Largest common image count; default
            from :func:`lvis_frequency_thresholds`.

    Returns:
        str: ``out_dir``.
    """
    width, height = _check_size(image_size, 32)
    names = toy_classes('lvis', num_classes)
    d_rare, d_common = lvis_frequency_thresholds(num_train, num_classes)
    rare_max = d_rare if rare_max is None else int(rare_max)
    common_max = d_common if common_max is None else int(common_max)
    if not 1 <= rare_max < common_max:
        raise ValueError('need 1 <= rare_max < common_max')
    cat_ids = list(range(1, num_classes + 1))

    rng = _rng(seed, 'lvis', 'train')
    counts = _lvis_target_counts(rng, num_train, num_classes, rare_max,
                                 common_max, max_instances)
    train_labels = _with_extra_instances(
        rng, _assign_to_images(rng, counts, num_train), max_instances)
    val_rng = _rng(seed, 'lvis', 'val')
    val_labels = _with_extra_instances(
        val_rng,
        _covering_labels(val_rng, num_val, num_classes, max_instances),
        max_instances)

    image_counts = [0] * num_classes
    instance_counts = [0] * num_classes
    for labels in train_labels:
        for label in set(labels):
            image_counts[label] += 1
        for label in labels:
            instance_counts[label] += 1
    assert image_counts == counts
    categories = []
    for i, name in enumerate(names):
        categories.append(
            dict(
                id=cat_ids[i],
                name=name,
                synset=f'{name}.n.01',
                synonyms=[name],
                frequency=lvis_frequency(image_counts[i], rare_max,
                                         common_max),
                image_count=image_counts[i],
                instance_count=instance_counts[i],
                **{'def': f'toy category {i}: a {category_appearance(i)[0]}'}))

    next_image_id, next_ann_id = 1, 1
    for split, labels_list, split_rng in (('train', train_labels, rng),
                                          ('val', val_labels, val_rng)):
        num = len(labels_list)
        image_ids = list(range(next_image_id, next_image_id + num))
        images, paths = [], []
        for image_id, labels in zip(image_ids, labels_list):
            rel = f'{split}2017/{image_id:012d}.jpg'
            paths.append(osp.join(out_dir, rel))
            present = set(labels)
            absent = [c for c in range(num_classes) if c not in present]
            n_neg = min(len(absent), int(split_rng.integers(0, 4)))
            neg = sorted(
                int(c) for c in split_rng.choice(absent, n_neg, False))
            not_exhaustive = []
            if split_rng.random() < 0.15:
                not_exhaustive = [int(split_rng.choice(sorted(present)))]
            images.append(
                dict(
                    id=image_id,
                    license=1,
                    height=height,
                    width=width,
                    coco_url=_LVIS_URL + rel,
                    flickr_url='',
                    date_captured='2013-11-14 00:00:00',
                    neg_category_ids=[cat_ids[c] for c in neg],
                    not_exhaustive_category_ids=[
                        cat_ids[c] for c in not_exhaustive
                    ]))
        annotations = _render_split(split_rng, labels_list, width, height,
                                    paths, next_ann_id, image_ids, cat_ids,
                                    True)
        for ann in annotations:
            del ann['iscrowd']  # LVIS annotations have no iscrowd
        data = dict(
            info=dict(
                description=f'mmact toy LVIS v1 {split} set',
                version='1.0',
                year=2024,
                contributor='mmact.testing.toy_data',
                seed=seed,
                frequency_thresholds=dict(
                    rare_max=rare_max, common_max=common_max)),
            licenses=[dict(id=1, name='synthetic', url='')],
            images=images,
            annotations=annotations,
            categories=categories)
        _write_json(
            osp.join(out_dir, 'annotations', f'lvis_v1_{split}.json'), data)
        next_image_id += num
        next_ann_id += len(annotations)
    return out_dir


# ---------------------------------------------------------------------------
# classification
# ---------------------------------------------------------------------------
def _long_tail_counts(num_classes: int, imbalance: float,
                      max_per_class: int) -> List[int]:
    """Exponential long tail: ``max * imbalance ** (-k / (K - 1))``."""
    if num_classes == 1:
        return [max_per_class]
    return [
        max(1,
            int(round(max_per_class * imbalance**(-k / (num_classes - 1)))))
        for k in range(num_classes)
    ]


def _render_cls(rng: np.random.Generator, label: int, width: int,
                height: int) -> np.ndarray:
    """One centred-ish shape of the class on a noisy background."""
    img = _background(rng, width, height)
    kind, colour = category_appearance(label)
    short = min(width, height)
    size = rng.uniform(0.45, 0.8) * short
    aspect = math.exp(rng.uniform(-0.25, 0.25))
    w = max(4.0, min(width - 2.0, size * aspect))
    h = max(4.0, min(height - 2.0, size / aspect))
    x0 = rng.uniform(1, width - 1 - w)
    y0 = rng.uniform(1, height - 1 - h)
    polygon = _shape_polygon(kind, x0, y0, w, h, float(rng.uniform(-.3, .3)))
    mask = _polygon_mask(polygon, height, width)
    img[mask] = np.asarray(colour, np.float32) + rng.normal(
        0, 6, size=(int(mask.sum()), 3))
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def generate_classification(out_dir: str,
                            num_classes: int = 10,
                            imbalance: float = 10,
                            max_per_class: int = 20,
                            num_val_per_class: int = 5,
                            image_size: Sequence[int] = (32, 32),
                            seed: int = 0) -> str:
    """Write a toy long-tailed image classification set (ImageNet layout).

    Layout (what mmpretrain's ``ImageNet``/``CustomDataset`` with
    ``data_root=out_dir, split='train'|'val'`` reads, as in
    ``configs/_base_/datasets/imagenet_bs32.py``)::

        out_dir/meta/train.txt    # "class_000/000_00000.jpg 0" per line
        out_dir/meta/val.txt      # "val_00000.jpg 3" per line
        out_dir/meta/classes.txt  # class names, one per line, label order
        out_dir/train/class_000/000_00000.jpg ...
        out_dir/val/val_00000.jpg ...

    Class ``k`` has ``round(max_per_class * imbalance ** (-k / (K - 1)))``
    (at least 1) training images, so class 0 is the head and class K-1 has
    ``max_per_class / imbalance``; val is balanced with
    ``num_val_per_class`` images per class. Class names are the first K
    ImageNet classes (mmpretrain ``IMAGENET_CATEGORIES``), so the stock
    ``ImageNet`` dataset names labels correctly; ``meta/classes.txt`` can be
    passed as ``classes=`` to ``CustomDataset``.

    Args:
        out_dir (str): Dataset root to write, e.g. ``'data/toy_cls'``.
        num_classes (int): Number of classes.
        imbalance (float): Ratio of the largest to the smallest class.
        max_per_class (int): Training images of the largest class.
        num_val_per_class (int): Validation images per class.
        image_size (Sequence[int]): ``(width, height)``.
        seed (int): Random seed.

    Returns:
        str: ``out_dir``.
    """
    width, height = _check_size(image_size, 8)
    if imbalance < 1:
        raise ValueError('imbalance must be >= 1')
    names = toy_classes('cls', num_classes)
    counts = _long_tail_counts(num_classes, float(imbalance), max_per_class)

    rng = _rng(seed, 'cls', 'train')
    train_lines = []
    for label, count in enumerate(counts):
        for i in range(count):
            rel = f'class_{label:03d}/{label:03d}_{i:05d}.jpg'
            _write_image(
                osp.join(out_dir, 'train', rel),
                _render_cls(rng, label, width, height))
            train_lines.append(f'{rel} {label}')

    rng = _rng(seed, 'cls', 'val')
    val_labels = [
        int(c) for c in rng.permutation(
            np.repeat(np.arange(num_classes), num_val_per_class))
    ]
    val_lines = []
    for i, label in enumerate(val_labels):
        rel = f'val_{i:05d}.jpg'
        _write_image(
            osp.join(out_dir, 'val', rel),
            _render_cls(rng, label, width, height))
        val_lines.append(f'{rel} {label}')

    _write_lines(osp.join(out_dir, 'meta', 'train.txt'), train_lines)
    _write_lines(osp.join(out_dir, 'meta', 'val.txt'), val_lines)
    _write_lines(osp.join(out_dir, 'meta', 'classes.txt'), names)
    return out_dir
