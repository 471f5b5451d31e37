"""Convert a checkpoint of the reference APA code to mmact keys.

Usage::

    python tools/model_converters/apa_to_mmact.py SRC DST [--backbone-only]

Classification checkpoints (``{'model': ...}``) become mmpretrain
``ImageClassifier`` weights (``backbone.*`` + ``head.fc.*``); detector files of
the reference mmdet fork keep their neck/head keys. The inferred backbone
config is printed; use it in the mmact config. Logic:
:mod:`mmact.utils.ckpt_convert`.
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mmact.utils.ckpt_convert import convert_apa_checkpoint  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    """Command-line arguments."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('src', help='reference checkpoint (.pth)')
    parser.add_argument('dst', help='output checkpoint for mmact')
    parser.add_argument(
        '--backbone-only',
        action='store_true',
        help='drop classifier / detector heads, keep backbone.* only')
    parser.add_argument(
        '--no-validate',
        action='store_true',
        help='skip the key check against the inferred ActResNet (use when '
        'the activation types are not importable here)')
    return parser.parse_args(argv)


def main(argv=None) -> None:
    """Convert ``src`` and save it to ``dst``."""
    args = parse_args(argv)
    import mmact  # noqa: F401  (registers the activations for validation)
    checkpoint = torch.load(args.src, map_location='cpu', weights_only=False)
    converted, report = convert_apa_checkpoint(
        checkpoint,
        backbone_only=args.backbone_only,
        validate=not args.no_validate)
    Path(args.dst).parent.mkdir(parents=True, exist_ok=True)
    torch.save(converted, args.dst)
    print(f'{report["layout"]} checkpoint: {report["num_keys"]} keys -> '
          f'{args.dst}')
    print(f'backbone config: {report["backbone_cfg"]}')
    if report['passed_through']:
        print(f'{len(report["passed_through"])} non-backbone keys kept as is')
    if report['dropped']:
        print(f'dropped: {", ".join(report["dropped"])}')


if __name__ == '__main__':
    main()
