"""Training step of the shipped LVIS Mask R-CNN: APA*+AGLU against SE-ReLU
and ReLU, as ``tools/train.py`` runs it.

Protocol:

- models: ``configs/lvis/apa_mrcnn_r50.py`` (APA*+AGLU ResNet-50, the
  project's main job) and the SE-ReLU and ReLU ResNet-50 LVIS configs of
  ``configs/lvis/`` with the same recipe, each built from its config without
  weights (no ImageNet checkpoint; the heads' own initialisation runs);
- one synthetic batch, the same for every model: 2 images 800x1216, 20
  instances with boxes and masks each, labels over 1203 classes; GOL gets
  LVIS-shaped class image counts (:func:`lvis_shaped_counts`) as
  ``GOLFrequencyHook`` would read them from LVIS v1 train;
- ``model.train_step`` through mmengine's ``OptimWrapper`` (float32) and
  ``AmpOptimWrapper`` (float16 autocast, dynamic loss scale: what
  ``tools/train.py --amp`` selects on a GPU), with the configs' own
  optimizer (SGD through ``ActivationOptimWrapperConstructor``);
- timing: after a warm-up, the models alternate in blocks of ``--block``
  steps until each has ``--steps``; every step is timed alone (synchronised)
  by the wall clock and by CUDA events (GPU time); the table gives the median
  and interquartile range, the ratios of medians to SE-ReLU (the paper's
  baseline) and to ReLU, and a bootstrap 95 % interval of each ratio (an
  interval narrower than 5 % resolves a 5 % difference);
- peak memory: ``torch.cuda.max_memory_allocated`` over ``--peak-steps``
  steps of each model alone (no other model built);
- where the memory goes: the bytes autograd saves for backward in one step
  of each model, by part of the model (``backbone``, ``neck``,
  ``rpn_head``, ``roi_head.mask_head``, ...) and dtype (each storage
  counted once, parameters left out): a part that saves float32 under
  ``--amp`` is where half precision is lost. On the CPU too.

``--device cpu --smoke`` runs the same code on the CPU at a toy size (small
images, few instances and classes, the models at a sixteenth of their widths:
``mmact.testing.narrow_fpn_detector``) for ``tools/gpu/gpu_check.sh``'s dry run:
the wall clock stands in for CUDA events, no memory figure is taken, and
the ``amp`` rows train under bfloat16 autocast (mmact's
``CPUAmpOptimWrapper``, what ``tools/train.py --amp`` picks without a
GPU).

Needs mmdet and mmcv with its compiled ops (RoIAlign on the device).

Usage::

    python tools/benchmarks/benchmark_mask_rcnn_step.py [--steps 20]
        [--block 5] [--json work_dirs/mask_rcnn_step.json]
"""
import argparse
import copy
import datetime
import gc
import json
import logging
import statistics
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_utils  # noqa: E402

#: name -> config (the first is the candidate, the others its baselines).
CONFIGS = {
    'APA*+AGLU':
    'configs/lvis/apa_mrcnn_r50.py',
    'SE-ReLU':
    'configs/lvis/'
    'mask-rcnn_se-relu-r50_fpn_gol-normmask_8xb2-rfs-ms-2x_lvis-v1.py',
    'ReLU':
    'configs/lvis/mask-rcnn_r50_fpn_gol-normmask_8xb2-rfs-ms-2x_lvis-v1.py',
}
CANDIDATE = 'APA*+AGLU'
BASELINES = ('SE-ReLU', 'ReLU')

#: The batch of the protocol and the dry run's toy one.
FULL = dict(images=2, height=800, width=1216, instances=20, classes=1203)
SMOKE = dict(images=2, height=64, width=64, instances=3, classes=8)
#: The dry run's sampling, as configs/toy/_base_/lvis_toy.py's: far fewer
#: anchors, proposals and RoIs per image, so that a CPU step takes seconds.
SMOKE_TRAIN_CFG = dict(
    rpn=dict(sampler=dict(num=64)),
    rpn_proposal=dict(nms_pre=200, max_per_img=100),
    rcnn=dict(sampler=dict(num=16)))

#: LVIS v1 train: images and the rare / common / frequent split of its 1203
#: classes by image count (1-10, 11-100, > 100 images).
LVIS_IMAGES = 100170
LVIS_SPLIT = (337, 461, 405)


def lvis_shaped_counts(num_classes: int) -> List[int]:
    """Class image counts with LVIS v1's shape: its rare / common / frequent
    shares of the classes, counts spread over 1-10, 11-100 and 101-50000
    images (geometric within each group).

    Args:
        num_classes (int): Classes (1203 gives LVIS v1's group sizes).

    Returns:
        list[int]: One count per class, rare classes first.
    """
    total = sum(LVIS_SPLIT)
    rare = round(num_classes * LVIS_SPLIT[0] / total)
    common = round(num_classes * LVIS_SPLIT[1] / total)
    groups = ((rare, 1, 10), (common, 11, 100), (num_classes - rare - common,
                                                 101, 50000))
    counts: List[int] = []
    for n, lo, hi in groups:
        if n > 0:
            counts += [int(round(c)) for c in np.geomspace(lo, hi, n)]
    return counts


def synthetic_batch(spec: Dict, seed: int = 0) -> Dict:
    """One detection batch as a dataloader yields it: uint8 images and
    ``DetDataSample`` with boxes, labels and bitmap masks.

    Args:
        spec (dict): ``images``, ``height``, ``width``, ``instances``,
            ``classes``.
        seed (int): Random seed of the images and instances.
    """
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.structures import InstanceData
    rng = np.random.default_rng(seed)
    h, w, k = spec['height'], spec['width'], spec['instances']
    inputs, samples = [], []
    for i in range(spec['images']):
        inputs.append(
            torch.from_numpy(rng.integers(0, 256, (3, h, w), dtype=np.uint8)))
        # boxes of 1/16 to 1/2 of each side anywhere on the image; the
        # mask of each is the ellipse inscribed in its box
        bw = rng.uniform(w / 16, w / 2, k)
        bh = rng.uniform(h / 16, h / 2, k)
        x1 = rng.uniform(0, w - bw)
        y1 = rng.uniform(0, h - bh)
        boxes = np.stack([x1, y1, x1 + bw, y1 + bh], 1).astype(np.float32)
        yy, xx = np.mgrid[:h, :w]
        masks = np.stack([((xx - (b[0] + b[2]) / 2) / ((b[2] - b[0]) / 2))**2 +
                          ((yy - (b[1] + b[3]) / 2) / ((b[3] - b[1]) / 2))**2
                          <= 1 for b in boxes]).astype(np.uint8)
        sample = DetDataSample(
            metainfo=dict(
                img_id=i,
                img_shape=(h, w),
                ori_shape=(h, w),
                scale_factor=(1.0, 1.0),
                flip=False,
                flip_direction=None))
        sample.gt_instances = InstanceData(
            bboxes=torch.from_numpy(boxes),
            labels=torch.from_numpy(
                rng.integers(0, spec['classes'], k).astype(np.int64)),
            masks=BitmapMasks(masks, h, w))
        sample.ignored_instances = InstanceData(
            bboxes=torch.zeros(0, 4), labels=torch.zeros(0, dtype=torch.int64))
        samples.append(sample)
    return dict(inputs=inputs, data_samples=samples)


def build(name: str, spec: Dict, device: str, amp: bool):
    """(model, optim wrapper) of one config, without weights.

    Args:
        name (str): A key of :data:`CONFIGS`.
        spec (dict): The batch spec (its ``classes`` sets the heads').
        device (str): Where the model trains.
        amp (bool): Mixed precision as ``tools/train.py --amp``.
    """
    import mmact  # noqa: F401
    from mmengine.config import Config
    from mmengine.logging import MMLogger
    from mmengine.registry import init_default_scope

    from mmact.engine.hooks.gol_frequency import GOLFrequencyHook
    from mmact.testing import narrow_fpn_detector
    cfg = Config.fromfile(str(ROOT / CONFIGS[name]))
    init_default_scope(cfg.get('default_scope', 'mmdet'))
    from mmdet.registry import MODELS
    model_cfg = copy.deepcopy(cfg.model)
    # No checkpoint: init_cfg=[] leaves the backbone at PyTorch's default
    # initialisation (None would mean mmdet's Kaiming init for ResNet).
    model_cfg.backbone.init_cfg = []
    model_cfg.roi_head.bbox_head.num_classes = spec['classes']
    model_cfg.roi_head.mask_head.num_classes = spec['classes']
    if spec is SMOKE:
        # a sixteenth of the widths, the same blocks, heads and losses: a
        # CPU step (bfloat16 convolutions among them) takes a second
        narrow_fpn_detector(model_cfg, depth=model_cfg.backbone.depth)
        for stage, settings in SMOKE_TRAIN_CFG.items():
            for key, value in settings.items():
                if isinstance(value, dict):
                    model_cfg.train_cfg[stage][key].update(value)
                else:
                    model_cfg.train_cfg[stage][key] = value
    model = MODELS.build(model_cfg)
    # init_weights logs every parameter it leaves alone; keep the tables
    # readable
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        model.init_weights()
        optim_wrapper = _optim_wrapper(model, cfg, device, amp)
    finally:
        logger.setLevel(level)
    for loss in GOLFrequencyHook.frequency_losses(model):
        loss.set_class_image_counts(
            lvis_shaped_counts(spec['classes']), LVIS_IMAGES)
    return model.to(device).train(), optim_wrapper


def _optim_wrapper(model, cfg, device: str, amp: bool):
    from mmengine.optim import build_optim_wrapper
    wrapper_cfg = copy.deepcopy(cfg.optim_wrapper)
    if amp:
        # tools/train.py's enable_amp, by the device asked for here rather
        # than the one the machine has
        if torch.device(device).type == 'cuda':
            wrapper_cfg.type = 'AmpOptimWrapper'
            wrapper_cfg.setdefault('loss_scale', 'dynamic')
        else:  # the dry run: bfloat16 autocast
            wrapper_cfg.type = 'CPUAmpOptimWrapper'
    return build_optim_wrapper(model.to(device), wrapper_cfg)


def peak_alone(name: str, spec: Dict, batch: Dict, device: str, amp: bool,
               steps: int) -> Optional[int]:
    """Peak allocated bytes over ``steps`` steps of one model, no other
    built (None on the CPU, which keeps no such figure: no model is built
    there)."""
    if torch.device(device).type != 'cuda':
        return None
    gc.collect()
    bench_utils.reset_peak_memory(device)
    model, wrapper = build(name, spec, device, amp)
    for _ in range(steps):
        model.train_step(batch, wrapper)
    peak = bench_utils.peak_memory(device)
    del model, wrapper
    gc.collect()
    return peak


def saved_by_part(model, step) -> Dict[str, Dict[str, int]]:
    """Bytes autograd saves for backward while ``step()`` runs, by the
    innermost part of ``model`` (its modules two levels down, e.g.
    ``roi_head.bbox_head``) whose forward saved them, and by dtype.

    Each storage is counted once (views of one tensor share it); parameters
    (saved as they are) are left out, their half-precision copies under
    autocast are not.

    Args:
        model (nn.Module): The detector.
        step (callable): One training step of ``model``.

    Returns:
        dict: part -> dtype name -> bytes.
    """
    parts: List[str] = ['(outside a part)']

    def leave(module, args, output) -> None:  # None: the output stays
        parts.pop()

    handles = []
    for name, module in model.named_modules():
        if name and name.count('.') <= 1:
            handles.append(module.register_forward_pre_hook(
                lambda m, a, name=name: parts.append(name)))
            handles.append(module.register_forward_hook(leave))
    seen = set()
    saved: Dict[str, Dict[str, int]] = {}

    def pack(t):
        if isinstance(t, torch.nn.Parameter):
            return t
        storage = t.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            by_dtype = saved.setdefault(parts[-1], {})
            key = str(t.dtype).replace('torch.', '')
            by_dtype[key] = by_dtype.get(key, 0) + storage.nbytes()
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            step()
    finally:
        for h in handles:
            h.remove()
    return saved


def saved_alone(name: str, spec: Dict, batch: Dict, device: str,
                amp: bool) -> Dict[str, Dict[str, int]]:
    """:func:`saved_by_part` of one step of one model, no other built."""
    gc.collect()
    model, wrapper = build(name, spec, device, amp)
    saved = saved_by_part(model, lambda: model.train_step(batch, wrapper))
    del model, wrapper
    gc.collect()
    return saved


def print_saved(prec: str, saved: Dict[str, Dict[str, Dict[str, int]]]
                ) -> None:
    """Saved MiB per part and dtype, the models side by side."""
    keys = sorted({(part, dtype)
                   for by_part in saved.values()
                   for part, by_dtype in by_part.items()
                   for dtype in by_dtype})
    print(f'\n== saved for backward in one step, {prec}, MiB')
    print(f'{"part":>28} {"dtype":>9} ' +
          ' '.join(f'{n:>10}' for n in saved))
    for part, dtype in keys:
        print(f'{part:>28} {dtype:>9} ' + ' '.join(
            f'{saved[n].get(part, {}).get(dtype, 0) / 2**20:10.1f}'
            for n in saved))
    sys.stdout.flush()


def time_models(spec: Dict, batch: Dict, device: str, amp: bool, steps: int,
                block: int, warmup: int) -> Dict[str, Dict]:
    """Per-step wall and device seconds of every model, alternated in
    blocks (the first model of a block rotates)."""
    models = {n: build(n, spec, device, amp) for n in CONFIGS}
    for model, wrapper in models.values():
        for _ in range(warmup):
            model.train_step(batch, wrapper)
    wall: Dict[str, List[float]] = {n: [] for n in models}
    dev: Dict[str, List[float]] = {n: [] for n in models}
    order = list(models)
    for b in range(max(1, -(-steps // block))):
        for n in order[b % len(order):] + order[:b % len(order)]:
            model, wrapper = models[n]
            for _ in range(block):
                with bench_utils.StepClock(device) as clock:
                    model.train_step(batch, wrapper)
                wall[n].append(clock.wall_s)
                dev[n].append(clock.device_s)
    del models
    gc.collect()
    return {n: dict(wall=wall[n], device=dev[n]) for n in CONFIGS}


def summarise(times: Dict[str, Dict], peaks: Dict[str, Optional[int]]) -> Dict:
    """Medians, IQRs, ratios (with bootstrap intervals) and peaks."""
    out: Dict = {}
    for n, t in times.items():
        row = dict(
            wall_ms=bench_utils.quartiles([s * 1e3 for s in t['wall']]),
            gpu_ms=bench_utils.quartiles([s * 1e3 for s in t['device']]),
            peak_bytes=peaks[n])
        for base in BASELINES:
            if base == n:
                continue
            key = base.lower().replace('-', '_')
            row[f'wall_ratio_{key}'] = (
                statistics.median(t['wall']) /
                statistics.median(times[base]['wall']))
            row[f'wall_ratio_{key}_ci95'] = bench_utils.bootstrap_ratio(
                t['wall'], times[base]['wall'])
            row[f'gpu_ratio_{key}'] = (
                statistics.median(t['device']) /
                statistics.median(times[base]['device']))
            row[f'peak_ratio_{key}'] = (
                peaks[n] / peaks[base] if peaks[n] and peaks[base] else None)
        out[n] = row
    return out


def print_table(prec: str, rows: Dict, spec: Dict, device: str) -> None:
    print(f'\n== LVIS Mask R-CNN train_step, {prec}, {spec["images"]} images '
          f'{spec["height"]}x{spec["width"]}, {spec["instances"]} instances '
          f'each, {spec["classes"]} classes, on {device}')
    print(f'{"model":>10} {"wall ms [IQR]":>22} {"GPU ms [IQR]":>22} '
          f'{"/ SE-ReLU [95%]":>22} {"/ ReLU":>7} {"peak MiB":>9}')
    for n, r in rows.items():
        w, g = r['wall_ms'], r['gpu_ms']
        se = (f'{r["wall_ratio_se_relu"]:.3f} '
              f'[{r["wall_ratio_se_relu_ci95"][0]:.2f}-'
              f'{r["wall_ratio_se_relu_ci95"][1]:.2f}]'
              if 'wall_ratio_se_relu' in r else '1')
        relu = (f'{r["wall_ratio_relu"]:.3f}'
                if 'wall_ratio_relu' in r else '1')
        peak = (f'{r["peak_bytes"] / 2**20:.0f}'
                if r['peak_bytes'] is not None else '-')
        print(f'{n:>10} {w["median"]:9.1f} [{w["q25"]:.1f}-{w["q75"]:.1f}]'
              f' {g["median"]:9.1f} [{g["q25"]:.1f}-{g["q75"]:.1f}] '
              f'{se:>22} {relu:>7} {peak:>9}')
    sys.stdout.flush()


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--device', default='cuda')
    parser.add_argument(
        '--smoke',
        action='store_true',
        help=f'toy batch {SMOKE}, narrowed models and few steps (the dry '
        'run)')
    parser.add_argument(
        '--precisions',
        nargs='+',
        default=['float32', 'amp'],
        choices=['float32', 'amp'])
    parser.add_argument(
        '--steps', type=int, default=20, help='timed steps per model')
    parser.add_argument('--block', type=int, default=5)
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--peak-steps', type=int, default=3)
    parser.add_argument('--json', help='write the figures to this file')
    args = parser.parse_args(argv)
    if args.smoke:
        args.steps, args.block, args.warmup, args.peak_steps = 1, 1, 0, 1
    return args


def main(argv: Optional[Sequence[str]] = None) -> Dict:
    """Run the protocol; print its tables; return (and write) the figures."""
    args = parse_args(argv)
    device = args.device
    if torch.device(device).type == 'cuda' and not torch.cuda.is_available():
        from mmact.utils.refusal import Refused
        raise Refused('benchmark_mask_rcnn_step.py: --device cuda needs a '
                      'CUDA GPU (use --device cpu --smoke for a dry run)')
    spec = SMOKE if args.smoke else FULL
    torch.manual_seed(0)
    batch = synthetic_batch(spec)
    header = dict(
        device=(torch.cuda.get_device_name(device)
                if torch.device(device).type == 'cuda' else 'cpu'),
        torch=torch.__version__,
        date=datetime.date.today().isoformat(),
        batch=spec,
        steps=args.steps,
        block=args.block,
        configs=CONFIGS)
    print(' '.join(f'{k}={v}' for k, v in header.items()
                   if k not in ('configs', )))
    results: Dict = dict(header=header)
    summary: Dict = {}
    for prec in args.precisions:
        amp = prec == 'amp'
        peaks = {
            n: peak_alone(n, spec, batch, device, amp, args.peak_steps)
            for n in CONFIGS
        }
        times = time_models(spec, batch, device, amp, args.steps, args.block,
                            args.warmup)
        rows = summarise(times, peaks)
        print_table(prec, rows, spec, device)
        saved = {
            n: saved_alone(n, spec, batch, device, amp)
            for n in CONFIGS
        }
        print_saved(prec, saved)
        for n in CONFIGS:
            rows[n]['saved_bytes'] = saved[n]
        results[prec] = rows
        cand = rows[CANDIDATE]
        summary[f'mask_rcnn_lvis_{prec}'] = cand['wall_ratio_se_relu']
        summary[f'mask_rcnn_lvis_memory_{prec}'] = cand['peak_ratio_se_relu']
    results['summary'] = dict(step=summary)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, 'w') as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == '__main__':
    from mmact.utils.refusal import run_tool
    run_tool(main)
