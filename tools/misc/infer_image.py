"""Run a detector of mmact on images and write the drawings.

Usage::

    python tools/misc/infer_image.py CONFIG CHECKPOINT IMAGE [IMAGE ...] [--out-dir DIR] [--device cpu] [--score-thr 0.3]

mmdet's ``DetInferencer`` with the config and an mmact checkpoint (one
written by tools/train.py, or the authors' converted with
tools/model_converters/apa_to_mmact.py): ``DIR/vis/<image>`` is the image
with its boxes and masks, ``DIR/preds/<image>.json`` the predictions
(labels, their class names, scores, boxes). The file is checked first as
tools/test.py checks it (present, complete); the backbone's ImageNet
``init_cfg`` is dropped (the checkpoint holds every weight).

Class names (:func:`mmact.utils.class_names.resolve_dataset_meta`): the
checkpoint's ``dataset_meta`` (a .safetensors file's JSON metadata
included), else the config's test dataset (its ``metainfo``, its class's
such as LVIS v1's 1203, V3Det's label file when it exists), else numbered
``class <i>`` with one ``note:`` line. Names of another number of classes
than the model predicts are refused before any image is read.
"""
import argparse
import os.path as osp
from typing import List, Optional, Sequence


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


def build_inferencer(cfg, checkpoint: str, device: Optional[str]):
    """mmdet's ``DetInferencer`` with the class names of
    :func:`~mmact.utils.class_names.resolve_dataset_meta` (its own take
    the checkpoint's or COCO's 80), kept as its ``class_names``."""
    from mmdet.apis import DetInferencer
    from mmengine.runner.checkpoint import _load_checkpoint_to_model

    from mmact.checkpoint import is_safetensors, load_safetensors_metadata
    from mmact.utils.class_names import resolve_dataset_meta

    class NamedDetInferencer(DetInferencer):

        def _load_weights_to_model(self, model, loaded, cfg) -> None:
            meta = loaded.get('meta')
            if meta is None and is_safetensors(checkpoint):
                meta = load_safetensors_metadata(checkpoint)
            self.class_names = resolve_dataset_meta(cfg, meta)
            _load_checkpoint_to_model(model, loaded)
            model.dataset_meta = self.class_names.meta

    return NamedDetInferencer(
        model=cfg,
        weights=checkpoint,
        device=device,
        scope=cfg.get('default_scope', 'mmdet'),
        show_progress=False)


def write_predictions(predictions: List[dict], images: List[str],
                      classes: Sequence[str], out_dir: str) -> None:
    """``out_dir/preds/<image>.json``: mmdet's prediction of each image
    (labels, scores, boxes, masks) with ``label_names``."""
    import mmengine
    for image, prediction in zip(images, predictions):
        prediction['label_names'] = [classes[i] for i in prediction['labels']]
        stem = osp.splitext(osp.basename(image))[0]
        mmengine.dump(prediction, osp.join(out_dir, 'preds', f'{stem}.json'))


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    import mmact  # noqa: F401  (registers mmact components)
    from mmact.checkpoint import (CheckpointLoadError, UnsafeCheckpointError,
                                  safe_checkpoint_loading)
    from mmact.utils.class_names import ClassNamesError
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
            refusing(UnsafeCheckpointError, CheckpointLoadError,
                      ClassNamesError):
        inferencer = build_inferencer(cfg, args.checkpoint, args.device)
    names = inferencer.class_names
    if names.numbered:
        print('note: neither the checkpoint nor the config names the '
              f'classes ({names.source}): drawn and written as class 0 ... '
              f'class {len(names.meta["classes"]) - 1}')
    results = inferencer(
        args.images,
        out_dir=args.out_dir,
        pred_score_thr=args.score_thr,
        no_save_pred=True)
    write_predictions(results['predictions'], args.images,
                      names.meta['classes'], args.out_dir)
    for image in args.images:
        name = osp.basename(image)
        print(f'{image}: {osp.join(args.out_dir, "vis", name)}')
    return 0


if __name__ == '__main__':
    from mmact.utils.refusal import run_tool
    run_tool(main)
