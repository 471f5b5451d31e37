"""Evaluate a checkpoint of a detector (mmdet) or classifier (mmpretrain).

Same command line as mmdet's tools/test.py, plus ``--allow-partial``.
"""
import argparse
import logging
import sys
import warnings
from copy import deepcopy
from typing import Optional, Tuple

from mmengine.config import Config, ConfigDict
from mmengine.logging import print_log
from mmengine.registry import METRICS, RUNNERS
from mmengine.runner import Runner

import mmact  # noqa: F401  (registers mmact components)
from mmact.checkpoint import (CheckpointLoadError, UnsafeCheckpointError,
                              safe_checkpoint_loading)
from mmact.engine.hooks import CheckpointMismatchError, replace_stock_hook
from mmact.utils import (StartUp, check_mmcv, end_with_launcher, finish_run,
                         is_launcher_main, setup_cpu_distributed)
from mmact.utils.preemption import (DEFAULT_STOP_SIGNALS, PREEMPTED_EXIT_CODE,
                                    STOP_SIGNALS, Preempted)
from mmact.utils.preflight import (check_checkpoint, check_data_paths,
                                   check_datasets, unknown_type_hint,
                                   use_checked_datasets)
from mmact.utils.refusal import (INPUT_ERRORS, Refused, one_line, refusing,
                                 run_tool)
from mmact.utils.tool_args import (add_runner_arguments, parse_runner_args,
                                   runner_config)

# Metric that dumps raw predictions to a pickle, per library (mmpretrain's
# own tools/test.py uses mmengine's DumpResults).
DUMP_METRICS = {
    'mmdet': 'mmdet.DumpDetResults',
    'mmpretrain': 'mmengine.DumpResults'
}
# Test-time augmentation used when the config has no tta_model (the
# defaults of mmdet's and mmpretrain's tools/test.py).
TTA_MODELS = {
    'mmdet':
    dict(
        type='DetTTAModel',
        tta_cfg=dict(nms=dict(type='nms', iou_threshold=0.5),
                     max_per_img=100)),
    'mmpretrain':
    dict(type='mmpretrain.AverageClsScoreTTA'),
}
DET_TTA_META_KEYS = ('img_id', 'img_path', 'ori_shape', 'img_shape',
                     'scale_factor', 'flip', 'flip_direction')


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Test (and eval) a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument(
        'checkpoint', help='checkpoint file, URL or scheme:// path')
    add_runner_arguments(parser)
    parser.add_argument(
        '--out', help='dump predictions to this pickle file (.pkl)')
    parser.add_argument(
        '--show', action='store_true', help='show prediction results')
    parser.add_argument(
        '--show-dir', help='save images with drawn predictions in this dir')
    parser.add_argument(
        '--wait-time', type=float, default=2, help='the interval of show (s)')
    parser.add_argument(
        '--tta',
        action='store_true',
        help='test-time augmentation: the config\'s tta_model / '
        'tta_pipeline, or horizontal flip by default')
    parser.add_argument(
        '--allow-partial',
        action='store_true',
        help='test even if the checkpoint leaves model weights unloaded or '
        'has keys the model lacks (mmengine warns and goes on)')
    return parse_runner_args(parser)


def enable_visualization(cfg: Config,
                         show_dir: Optional[str] = None,
                         show: bool = False,
                         wait_time: float = 2) -> None:
    """Switch on the config's visualization hook.

    Args:
        cfg (Config): Updated in place.
        show_dir (str, optional): Where drawn images go (under the run's
            work dir / timestamp, as in mmdet).
        show (bool): Show each image in a window.
        wait_time (float): Seconds each shown image stays.
    """
    hook = cfg.get('default_hooks', {}).get('visualization')
    if hook is None:
        raise ValueError('--show / --show-dir need '
                         'default_hooks.visualization in the config.')
    if hook['type'].split('.')[-1] == 'DetVisualizationHook':
        hook.update(draw=True)
        if show_dir:
            hook.update(test_out_dir=show_dir)
    else:  # mmpretrain's VisualizationHook
        hook.update(enable=True)
        if show_dir:
            hook.update(out_dir=show_dir)
    if show:
        hook.update(show=True, wait_time=wait_time)


def enable_tta(cfg: Config) -> None:
    """Wrap the model in its test-time augmentation model, as mmdet's and
    mmpretrain's tools/test.py do (flip TTA when the config has none)."""
    scope = cfg.get('default_scope', 'mmdet')
    if 'tta_model' not in cfg:
        if scope not in TTA_MODELS:
            raise ValueError(f'--tta without tta_model in the config '
                             f'supports default_scope in {sorted(TTA_MODELS)}'
                             f', got {scope!r}')
        warnings.warn('No tta_model in the config; using '
                      f'{TTA_MODELS[scope]["type"]}.')
        cfg.tta_model = TTA_MODELS[scope]
    if 'tta_pipeline' not in cfg:
        warnings.warn('No tta_pipeline in the config; using the test '
                      'pipeline with and without a horizontal flip.')
        dataset = cfg.test_dataloader.dataset
        while 'dataset' in dataset:
            dataset = dataset['dataset']
        pipeline = deepcopy(dataset.pipeline)
        pack = dict(type='PackDetInputs', meta_keys=DET_TTA_META_KEYS) \
            if scope == 'mmdet' else pipeline[-1]
        pipeline[-1] = dict(
            type='TestTimeAug',
            transforms=[[
                dict(type='RandomFlip', prob=1.),
                dict(type='RandomFlip', prob=0.)
            ], [pack]])
        cfg.tta_pipeline = pipeline
    cfg.model = ConfigDict(**cfg.tta_model, module=cfg.model)
    cfg.test_dataloader.dataset.pipeline = cfg.tta_pipeline


def write_metrics_once(cfg: Config) -> None:
    """Have the main process alone write the test-metrics json.

    mmengine's ``LoggerHook`` (the default, or named in the config) has every
    rank write the same file, which two ranks can corrupt; it is replaced by
    :class:`mmact.engine.hooks.MainProcessLoggerHook` with the same
    arguments. Another logger hook type, a built hook object or
    ``logger=None`` is left as is.

    Args:
        cfg (Config): Updated in place.
    """
    replace_stock_hook(cfg, 'logger', 'MainProcessLoggerHook')


def report_stop(stop: Preempted, launcher: str) -> None:
    """Say (once per job) that a stop signal ended the evaluation."""
    message = (f'evaluation stopped by {stop.signal_name}: no results or '
               f'metrics were written (exit status {PREEMPTED_EXIT_CODE})')
    print_log(message, logger='current', level=logging.WARNING)
    if is_launcher_main(launcher):
        print(f'mmact: {message}', file=sys.stderr, flush=True)


def main() -> None:
    args = parse_args()
    # SIGTERM / SIGUSR1 stop where they land: nothing here is worth saving
    STOP_SIGNALS.install(DEFAULT_STOP_SIGNALS)
    try:
        with safe_checkpoint_loading(args.trust_checkpoint), \
                refusing(UnsafeCheckpointError, CheckpointLoadError):
            evaluate(args)
    except Preempted as stop:  # before any process group
        report_stop(stop, args.launcher)
        sys.exit(PREEMPTED_EXIT_CODE)


@refusing(*INPUT_ERRORS, ImportError)
def checked_config(args: argparse.Namespace) -> Tuple[Config, dict]:
    """The run's config, once the checkpoint, the options and the data
    passed their checks (nothing is written until then), and the checked
    datasets."""
    check_mmcv()  # mmcv ops built for another torch: say how to fix
    cfg = runner_config(args)
    write_metrics_once(cfg)
    check_checkpoint(args.checkpoint)
    cfg.load_from = args.checkpoint
    if args.show or args.show_dir:
        enable_visualization(cfg, args.show_dir, args.show, args.wait_time)
    if args.tta:
        enable_tta(cfg)
    if args.out is not None:
        if not args.out.endswith(('.pkl', '.pickle')):
            raise ValueError(f'--out must name a .pkl file, got {args.out!r}')
        scope = cfg.get('default_scope', 'mmdet')
        if scope not in DUMP_METRICS:
            raise ValueError(f'--out supports default_scope in '
                             f'{sorted(DUMP_METRICS)}, got {scope!r}')
    check_data_paths(cfg, ('test', ))
    # samples vs the heads, before the model is built; the Runner reuses them
    datasets = check_datasets(
        cfg, ('test', ), warn=is_launcher_main(args.launcher))
    return cfg, datasets


def evaluate(args: argparse.Namespace) -> None:
    """Check the checkpoint, the data and the config, then test."""
    end_with_launcher(args.launcher)  # a killed torchrun ends its workers
    with StartUp() as start_up:  # no garbage collections until it is over
        cfg, datasets = checked_config(args)
        cpu_distributed = setup_cpu_distributed(cfg, args.launcher)
        cfg.custom_hooks = list(cfg.get('custom_hooks') or []) + [
            dict(type='CheckpointKeysHook', strict=not args.allow_partial)
        ]

        try:
            runner = Runner.from_cfg(cfg) if 'runner_type' not in cfg else \
                RUNNERS.build(cfg)
            use_checked_datasets(runner, datasets)
            start_up.over()
            if args.out is not None:
                dump = DUMP_METRICS[cfg.get('default_scope', 'mmdet')]
                runner.test_evaluator.metrics.append(
                    METRICS.build(dict(type=dump, out_file_path=args.out)))
            runner.test()
            finish_run(cpu_distributed)
        except Preempted as stop:
            report_stop(stop, args.launcher)
            finish_run(cpu_distributed, PREEMPTED_EXIT_CODE)
        except CheckpointMismatchError as error:
            raise Refused(
                f'{args.checkpoint}: {one_line(error)}. Nothing was tested. '
                'Use the checkpoint of this config, or pass --allow-partial '
                'to test with the unloaded weights at their initial '
                'values.') from error
        except KeyError as error:  # a type= name no registry knows
            hint = unknown_type_hint(error, cfg.get('default_scope'))
            if hint is None:
                raise
            raise Refused(f'{one_line(error)} {hint}') from error


if __name__ == '__main__':
    run_tool(main)
