"""Run a detector of mmact on images and write the drawings.

Usage::

    python tools/misc/infer_image.py CONFIG CHECKPOINT IMAGE [IMAGE ...] [--out-dir DIR] [--device cpu] [--score-thr 0.3]

mmdet's ``DetInferencer`` with the config and an mmact checkpoint (one
written by tools/train.py, or the authors' converted with
tools/model_converters/apa_to_mmact.py): ``DIR/vis/<image>`` is the image
with its boxes and masks, ``DIR/preds/<image>.json`` the predictions
(labels, scores, boxes). The file is checked first as tools/test.py
checks it (present, complete); the backbone's ImageNet ``init_cfg`` is
dropped (the checkpoint holds every weight).
"""
import argparse
import os.path as osp
from typing import List, Optional


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Detect objects in images with an mmact detector.')
    parser.add_argument('config', help='config file')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('images', nargs='+', help='image files')
    parser.add_argument(
        '--out-dir', default='outputs', help='where vis/ and preds/ go')
    parser.add_argument('--device', default=None, help='e.g. cpu, cuda:0')
    parser.add_argument(
        '--score-thr',
        type=float,
        default=0.3,
        help='draw the detections scoring at least this')
    from mmact.checkpoint import add_trust_argument
    add_trust_argument(parser)
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    import mmact  # noqa: F401  (registers mmact components)
    from mmdet.apis import DetInferencer

    from mmact.checkpoint import (CheckpointLoadError, UnsafeCheckpointError,
                                  safe_checkpoint_loading)
    from mmact.utils.preflight import check_checkpoint, load_config
    from mmact.utils.refusal import refusing
    with refusing():  # before anything is loaded or written
        check_checkpoint(args.checkpoint)
        cfg = load_config(args.config)
        missing = [
            image for image in args.images
            if not osp.exists(image) and '://' not in image
        ]
        if missing:
            raise FileNotFoundError(
                f'image files do not exist: {", ".join(missing)}')
    cfg.model.get('backbone', {}).pop('init_cfg', None)  # the checkpoint's
    with safe_checkpoint_loading(args.trust_checkpoint), \
            refusing(UnsafeCheckpointError, CheckpointLoadError):
        inferencer = DetInferencer(
            model=cfg,
            weights=args.checkpoint,
            device=args.device,
            scope=cfg.get('default_scope', 'mmdet'),
            show_progress=False)
    inferencer(
        args.images,
        out_dir=args.out_dir,
        pred_score_thr=args.score_thr,
        no_save_pred=False)
    for image in args.images:
        name = osp.basename(image)
        print(f'{image}: {osp.join(args.out_dir, "vis", name)}')
    return 0


if __name__ == '__main__':
    from mmact.utils.refusal import run_tool
    run_tool(main)
