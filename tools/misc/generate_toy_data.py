"""Write the project's deterministic toy datasets.

Examples::

    python tools/misc/generate_toy_data.py                 # all formats
    python tools/misc/generate_toy_data.py coco lvis --out-dir data/
    python tools/misc/generate_toy_data.py lvis --num-train 48 --num-classes 30
    python tools/misc/generate_toy_data.py lvis --skip-complete  # make demo

Each format goes to ``<out-dir>/toy_<format>`` (``toy_coco``, ``toy_lvis``,
``toy_v3det``, ``toy_objects365``, ``toy_cls``) in the layout the stock
mmdet / mmpretrain configs expect; see ``mmact/testing/toy_data``.
"""
import argparse
import os
import os.path as osp
import time
from typing import List, Optional

from mmact.testing.toy_data import (TOY_FORMATS, generate_toy_data,
                                    missing_files)

# Command-line option -> generator option, per kind of format.
_DETECTION_OPTIONS = dict(
    num_train='num_train', num_val='num_val', num_classes='num_classes')
_CLS_OPTIONS = dict(
    num_train='max_per_class',
    num_val='num_val_per_class',
    num_classes='num_classes')


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
        help=f'formats to write, any of {", ".join(TOY_FORMATS)} or all '
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
        '--num-classes',
        type=int,
        help='number of classes; default per '
        'format (coco/v3det/objects365 8, lvis 20, cls 10)')
    parser.add_argument(
        '--imbalance',
        type=float,
        help='cls only: largest / smallest class size (default 10)')
    parser.add_argument('--seed', type=int, default=0, help='random seed')
    parser.add_argument(
        '--skip-complete',
        action='store_true',
        help='keep a root that already holds this very set (its manifest '
        'lists these options and every file exists); otherwise say what is '
        'missing and write it again')
    args = parser.parse_args(argv)
    unknown = set(args.formats) - set(TOY_FORMATS + ('all', ))
    if unknown:
        parser.error(f'unknown format(s) {sorted(unknown)}, choose from '
                     f'{TOY_FORMATS + ("all", )}')
    return args


def format_options(fmt: str, args: argparse.Namespace) -> dict:
    """Generator options of one format from the command line.

    Args:
        fmt (str): Toy format name.
        args (argparse.Namespace): Parsed arguments.

    Returns:
        dict: Keyword options of ``generate_toy_data``.
    """
    names = _CLS_OPTIONS if fmt == 'cls' else _DETECTION_OPTIONS
    options = dict(seed=args.seed)
    for arg, option in names.items():
        if getattr(args, arg) is not None:
            options[option] = getattr(args, arg)
    if args.image_size is not None:
        options['image_size'] = tuple(args.image_size)
    if args.imbalance is not None and fmt == 'cls':
        options['imbalance'] = args.imbalance
    return options


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


class _Progress:
    """Prints ``fmt split: done/total images`` per split and every 2 s."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.last = time.perf_counter()

    def __call__(self, split: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if done == total or now - self.last >= 2.0:
            self.last = now
            print(f'  {self.fmt} {split}: {done}/{total} images', flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    """Write the requested toy datasets and print what was written.

    Args:
        argv (list[str], optional): Arguments; ``sys.argv[1:]`` when None.

    Returns:
        int: Exit status.
    """
    args = parse_args(argv)
    formats = TOY_FORMATS if not args.formats or 'all' in args.formats \
        else tuple(dict.fromkeys(args.formats))
    for fmt in formats:
        root = osp.join(args.out_dir, f'toy_{fmt}')
        options = format_options(fmt, args)
        if args.skip_complete and osp.isdir(root):
            missing = missing_files(root, fmt, **options)
            if not missing:
                print(f'{fmt}: {root} is complete, kept ({_describe(root)})')
                continue
            shown = '\n  '.join(missing[:10])
            more = f'\n  ... {len(missing) - 10} more' if len(
                missing) > 10 else ''
            print(f'{fmt}: {root} is incomplete, writing it again; '
                  f'missing:\n  {shown}{more}')
        print(f'{fmt}: writing {root}', flush=True)
        start = time.perf_counter()
        generate_toy_data(fmt, root, progress=_Progress(fmt), **options)
        elapsed = time.perf_counter() - start
        print(f'{fmt}: wrote {root} in {elapsed:.2f}s ({_describe(root)})')
    return 0


if __name__ == '__main__':
    from mmact.utils.refusal import run_tool

    # an --out-dir it cannot write: one line
    run_tool(main, refuse=(OSError, ))
