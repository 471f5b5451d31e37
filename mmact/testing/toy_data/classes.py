"""Class names and category ids of the toy datasets.

A toy set of format ``kind`` with K classes uses the first K classes of the
stock dataset class (mmdet ``CocoDataset``, ``LVISV1Dataset``,
``Objects365V2Dataset``, mmpretrain ``ImageNet``), so stock datasets and
metrics map labels to the right names. The names are read from the
installed packages' sources rather than imported: importing the dataset
modules pulls in torch and mmcv, which writing a few images does not need.
"""
import ast
import importlib.util
import os.path as osp
from functools import lru_cache
from typing import List, Optional, Tuple

__all__ = [
    'COCO_CATEGORY_IDS', 'V3DET_TOY_CLASSES', 'toy_classes',
    'coco_supercategories'
]

#: COCO's category ids, in the order of mmdet's ``CocoDataset`` classes.
COCO_CATEGORY_IDS: Tuple[int, ...] = (*range(1, 12), *range(13, 26), 27, 28,
                                      *range(31, 45), *range(46, 66), 67, 70,
                                      *range(72, 83), *range(84, 91))

# COCO supercategories, run-length encoded in class order (80 classes).
_COCO_SUPERCATEGORY_RUNS = (('person', 1), ('vehicle', 8), ('outdoor', 5),
                            ('animal', 10), ('accessory', 5), ('sports', 10),
                            ('kitchen', 7), ('food', 10), ('furniture', 6),
                            ('electronic', 6), ('appliance', 5), ('indoor', 7))

#: Category names for the V3Det-style set. mmdet's ``V3DetDataset`` has no
#: built-in class list (it reads the names from the label file), so these
#: are everyday object names of the kind V3Det uses.
V3DET_TOY_CLASSES: Tuple[str,
                         ...] = ('Abacus', 'Accordion', 'Acorn', 'Airship',
                                 'Alarm clock', 'Anchor', 'Armadillo',
                                 'Avocado', 'Backgammon', 'Bagpipe',
                                 'Balalaika', 'Banjo', 'Barometer', 'Bassoon',
                                 'Beehive', 'Bellows', 'Binoculars',
                                 'Birdhouse', 'Blowtorch', 'Boomerang',
                                 'Bow tie', 'Buoy', 'Cactus', 'Calliper',
                                 'Candelabrum', 'Canoe', 'Carousel',
                                 'Castanets', 'Cello', 'Chandelier',
                                 'Chessboard', 'Cider press')

# Format -> where its stock class list is assigned: (package, module file,
# owning class or None for module level, assigned name, key in the value).
_CLASS_SOURCES = {
    'coco':
    ('mmdet', 'datasets/coco.py', 'CocoDataset', 'METAINFO', 'classes'),
    'lvis':
    ('mmdet', 'datasets/lvis.py', 'LVISV1Dataset', 'METAINFO', 'classes'),
    'objects365': ('mmdet', 'datasets/objects365.py', 'Objects365V2Dataset',
                   'METAINFO', 'classes'),
    'cls': ('mmpretrain', 'datasets/categories.py', None,
            'IMAGENET_CATEGORIES', None),
}


def _literal_from_source(package: str, relpath: str, owner: Optional[str],
                         name: str):
    """Read a literal assignment from an installed package's source.

    Args:
        package (str): Top-level package, e.g. ``'mmdet'``.
        relpath (str): Module file relative to the package directory.
        owner (str, optional): Class whose body holds the assignment; module
            level when None.
        name (str): Name assigned to, e.g. ``'METAINFO'``.

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
    if kind == 'v3det':
        return V3DET_TOY_CLASSES
    if kind not in _CLASS_SOURCES:
        raise ValueError(f'unknown toy format {kind!r}, expected one of '
                         f'{tuple(sorted([*_CLASS_SOURCES, "v3det"]))}')
    package, relpath, owner, name, key = _CLASS_SOURCES[kind]
    value = _literal_from_source(package, relpath, owner, name)
    return tuple(value[key] if key else value)


def toy_classes(kind: str, num_classes: int) -> Tuple[str, ...]:
    """Class names a toy dataset of the given format uses.

    They are the first ``num_classes`` classes of the stock dataset class;
    for V3Det, :data:`V3DET_TOY_CLASSES`. Label ``i`` of a stock dataset
    built on the toy files is ``toy_classes(kind, K)[i]``.

    Args:
        kind (str): One of ``'coco'``, ``'lvis'``, ``'v3det'``,
            ``'objects365'``, ``'cls'``.
        num_classes (int): Number of classes K.

    Returns:
        tuple[str]: K class names.
    """
    names = _all_classes(kind)
    if not 1 <= num_classes <= len(names):
        raise ValueError(f'{kind}: num_classes must be in [1, {len(names)}], '
                         f'got {num_classes}')
    return names[:num_classes]


def coco_supercategories() -> List[str]:
    """COCO's supercategory of each of the 80 classes, in class order.

    Returns:
        list[str]: 80 supercategory names.
    """
    out: List[str] = []
    for name, count in _COCO_SUPERCATEGORY_RUNS:
        out.extend([name] * count)
    return out
