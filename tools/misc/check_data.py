"""Check a prepared data root against a config before a long job.

Usage::

    python tools/misc/check_data.py CONFIG [--splits train val test] [--paths-only] [--cfg-options k=v ...]

In order, stopping at the first kind of problem (exit status 1, every
problem of that kind listed, each naming the file and the field):

1. the files and folders the config reads exist (``data_root`` +
   ``ann_file`` / ``data_prefix``, the files a dataset class reads by
   default such as V3Det's class names ``label_file``, the evaluators'
   and the model's ``*_file`` keys such as ImageNet-LT's
   ``train_ann_file``), each missing one listed, then how to get them:
   the generator command of a generated set (``data/toy_<format>``), the
   publisher's download of a real dataset;
2. the annotation files have the fields mmdet / mmpretrain read
   (COCO-format JSON: ``images[i].coco_url`` / ``file_name``,
   ``annotations[j].bbox``, ``category_id``, ``segmentation``, ...;
   mmpretrain lists: ``<path> <label>`` lines);
3. the datasets build and hold samples the model can predict (the checks
   ``tools/train.py`` runs when a job starts: labels within
   ``num_classes``, classes matching the heads, nothing filtered away);
4. every sample's image file exists.

Exit status 0 prints one line per split with its number of samples.
See docs/user_guides/datasets.md for where each dataset comes from and
the layout the configs expect.
"""
import argparse
import sys
from typing import List, Optional

from mmengine.config import DictAction


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Check the data a config reads: files, annotation '
        'fields, samples, images.')
    parser.add_argument('config', help='config file')
    parser.add_argument(
        '--splits',
        nargs='+',
        default=['train', 'val', 'test'],
        choices=['train', 'val', 'test'],
        help='the dataloaders to check (default: all three)')
    parser.add_argument(
        '--paths-only',
        action='store_true',
        help='only check that the files and folders exist (seconds; the '
        'full check reads every annotation file)')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override config settings, e.g. a data root: '
        'train_dataloader.dataset.data_root=/data/lvis_v1/')
    return parser.parse_args(argv)


def _fail(title: str, lines: List[str], hints: List[str] = ()) -> int:
    """The problems, one a line, how to fix them, then ``mmact: <title>``
    (exit status 1)."""
    for line in lines:
        print(f'  {line}', file=sys.stderr)
    for hint in hints:
        print(f'to get them: {hint}', file=sys.stderr)
    print(f'mmact: {title}; {len(lines)} listed above', file=sys.stderr)
    return 1


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    import mmact  # noqa: F401  (registers mmact components)
    from mmact.utils.preflight import (DATASETS_GUIDE, DataCheckError,
                                       annotation_problems, check_datasets,
                                       fill_hints, inspect_data_paths,
                                       load_config, missing_images)
    cfg = load_config(args.config, args.cfg_options)
    splits = [s for s in args.splits if cfg.get(f'{s}_dataloader')]
    missing, notes = inspect_data_paths(cfg, splits)
    for note in notes:
        print(f'note: {note}')
    if missing:
        return _fail(
            f'{args.config}: files and folders missing (where each dataset '
            f'comes from and its layout: {DATASETS_GUIDE})', missing,
            fill_hints(cfg, missing))
    if args.paths_only:
        print(f'{args.config}: the files and folders of '
              f'{", ".join(splits)} exist')
        return 0
    problems = annotation_problems(cfg, splits)
    if problems:
        return _fail(f'{args.config}: malformed annotation fields', problems)
    try:
        datasets = check_datasets(cfg, splits)
    except DataCheckError as error:
        return _fail(f'{args.config}: the data cannot train or test the '
                     'model', [str(error)])
    except Exception as error:  # a dataset class refusing its files
        return _fail(f'{args.config}: a dataset does not build',
                     [f'{type(error).__name__}: {error}'])
    images = missing_images(datasets)
    if images:
        return _fail(f'{args.config}: image files missing', images)
    for split, dataset in datasets.items():
        print(f'{split}: {len(dataset)} samples')
    print(f'{args.config}: the data of {", ".join(datasets)} is complete')
    return 0


if __name__ == '__main__':
    from mmact.utils.refusal import INPUT_ERRORS, run_tool

    # a config or an annotation file it cannot read: one line
    run_tool(main, refuse=INPUT_ERRORS)
