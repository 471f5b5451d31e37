"""Stop on a stop signal at an iteration boundary, after a checkpoint.

Slurm and torchrun send SIGTERM (slurm optionally SIGUSR1 first) and kill a
grace period later; mmengine has no handler, so everything trained since the
last periodic checkpoint is lost. :class:`PreemptionHook` records the signal
(:data:`~mmact.utils.preemption.STOP_SIGNALS`), lets the ranks agree at the
next iteration boundary, writes one durable checkpoint with the exact-resume
state and raises :class:`~mmact.utils.preemption.Preempted`, which the tools
turn into exit status 75. A checkpoint written in the middle of an epoch is
resumed in the middle of it: the trained batches are skipped by index, not
loaded again.
"""
import os.path as osp
from typing import Any, Iterator, Optional, Sequence

import torch
from mmengine.dist import all_reduce, barrier, get_world_size, \
    is_main_process
from mmengine.fileio import LocalBackend
from mmengine.hooks import CheckpointHook, Hook
from mmengine.logging import print_log
from mmengine.registry import HOOKS
from mmengine.runner import EpochBasedTrainLoop
from torch.utils.data import DataLoader

from mmact.utils.preemption import (DEFAULT_STOP_SIGNALS, STOP_SIGNALS,
                                    Preempted, parse_signal)
from .durable_checkpoint import save_durably, write_durably
from .exact_resume import (ExactResumeHook, SkipWithoutRandomness,
                           capture_random_state, restore_random_state)

__all__ = ['PreemptionHook', 'ResumedEpoch']


class _SkipBatches:
    """A batch sampler without its first ``skip`` batches (indices only:
    no sample is loaded for the skipped ones)."""

    def __init__(self, batch_sampler, skip: int) -> None:
        self.batch_sampler = batch_sampler
        self.skip = skip

    def __iter__(self) -> Iterator:
        batches = iter(self.batch_sampler)
        for _ in range(self.skip):
            next(batches, None)
        yield from batches

    def __len__(self) -> int:
        return len(self.batch_sampler) - self.skip


def _without_first_batches(loader: DataLoader, skip: int) -> DataLoader:
    """The same loading over ``loader``'s batches after the first ``skip``."""
    kwargs = dict(
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context,
        generator=loader.generator,
        persistent_workers=loader.persistent_workers,
        pin_memory_device=loader.pin_memory_device)
    if loader.num_workers:
        kwargs['prefetch_factor'] = loader.prefetch_factor
    return DataLoader(
        loader.dataset,
        batch_sampler=_SkipBatches(loader.batch_sampler, skip),
        **kwargs)


class ResumedEpoch:
    """The train dataloader for an epoch resumed after ``skip`` batches: it
    yields the rest of the epoch's batches (the sampler's order for this
    epoch is the uninterrupted run's) without drawing from the random
    generators the resumed state restored, and otherwise stands for the
    dataloader (length, dataset, sampler).

    Args:
        dataloader: The epoch loop's dataloader.
        skip (int): Batches of this epoch already trained.
    """

    def __init__(self, dataloader, skip: int) -> None:
        self.dataloader = dataloader
        self.skip = skip

    def __iter__(self) -> Iterator:
        # The uninterrupted run drew the loader's base seed at the epoch's
        # start, before the state that was saved and restored.
        state = capture_random_state()
        if isinstance(self.dataloader, DataLoader) and \
                self.dataloader.batch_sampler is not None:
            iterator = iter(_without_first_batches(self.dataloader, self.skip))
            restore_random_state(state)
            return iterator
        iterator = SkipWithoutRandomness(iter(self.dataloader), self.skip)
        restore_random_state(state)
        for _ in range(self.skip):
            next(iterator)
        return iterator

    def __len__(self) -> int:
        return len(self.dataloader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.dataloader, name)


@HOOKS.register_module()
class PreemptionHook(Hook):
    """Turn a stop signal during training into a checkpoint and a clean exit.

    Once training starts, the stop signals (``signals``) are recorded, not
    acted on where they land. After every training iteration, and every
    validation iteration during training, the ranks agree (one all-reduce of
    a flag) whether any of them received one; if so every rank stops there:
    the exact-resume state is captured (:class:`ExactResumeHook`), rank 0
    writes one checkpoint durably (``save_durably``: a partial file renamed
    into place, so a SIGKILL in the middle leaves the previous checkpoint
    the newest loadable one) and points ``last_checkpoint`` at it, the ranks
    wait for it, and :class:`~mmact.utils.preemption.Preempted` is raised
    (``tools/train.py`` exits with status 75).

    The checkpoint is named as the checkpoint hook names its own
    (``iter_120.pth``; ``epoch_3.pth`` at an epoch's end), or
    ``epoch_2_iter_37.pth`` in the middle of epoch 3, which resumes in the
    middle of that epoch. Where the checkpoint hook has just saved this very
    step, that checkpoint is used. A validation stopped half-way is not run
    again on resume (its metrics are lost; ``tools/test.py`` evaluates the
    checkpoint). Checkpoints written this way are not counted by
    ``max_keep_ckpts``.

    ``tools/train.py`` adds this hook and installs the handlers before it
    builds anything; other tools can add it to ``custom_hooks``.

    Args:
        signals (Sequence[str]): Names of the stop signals. Defaults to
            ``('SIGTERM', 'SIGUSR1')``; empty turns the hook off.
    """

    priority = 'LOWEST'  # after the other hooks of an iteration

    def __init__(self, signals: Sequence[str] = DEFAULT_STOP_SIGNALS) -> None:
        if isinstance(signals, str):
            signals = (signals, )
        for name in signals:
            parse_signal(name)
        self.signals = tuple(signals)
        self._training = False
        self._installed_here = False
        self._resumed_epoch: Optional[ResumedEpoch] = None

    def before_train(self, runner) -> None:
        """Record signals from now on; resume a stopped epoch where it
        stopped."""
        if not self.signals:
            return
        if not STOP_SIGNALS.installed:
            self._installed_here = STOP_SIGNALS.install(self.signals)
        STOP_SIGNALS.deferred = True
        self._training = True
        self._resume_in_epoch(runner)

    def after_train(self, runner) -> None:
        """Training is over: a signal now leaves nothing to save (and the
        handlers this hook installed go)."""
        self._training = False
        if self._installed_here:
            STOP_SIGNALS.uninstall()
            STOP_SIGNALS.reset()
            self._installed_here = False

    def after_train_epoch(self, runner) -> None:
        """The resumed epoch is over: the dataloader is the run's again."""
        if self._resumed_epoch is not None:
            loop = runner.train_loop
            loop.dataloader = self._resumed_epoch.dataloader
            del loop.run_iter
            self._resumed_epoch = None

    def after_train_iter(self,
                         runner,
                         batch_idx: int,
                         data_batch=None,
                         outputs=None) -> None:
        """Stop here when any rank received a stop signal."""
        if self._training and self._stop_agreed():
            self._stop(runner, runner.iter + 1, in_validation=False)

    def after_val_iter(self,
                       runner,
                       batch_idx: int,
                       data_batch=None,
                       outputs=None) -> None:
        """Stop a validation during training when any rank received one."""
        if self._training and self._stop_agreed():
            self._stop(runner, runner.iter, in_validation=True)

    @staticmethod
    def _stop_agreed() -> bool:
        flag = torch.tensor([int(STOP_SIGNALS.received is not None)])
        if get_world_size() > 1:
            all_reduce(flag, op='max')
        return bool(flag.item())

    def _resume_in_epoch(self, runner) -> None:
        loop = runner.train_loop
        if not isinstance(loop, EpochBasedTrainLoop):
            return
        per_epoch = len(loop.dataloader)
        done = runner.iter - runner.epoch * per_epoch
        if done <= 0:
            return
        if done > per_epoch:
            raise ValueError(
                f'PreemptionHook: the resumed checkpoint stopped after '
                f'{runner.iter} iterations in epoch {runner.epoch + 1}, '
                f'which has only {per_epoch} batches here: the train '
                'dataset or batch size differs from the stopped run\'s')
        print_log(
            f'PreemptionHook: resuming epoch {runner.epoch + 1} after its '
            f'first {done} of {per_epoch} batches',
            logger='current')
        self._resumed_epoch = ResumedEpoch(loop.dataloader, done)
        loop.dataloader = self._resumed_epoch
        run_iter = type(loop).run_iter
        loop.run_iter = lambda idx, batch: run_iter(loop, idx + done, batch)

    def _stop(self, runner, iters: int, in_validation: bool) -> None:
        """Checkpoint the first ``iters`` iterations and raise."""
        name = STOP_SIGNALS.received or 'a stop signal to another rank'
        loop = runner.train_loop
        epochs = runner.epoch
        hook = next((h for h in runner.hooks if isinstance(h, CheckpointHook)),
                    None)
        local = hook is not None and isinstance(hook.file_backend,
                                                LocalBackend)
        out_dir = hook.out_dir if local else runner.work_dir
        if not isinstance(loop, EpochBasedTrainLoop):
            filename = hook.filename_tmpl.format(iters) if local and \
                not hook.by_epoch else f'iter_{iters}.pth'
        elif iters == epochs * len(loop.dataloader):
            filename = hook.filename_tmpl.format(epochs) if local and \
                hook.by_epoch else f'epoch_{epochs}.pth'
        else:
            filename = f'epoch_{epochs}_iter_{iters}.pth'
        final = osp.join(out_dir, filename)
        # hook.last_ckpt: the same on every rank (capture is a collective)
        if not (local and hook.last_ckpt == final):
            if not in_validation:  # validation keeps the training's state
                for exact in runner.hooks:
                    if isinstance(exact, ExactResumeHook):
                        exact.capture(runner)
            pointer = osp.join(runner.work_dir, 'last_checkpoint')
            previous = open(pointer).read().strip() \
                if osp.isfile(pointer) else ''
            save_durably(
                final, lambda partial: runner.save_checkpoint(
                    out_dir,
                    partial,
                    meta=dict(epoch=epochs, iter=iters),
                    by_epoch=False,
                    backend_args=None),
                f'the last complete checkpoint is kept '
                f'({previous or "none: this was the first"})')
            if is_main_process():
                write_durably(pointer, final)
        barrier()  # no rank leaves before the checkpoint is complete
        where = 'during validation after' if in_validation else 'after'
        raise Preempted(
            name, f'{where} iteration {iters}: checkpoint {final}, which '
            '--resume continues from',
            checkpoint=final)
