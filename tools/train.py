"""Train a detector (mmdet config) or a classifier (mmpretrain config).

Same command line as mmdet's tools/train.py; configs of either library work,
with or without mmact components.
"""
import argparse
import logging
import sys
from contextlib import nullcontext
from typing import Optional, Tuple

from mmengine.config import Config
from mmengine.device import (is_cuda_available, is_mlu_available,
                             is_musa_available, is_npu_available)
from mmengine.logging import print_log
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

import mmact  # noqa: F401  (registers mmact components)
from mmact.checkpoint import (CheckpointLoadError, UnsafeCheckpointError,
                              safe_checkpoint_loading)
from mmact.engine.hooks import replace_stock_hook
from mmact.utils import (StartUp, check_mmcv, end_with_launcher, finish_run,
                         init_restarted_process_group, is_launcher_main,
                         setup_cpu_distributed)
from mmact.utils.preemption import (DEFAULT_STOP_SIGNALS, PREEMPTED_EXIT_CODE,
                                    STOP_SIGNALS, Preempted)
from mmact.utils.preflight import (check_checkpoint, check_data_paths,
                                   check_datasets, check_fresh_work_dir,
                                   check_pretrained_paths,
                                   is_restart_of_recorded_run, record_run,
                                   resume_checkpoint, unknown_type_hint,
                                   use_checked_datasets)
from mmact.utils.refusal import (INPUT_ERRORS, Refused, one_line, refusing,
                                 run_tool)
from mmact.utils.tool_args import (add_runner_arguments, parse_runner_args,
                                   runner_config)
from mmact.utils.work_dir_lock import (WorkDirLockedError, run_identity,
                                       work_dir_lock)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    add_runner_arguments(parser)
    parser.add_argument(
        '--amp',
        action='store_true',
        help='automatic mixed precision: float16 with dynamic loss scaling '
        'on a GPU (mmengine AmpOptimWrapper), bfloat16 autocast on a CPU-only '
        'machine (CPUAmpOptimWrapper)')
    parser.add_argument(
        '--auto-scale-lr',
        action='store_true',
        help='scale the lr by total batch size / auto_scale_lr.base_batch_size'
    )
    parser.add_argument(
        '--resume',
        nargs='?',
        type=str,
        const='auto',
        help='resume from this checkpoint, or without a path from the one '
        'last_checkpoint names (or else the newest complete one in the work '
        'dir)')
    parser.add_argument(
        '--force',
        action='store_true',
        help='start from scratch even where the work dir holds checkpoints '
        'of an earlier run (they are overwritten as the run goes)')
    parser.add_argument(
        '--no-exact-resume',
        action='store_true',
        help='do not save / restore the random state in checkpoints '
        '(ExactResumeHook, on by default)')
    parser.add_argument(
        '--stop-signals',
        nargs='*',
        default=list(DEFAULT_STOP_SIGNALS),
        metavar='SIGNAL',
        help='signals that stop training at the next iteration boundary '
        f'after a checkpoint, exit status {PREEMPTED_EXIT_CODE} '
        '(PreemptionHook; default: SIGTERM SIGUSR1, what slurm and torchrun '
        'send before they kill; none given: the default actions)')
    return parse_runner_args(parser)


def has_accelerator() -> bool:
    """Whether mmengine's AmpOptimWrapper can run here."""
    return is_cuda_available() or is_npu_available() or is_mlu_available() \
        or is_musa_available()


@refusing()
def enable_amp(cfg: Config) -> None:
    """Select mixed precision training for this machine (as mmdet's tool,
    plus bfloat16 autocast when there is no accelerator)."""
    wrapper = cfg.optim_wrapper
    if wrapper.get('type',
                   'OptimWrapper') not in ('OptimWrapper', 'AmpOptimWrapper'):
        raise ValueError('--amp replaces optim_wrapper.type OptimWrapper, '
                         f'got {wrapper["type"]!r}')
    if has_accelerator():
        wrapper.type = 'AmpOptimWrapper'
        wrapper.setdefault('loss_scale', 'dynamic')
    else:
        wrapper.type = 'CPUAmpOptimWrapper'
        wrapper.pop('loss_scale', None)
        wrapper.pop('dtype', None)
        print_log(
            '--amp without a GPU: bfloat16 autocast on the CPU',
            logger='current')


def add_hook(cfg: Config, hook: dict) -> None:
    """Append ``hook`` to ``custom_hooks`` unless a hook of its type is
    there."""
    hooks = list(cfg.get('custom_hooks') or [])
    if all(h.get('type') != hook['type'] for h in hooks):
        hooks.append(hook)
    cfg.custom_hooks = hooks


def main() -> None:
    args = parse_args()
    with refusing(*INPUT_ERRORS, ImportError):  # the options and the config
        # first: a stop signal during the set-up ends the run cleanly
        STOP_SIGNALS.install(args.stop_signals)
        end_with_launcher(args.launcher)  # a killed torchrun ends its workers
        check_mmcv()  # mmcv ops built for another torch: say how to fix
        cfg = runner_config(args)

    # a crash or a full disk while saving keeps every earlier checkpoint
    replace_stock_hook(cfg, 'checkpoint', 'DurableCheckpointHook')
    if args.amp:
        enable_amp(cfg)
    if args.auto_scale_lr:
        if 'base_batch_size' not in (cfg.get('auto_scale_lr') or {}):
            raise Refused('--auto-scale-lr needs auto_scale_lr.'
                          'base_batch_size in the config.')
        cfg.auto_scale_lr.enable = True

    # One run per work dir; the main process holds it (before any check, so
    # that a second run names the first) and releases it before a
    # CPU-distributed worker's os._exit in finish_run.
    stop: Optional[Preempted] = None
    cpu_distributed = False
    try:
        with refusing(WorkDirLockedError, UnsafeCheckpointError,
                      CheckpointLoadError), \
                work_dir_lock(cfg.work_dir) if is_launcher_main(
                args.launcher) else nullcontext(), \
                safe_checkpoint_loading(args.trust_checkpoint):
            cpu_distributed, stop = train(cfg, args)
    except Preempted as error:  # during the checks, before any training
        stop = error
    if stop is not None:
        report_stop(stop, args.launcher)
    finish_run(cpu_distributed, 0 if stop is None else PREEMPTED_EXIT_CODE)


def report_stop(stop: Preempted, launcher: str) -> None:
    """Say (once per job) what a stop signal left behind."""
    detail = stop.message or ('before its first iteration: nothing was '
                              'trained and no checkpoint was written')
    message = (f'training stopped by {stop.signal_name} {detail} '
               f'(exit status {PREEMPTED_EXIT_CODE})')
    print_log(message, logger='current', level=logging.WARNING)
    if is_launcher_main(launcher):
        print(f'mmact: {message}', file=sys.stderr, flush=True)


@refusing()
def check_run(cfg: Config, args: argparse.Namespace) -> dict:
    """Check what the run will read and overwrite, before anything is
    written: the checkpoint it resumes or loads, the work dir, the
    pretrained weights and the data.

    Returns:
        dict: The checked datasets, for the Runner.
    """
    if args.resume is None and not cfg.get('resume') and \
            is_restart_of_recorded_run(cfg.work_dir):
        print_log(
            f'{run_identity()} was requeued or restarted: resuming its run '
            f'in {cfg.work_dir}',
            logger='current')
        args.resume = 'auto'
    if args.resume is not None:
        checkpoint = args.resume
        if checkpoint == 'auto':
            checkpoint = resume_checkpoint(cfg.work_dir)
        # Validate before the Runner starts writing into the work dir.
        if checkpoint is not None:
            check_checkpoint(checkpoint, resume=True)
        # nothing to resume: from scratch (mmengine would read
        # last_checkpoint again)
        cfg.resume = checkpoint is not None
        cfg.load_from = checkpoint
    else:
        if not (cfg.get('resume') or args.force):
            check_fresh_work_dir(cfg.work_dir)
        if cfg.get('load_from'):
            check_checkpoint(cfg.load_from, resume=bool(cfg.get('resume')))

    # a missing ImageNet backbone stops the run in seconds, before the
    # datasets (minutes on LVIS) are read; inits load_from replaces: warned
    for line in check_pretrained_paths(cfg):
        print_log(line, logger='current', level=logging.WARNING)
    splits = ('train', 'val') if cfg.get('val_cfg') else ('train', )
    check_data_paths(cfg, splits)
    # samples vs the heads, before the model is built; the Runner reuses them
    return check_datasets(cfg, splits, warn=is_launcher_main(args.launcher))


def train(cfg: Config,
          args: argparse.Namespace) -> Tuple[bool, Optional[Preempted]]:
    """Check what the run will read and overwrite, then train.

    Returns:
        tuple: Whether the run was CPU-distributed (for ``finish_run``), and
        the stop signal's ``Preempted`` if one stopped it.
    """
    with StartUp() as start_up:  # no garbage collections until it is over
        datasets = check_run(cfg, args)
        cpu_distributed = setup_cpu_distributed(cfg, args.launcher)
        # GPUs: before mmengine
        init_restarted_process_group(cfg, args.launcher)
        # load_from may cover part of the model (fine-tuning): warn, not stop
        add_hook(cfg, dict(type='CheckpointKeysHook', strict=False))
        if not args.no_exact_resume:
            add_hook(cfg, dict(type='ExactResumeHook'))
        # a diverged run stops before it writes a NaN checkpoint
        add_hook(cfg, dict(type='DivergenceGuardHook'))
        if args.stop_signals:
            add_hook(cfg,
                     dict(type='PreemptionHook', signals=args.stop_signals))
        if is_launcher_main(args.launcher):
            # its requeued self resumes (not refused)
            record_run(cfg.work_dir)

        runner = None
        try:
            runner = Runner.from_cfg(cfg) if 'runner_type' not in cfg else \
                RUNNERS.build(cfg)
            use_checked_datasets(runner, datasets)
            start_up.over()
            runner.train()
        except KeyError as error:  # a type= name no registry knows
            hint = unknown_type_hint(error, cfg.get('default_scope'))
            if hint is None:
                raise
            raise Refused(f'{one_line(error)} {hint}') from error
        except Preempted as stop:
            if runner is not None:
                runner.call_hook('after_run')  # close loggers and visualizers
            return cpu_distributed, stop
    return cpu_distributed, None


if __name__ == '__main__':
    run_tool(main)
