"""Evaluate a checkpoint of a detector (mmdet) or classifier (mmpretrain)."""
import argparse
import os
import os.path as osp

from mmengine.config import Config, DictAction
from mmengine.registry import METRICS, RUNNERS
from mmengine.runner import Runner

import mmact  # noqa: F401  (registers mmact components and compat fixes)
from mmact.utils import setup_cpu_distributed
from mmact.utils.preflight import (check_checkpoint, check_data_paths,
                                   load_config)

# Metric that dumps raw predictions to a pickle, per library.
DUMP_METRICS = {'mmdet': 'DumpDetResults', 'mmpretrain': 'ResultsDumper'}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Test (and eval) a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir', help='the dir to save evaluation logs')
    parser.add_argument(
        '--out', help='dump predictions to this pickle file (.pkl)')
    parser.add_argument(
        '--show-dir', help='save images with drawn predictions in this dir')
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


def enable_visualization(cfg: Config, show_dir: str) -> None:
    """Switch on the config's visualization hook, writing to ``show_dir``."""
    hook = cfg.get('default_hooks', {}).get('visualization')
    if hook is None:
        raise RuntimeError('--show-dir needs default_hooks.visualization in '
                           'the config.')
    if hook['type'] == 'DetVisualizationHook':
        hook.update(draw=True, test_out_dir=show_dir)
    else:
        hook.update(enable=True, out_dir=show_dir)


def main() -> None:
    args = parse_args()
    cfg = load_config(args.config, args.cfg_options)
    cfg.launcher = args.launcher
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(args.config))[0])
    check_checkpoint(args.checkpoint)
    cfg.load_from = args.checkpoint
    if args.show_dir:
        enable_visualization(cfg, args.show_dir)
    if args.out is not None and not args.out.endswith(('.pkl', '.pickle')):
        raise ValueError(f'--out must name a .pkl file, got {args.out!r}')
    check_data_paths(cfg, ('test', ))
    setup_cpu_distributed(cfg, args.launcher)

    runner = Runner.from_cfg(cfg) if 'runner_type' not in cfg else \
        RUNNERS.build(cfg)
    if args.out is not None:
        scope = cfg.get('default_scope', 'mmdet')
        if scope not in DUMP_METRICS:
            raise ValueError(f'--out supports default_scope in '
                             f'{sorted(DUMP_METRICS)}, got {scope!r}')
        runner.test_evaluator.metrics.append(
            METRICS.build(
                dict(type=f'{scope}.{DUMP_METRICS[scope]}',
                     out_file_path=args.out)))
    runner.test()


if __name__ == '__main__':
    main()
