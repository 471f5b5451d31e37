"""Which categories each toy image shows (label layouts).

Detection sets cover every category in every split when there are enough
instances; the LVIS set's training split is long-tailed instead, with
LVIS's rare / common / frequent rule scaled to the set size. The long-tailed
classification set has an exponential class-size profile.
"""
from typing import List, Sequence, Tuple

import numpy as np

__all__ = [
    'covering_labels', 'with_extra_instances', 'lvis_frequency_thresholds',
    'lvis_frequency', 'lvis_long_tail_labels'
]


def covering_labels(rng: np.random.Generator, num_images: int,
                    num_classes: int, max_instances: int) -> List[List[int]]:
    """Per-image label lists with 1..max_instances distinct labels each.

    Labels are uniform, except that all classes are used once before any is
    repeated, and images get more labels when needed for that: every class
    is present when ``num_images * max_instances >= num_classes``.

    Args:
        rng (np.random.Generator): Random source.
        num_images (int): Number of images.
        num_classes (int): Number of categories.
        max_instances (int): Most labels per image.

    Returns:
        list[list[int]]: Sorted 0-based labels of each image.
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
        order = sorted(
            range(num_images), key=lambda i: (len(images[i]), keys[i]))
        for i in order[:counts[label]]:
            images[i].append(label)
    return [sorted(labels) for labels in images]


def lvis_long_tail_labels(rng: np.random.Generator, num_train: int,
                          num_classes: int, rare_max: int, common_max: int,
                          max_instances: int) -> List[List[int]]:
    """Labels of the long-tailed LVIS training images.

    About 15% of the categories are frequent, 35% common and 50% rare, in
    random id order; each category is in exactly as many images as its
    drawn count, and images sometimes repeat a label.

    Args:
        rng (np.random.Generator): Random source.
        num_train (int): Number of training images.
        num_classes (int): Number of categories (at least 3).
        rare_max (int): Largest image count that is still rare.
        common_max (int): Largest image count that is still common.
        max_instances (int): Most instances per image.

    Returns:
        list[list[int]]: Sorted 0-based labels of each image.
    """
    counts = _lvis_target_counts(rng, num_train, num_classes, rare_max,
                                 common_max, max_instances)
    return with_extra_instances(rng, _assign_to_images(rng, counts, num_train),
                                max_instances)


def with_extra_instances(rng: np.random.Generator,
                         label_lists: List[List[int]],
                         max_instances: int) -> List[List[int]]:
    """Sometimes repeat a present label, up to ``max_instances`` in all.

    Args:
        rng (np.random.Generator): Random source.
        label_lists (list[list[int]]): Labels of each image.
        max_instances (int): Most instances per image.

    Returns:
        list[list[int]]: Sorted labels of each image, repeats included.
    """
    out = []
    for labels in label_lists:
        labels = list(labels)
        room = max_instances - len(labels)
        if room > 0 and rng.random() < 0.35:
            extra = int(rng.integers(1, room + 1))
            labels += [int(c) for c in rng.choice(labels, extra)]
        out.append(sorted(labels))
    return out
