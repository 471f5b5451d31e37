"""Make ``--resume`` continue a run exactly as if it had not stopped.

mmengine saves the model, optimizer, schedulers and seed, but on resume it
re-seeds every generator, so the dropout masks, augmentations and shuffles
after the resume point differ from those of an uninterrupted run.
:class:`ExactResumeHook` saves the generator states of every process into
each checkpoint and restores them on resume.
"""
import logging
import random
from typing import Any, Dict, Iterator, List, Optional

import numpy as np
import torch
from mmengine.dist import all_gather_object, get_rank, get_world_size
from mmengine.hooks import CheckpointHook, Hook
from mmengine.logging import print_log
from mmengine.registry import HOOKS

__all__ = [
    'capture_random_state', 'restore_random_state', 'ExactResumeHook',
    'SkipWithoutRandomness'
]

STATE_KEY = 'random_state'


def _sampler(dataloader) -> Optional[Any]:
    """The sampler that shuffles, also behind a batch sampler."""
    for sampler in (getattr(dataloader, 'sampler', None),
                    getattr(
                        getattr(dataloader, 'batch_sampler', None), 'sampler',
                        None)):
        if hasattr(sampler, 'seed'):
            return sampler
    return None


def capture_random_state(dataloader=None) -> Dict[str, Any]:
    """The generator states of this process, in types ``torch.load`` reads
    with ``weights_only=True`` (tuples, lists, ints, tensors).

    Args:
        dataloader (DataLoader, optional): Its sampler's ``seed`` is saved
            too (mmengine's samplers shuffle with ``seed + epoch``).

    Returns:
        dict: ``python``, ``numpy``, ``torch``, optionally ``cuda`` (one
        state per device) and ``sampler_seed``.
    """
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = dict(
        python=random.getstate(),
        numpy=(kind, keys.tolist(), pos, has_gauss, gauss),
        torch=torch.get_rng_state())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state['cuda'] = torch.cuda.get_rng_state_all()
    sampler = _sampler(dataloader)
    if sampler is not None and isinstance(sampler.seed, int):
        state['sampler_seed'] = sampler.seed
    return state


def restore_random_state(state: Dict[str, Any], dataloader=None) -> None:
    """Set the generators (and the sampler seed) from
    :func:`capture_random_state`'s result.

    Args:
        state (dict): A captured state.
        dataloader (DataLoader, optional): Receives ``sampler_seed``.
    """
    version, internal, gauss = state['python']
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, gauss = state['numpy']
    np.random.set_state(
        (kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state['torch'])
    if 'cuda' in state:
        if torch.cuda.is_available() and \
                torch.cuda.device_count() == len(state['cuda']):
            torch.cuda.set_rng_state_all(state['cuda'])
        else:
            print_log(
                f'ExactResumeHook: the checkpoint holds {len(state["cuda"])} '
                'CUDA generator states but this process sees '
                f'{torch.cuda.device_count()} devices; CUDA randomness is '
                'not restored.',
                logger='current',
                level=logging.WARNING)
    sampler = _sampler(dataloader)
    if sampler is not None and 'sampler_seed' in state:
        sampler.seed = state['sampler_seed']


class SkipWithoutRandomness:
    """An iterator whose first ``skip`` items are drawn without touching the
    generators, so skipping already-trained batches on resume leaves the
    restored state as it was saved."""

    def __init__(self, iterator: Iterator, skip: int) -> None:
        self.iterator = iterator
        self.skip = skip

    def __iter__(self) -> 'SkipWithoutRandomness':
        return self

    def __next__(self) -> Any:
        if self.skip <= 0:
            return next(self.iterator)
        self.skip -= 1
        state = capture_random_state()
        try:
            return next(self.iterator)
        finally:
            restore_random_state(state)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.iterator, name)


@HOOKS.register_module()
class ExactResumeHook(Hook):
    """Save the random state into checkpoints and restore it on resume.

    Every checkpoint gets, per process, the states of python's ``random``,
    numpy, torch (CPU and every CUDA device) and the train sampler's seed.
    On ``--resume`` each process gets its own state back right before the
    first resumed iteration, so an interrupted run continues bit for bit
    like an uninterrupted one (with ``randomness.deterministic=True`` and the
    same number of processes). To keep that true across validation, each
    validation runs on a copy of the generators and leaves them as they
    were. Checkpoints loaded with ``load_from`` (not resumed) do not touch
    the random state.

    Limits: a sampler that draws its order before training starts (an
    ``InfiniteSampler`` behind multi-process loading) keeps the seed it was
    built with; the states are captured where mmengine's ``CheckpointHook``
    saves (end of epoch, or every ``interval`` iterations when it saves by
    iteration, and before validation for "best" checkpoints).

    ``tools/train.py`` adds this hook; in other tools use
    ``custom_hooks = [dict(type='ExactResumeHook')]``.
    """

    # Capture after every other hook of an epoch / iteration has run, but
    # before CheckpointHook (VERY_LOW = 90) saves; restore after the other
    # hooks' before_train.
    priority = 80

    def __init__(self) -> None:
        self._states: Optional[List[Dict[str, Any]]] = None
        self._resumed: Optional[List[Dict[str, Any]]] = None
        self._val_state: Optional[Dict[str, Any]] = None
        self._by_iter: Optional[CheckpointHook] = None
        self._training = False

    def capture(self, runner) -> None:
        """Capture every process's state for the next checkpoint (a
        collective: every rank calls it), e.g. where a hook saves outside
        ``CheckpointHook``'s cadence.

        Args:
            runner (Runner): The training runner.
        """
        state = capture_random_state(runner.train_dataloader)
        self._states = all_gather_object(state) if get_world_size() > 1 \
            else [state]

    def before_train(self, runner) -> None:
        """Find the saving cadence; on resume, restore the saved state."""
        self._training = True
        hooks = [h for h in runner.hooks if isinstance(h, CheckpointHook)]
        self._by_iter = hooks[0] if hooks and not hooks[0].by_epoch else None
        if self._resumed is None or runner.iter == 0:
            return
        states, self._resumed = self._resumed, None
        if len(states) != get_world_size():
            print_log(
                f'ExactResumeHook: the checkpoint was written by '
                f'{len(states)} processes, this run has {get_world_size()}; '
                'the random state is not restored and the resumed run is '
                'not exact.',
                logger='current',
                level=logging.WARNING)
            return
        restore_random_state(states[get_rank()], runner.train_dataloader)
        loop = runner.train_loop
        if hasattr(loop, 'dataloader_iterator'):
            # IterBasedTrainLoop draws the trained batches again to skip
            # them; that must not consume the restored state.
            loop.dataloader_iterator = SkipWithoutRandomness(
                loop.dataloader_iterator, runner.iter)

    def after_train_iter(self,
                         runner,
                         batch_idx: int,
                         data_batch=None,
                         outputs=None) -> None:
        """Capture where an iteration-based CheckpointHook may save."""
        hook = self._by_iter
        if hook is not None and (self.every_n_train_iters(
                runner, hook.interval) or self.is_last_train_iter(runner)):
            self.capture(runner)

    def after_train_epoch(self, runner) -> None:
        """Capture where an epoch-based CheckpointHook saves."""
        self.capture(runner)

    def before_val(self, runner) -> None:
        """Keep the generators for after validation ("best" checkpoints are
        saved during it with this state)."""
        if not self._training:
            return
        self.capture(runner)
        self._val_state = capture_random_state()

    def after_val(self, runner) -> None:
        """Give the training the generators it had before validation."""
        if self._val_state is not None:
            restore_random_state(self._val_state)
            self._val_state = None

    def before_save_checkpoint(self, runner, checkpoint: Dict) -> None:
        """Store every process's state (rank 0 writes the checkpoint)."""
        checkpoint[STATE_KEY] = self._states or [
            capture_random_state(
                runner.train_dataloader if self._training else None)
        ]

    def after_train(self, runner) -> None:
        """Validation after training is not followed by training."""
        self._training = False

    def after_load_checkpoint(self, runner, checkpoint: Dict) -> None:
        """Keep the saved states for :meth:`before_train`."""
        self._resumed = checkpoint.get(STATE_KEY)
