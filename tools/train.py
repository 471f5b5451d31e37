"""Train a detector (mmdet config) or a classifier (mmpretrain config).

Same command line as mmdet's tools/train.py; configs of either library work,
with or without mmact components.
"""
import argparse
import os
import os.path as osp

from mmengine.config import DictAction
from mmengine.registry import RUNNERS
from mmengine.runner import Runner, find_latest_checkpoint

import mmact  # noqa: F401  (registers mmact components and compat fixes)
from mmact.utils import setup_cpu_distributed
from mmact.utils.preflight import (check_checkpoint, check_data_paths,
                                   check_pretrained_paths, load_config)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument(
        '--amp', action='store_true', help='automatic mixed precision')
    parser.add_argument(
        '--auto-scale-lr',
        action='store_true',
        help='scale the lr by total batch size / auto_scale_lr.base_batch_size')
    parser.add_argument(
        '--resume',
        nargs='?',
        type=str,
        const='auto',
        help='resume from this checkpoint, or without a path from the latest '
        'checkpoint in the work dir')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override settings, key=value pairs merged into the config')
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm', 'mpi'],
        default='none',
        help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def main() -> None:
    args = parse_args()
    cfg = load_config(args.config, args.cfg_options)
    cfg.launcher = args.launcher
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(args.config))[0])

    if args.amp:
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.loss_scale = 'dynamic'
    if args.auto_scale_lr:
        if 'base_batch_size' not in cfg.get('auto_scale_lr', {}):
            raise RuntimeError('--auto-scale-lr needs auto_scale_lr.'
                               'base_batch_size in the config.')
        cfg.auto_scale_lr.enable = True

    if args.resume is not None:
        checkpoint = args.resume
        if checkpoint == 'auto':
            checkpoint = find_latest_checkpoint(cfg.work_dir)
        # Validate before the Runner starts writing into the work dir.
        if checkpoint is not None:
            check_checkpoint(checkpoint)
        cfg.resume = True
        cfg.load_from = checkpoint
    elif cfg.get('load_from'):
        check_checkpoint(cfg.load_from)

    splits = ('train', 'val') if cfg.get('val_cfg') else ('train', )
    check_data_paths(cfg, splits)
    check_pretrained_paths(cfg)
    setup_cpu_distributed(cfg, args.launcher)

    runner = Runner.from_cfg(cfg) if 'runner_type' not in cfg else \
        RUNNERS.build(cfg)
    runner.train()


if __name__ == '__main__':
    main()
