"""Pixels and files of the toy datasets: shapes, images, writers.

Images show a plain noisy background with 1-4 filled shapes (ellipses,
rectangles, triangles, diamonds, hexagons, stars). Shape kind and colour are
a function of the category (:func:`category_appearance`), so a detector can
learn them. Annotations are exact: every instance's polygon is rasterised
with pycocotools and that very mask is painted into the image, the bbox is
the mask's extent and ``area`` is its pixel count. Shapes never overlap, so
no instance is occluded.
"""
import json
import math
import os
import os.path as osp
import zlib
from typing import List, Sequence, Tuple

import cv2
import numpy as np
import pycocotools.mask as mask_utils

__all__ = [
    'SHAPE_KINDS', 'category_appearance', 'render_instances',
    'render_classification_image', 'write_image', 'write_json', 'write_lines',
    'split_rng', 'check_image_size'
]

#: The shape kinds drawn; category ``k`` is drawn as ``SHAPE_KINDS[k % 6]``.
SHAPE_KINDS: Tuple[str, ...] = ('ellipse', 'rectangle', 'triangle', 'diamond',
                                'hexagon', 'star')

_JPEG_QUALITY = 95


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
            if all(x0 + w + 2 <= bx or bx + bw + 2 <= x0 or y0 + h +
                   2 <= by or by + bh + 2 <= y0 for bx, by, bw, bh in boxes):
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


def render_instances(rng: np.random.Generator, labels: Sequence[int],
                     width: int, height: int) -> Tuple[np.ndarray, List[dict]]:
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
    boxes = _place_boxes(rng, len(labels), width, height, max(8, short // 7),
                         max(10, int(short / 2.6)))
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


def write_image(path: str, img: np.ndarray) -> None:
    """Write an image, creating its folder (JPEG quality 95).

    Args:
        path (str): Output file; the extension picks the encoder.
        img (np.ndarray): uint8 BGR image.
    """
    os.makedirs(osp.dirname(path), exist_ok=True)
    ext = osp.splitext(path)[1].lower()
    params = [cv2.IMWRITE_JPEG_QUALITY, _JPEG_QUALITY
              ] if ext in ('.jpg', '.jpeg') else []
    if not cv2.imwrite(path, img, params):
        raise OSError(f'failed to write {path}')


def write_json(path: str, obj: dict) -> None:
    """Write compact json plus a newline, creating the folder.

    Args:
        path (str): Output file.
        obj (dict): json-serialisable content.
    """
    os.makedirs(osp.dirname(path), exist_ok=True)
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(obj, f, separators=(',', ':'))
        f.write('\n')


def write_lines(path: str, lines: Sequence[str]) -> None:
    """Write one line per item with Unix line ends, creating the folder.

    Args:
        path (str): Output file.
        lines (Sequence[str]): Lines without their line end.
    """
    os.makedirs(osp.dirname(path), exist_ok=True)
    with open(path, 'w', encoding='utf-8', newline='\n') as f:
        f.write(''.join(line + '\n' for line in lines))


def split_rng(seed: int, *tags: str) -> np.random.Generator:
    """Independent random stream for ``(seed, *tags)``, stable across runs.

    Args:
        seed (int): The user's seed.
        *tags (str): Names of the stream, e.g. ``('lvis', 'train')``.

    Returns:
        np.random.Generator: The stream.
    """
    words = [int(seed)] + [zlib.crc32(t.encode()) for t in tags]
    return np.random.default_rng(words)


def check_image_size(image_size: Sequence[int],
                     minimum: int) -> Tuple[int, int]:
    """Validate ``image_size`` and return it as ``(width, height)``.

    Args:
        image_size (Sequence[int]): ``(width, height)``.
        minimum (int): Smallest accepted side.

    Returns:
        tuple[int, int]: ``(width, height)``.
    """
    width, height = (int(v) for v in image_size)
    if width < minimum or height < minimum:
        raise ValueError(f'image_size must be at least {minimum}x{minimum}, '
                         f'got {width}x{height}')
    return width, height


def render_classification_image(rng: np.random.Generator, label: int,
                                width: int, height: int) -> np.ndarray:
    """One centred-ish shape of the class on a noisy background.

    Args:
        rng (np.random.Generator): Random source.
        label (int): 0-based class index.
        width (int): Image width.
        height (int): Image height.

    Returns:
        np.ndarray: uint8 BGR image.
    """
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
