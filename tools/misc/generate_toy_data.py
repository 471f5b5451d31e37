"""Write the project's deterministic toy datasets.

Examples::

    python tools/misc/generate_toy_data.py                 # all formats
    python tools/misc/generate_toy_data.py coco lvis --out-dir data/
    python tools/misc/generate_toy_data.py lvis --num-train 48 --num-classes 30

Each format goes to ``<out-dir>/toy_<format>`` (``toy_coco``, ``toy_lvis``,
``toy_v3det``, ``toy_objects365``, ``toy_cls``) in the layout the stock
mmdet / mmpretrain configs expect; see ``mmact/testing/toy_data.py``.
"""
import argparse
import importlib.util
import os
import os.path as osp
import sys
import time
from types import ModuleType
from typing import List, Optional

FORMATS = ('coco', 'lvis', 'v3det', 'objects365', 'cls')


def load_toy_data() -> ModuleType:
    """Load ``mmact/testing/toy_data.py`` from this checkout.

    The module depends only on numpy, opencv and pycocotools, so it is
    loaded from its file: ``import mmact`` would also import torch and
    every model, which costs seconds and is not needed to write data.

    Returns:
        ModuleType: The ``toy_data`` module.
    """
    path = osp.join(
        osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))),
        'mmact', 'testing', 'toy_data.py')
    spec = importlib.util.spec_from_file_location('mmact_toy_data', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Parse command line arguments.

    Args:
        argv (list[str], optional): Arguments; ``sys.argv[1:]`` when None.

    Returns:
        argparse.Namespace: Parsed arguments.
    """
    parser = argparse.ArgumentParser(
        description='Generate deterministic toy datasets (COCO, LVIS v1, '
        'V3Det, Objects365 v2, long-tailed classification).')
    parser.add_argument(
        'formats',
        nargs='*',
        metavar='FORMAT',
        help=f'formats to write, any of {", ".join(FORMATS)} or all '
        '(default: all)')
    parser.add_argument(
        '--out-dir',
        default='data/',
        help='parent directory; each format goes to <out-dir>/toy_<format>')
    parser.add_argument(
        '--num-train',
        type=int,
        help='training images (detection) or images of the largest class '
        '(cls); default per format')
    parser.add_argument(
        '--num-val',
        type=int,
        help='validation images (detection) or validation images per '
        'class (cls); default per format')
    parser.add_argument(
        '--image-size',
        type=int,
        nargs=2,
        metavar=('WIDTH', 'HEIGHT'),
        help='image size; default 160 128 (detection), 32 32 (cls)')
    parser.add_argument(
        '--num-classes', type=int, help='number of classes; default per '
        'format (coco/v3det/objects365 8, lvis 20, cls 10)')
    parser.add_argument(
        '--imbalance',
        type=float,
        default=10.0,
        help='cls only: largest / smallest class size (default 10)')
    parser.add_argument('--seed', type=int, default=0, help='random seed')
    args = parser.parse_args(argv)
    unknown = set(args.formats) - set(FORMATS + ('all', ))
    if unknown:
        parser.error(f'unknown format(s) {sorted(unknown)}, choose from '
                     f'{FORMATS + ("all", )}')
    return args


def _describe(root: str) -> str:
    """Short summary of what lies under a written dataset root."""
    n_images = 0
    files = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            if name.endswith('.jpg'):
                n_images += 1
            else:
                files.append(osp.relpath(osp.join(dirpath, name), root))
    return f'{n_images} images; ' + ', '.join(sorted(files))


def main(argv: Optional[List[str]] = None) -> int:
    """Write the requested toy datasets and print what was written.

    Args:
        argv (list[str], optional): Arguments; ``sys.argv[1:]`` when None.

    Returns:
        int: Exit status.
    """
    args = parse_args(argv)
    toy = load_toy_data()
    formats = FORMATS if not args.formats or 'all' in args.formats else tuple(
        dict.fromkeys(args.formats))
    det = {
        'coco': toy.generate_coco,
        'lvis': toy.generate_lvis,
        'v3det': toy.generate_v3det,
        'objects365': toy.generate_objects365,
    }
    for fmt in formats:
        root = osp.join(args.out_dir, f'toy_{fmt}')
        kwargs = dict(seed=args.seed)
        if args.num_classes is not None:
            kwargs['num_classes'] = args.num_classes
        if args.image_size is not None:
            kwargs['image_size'] = tuple(args.image_size)
        start = time.perf_counter()
        if fmt == 'cls':
            if args.num_train is not None:
                kwargs['max_per_class'] = args.num_train
            if args.num_val is not None:
                kwargs['num_val_per_class'] = args.num_val
            toy.generate_classification(
                root, imbalance=args.imbalance, **kwargs)
        else:
            if args.num_train is not None:
                kwargs['num_train'] = args.num_train
            if args.num_val is not None:
                kwargs['num_val'] = args.num_val
            det[fmt](root, **kwargs)
        elapsed = time.perf_counter() - start
        print(f'{fmt}: wrote {root} in {elapsed:.2f}s ({_describe(root)})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
