"""Stop a run whose loss stopped being a number, before it saves that state.

Without it a diverged run (lr far too high, NaN inputs) logs ``loss: nan``
to its end, exits 0 and writes a NaN checkpoint at every interval; with
``max_keep_ckpts`` the rotation then deletes every finite one.
"""
import math
import os.path as osp
from typing import Dict, Optional

import torch
from mmengine.hooks import Hook
from mmengine.registry import HOOKS

__all__ = ['DivergenceError', 'DivergenceGuardHook']


class DivergenceError(RuntimeError):
    """The training loss was not finite for ``patience`` iterations."""


def _scalar(value) -> Optional[float]:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach())
    if isinstance(value, (int, float)):
        return float(value)
    return None


@HOOKS.register_module()
class DivergenceGuardHook(Hook):
    """Stop training after ``patience`` iterations in a row with a
    non-finite loss term, and never save a checkpoint in such a state.

    The error names the iteration, every loss term and the last good
    checkpoint. Runs before the checkpoint and logger hooks of the same
    event, so the diverged state is not written. ``tools/train.py`` adds it
    (patience from the optimizer wrapper); a config's own
    ``custom_hooks=[dict(type='DivergenceGuardHook', patience=N)]`` wins.

    Args:
        patience (int, optional): Non-finite iterations in a row that stop
            the run. None: 1, or 10 under a loss scaler (mmengine's
            ``AmpOptimWrapper``), which skips the optimizer step itself when
            the scaled gradients overflow and recovers by lowering the scale:
            only a persistent non-finite loss stops the run then.
        check_parameters (bool): Before each checkpoint is written, also
            refuse one whose floating-point weights are not finite (one pass
            over the state dict per save). Defaults to True.
    """

    priority = 'ABOVE_NORMAL'

    def __init__(self,
                 patience: Optional[int] = None,
                 check_parameters: bool = True) -> None:
        if patience is not None and (isinstance(patience, bool)
                                     or not isinstance(patience, int)
                                     or patience < 1):
            raise ValueError('DivergenceGuardHook: patience must be a '
                             f'positive int or None, got {patience!r}')
        self.patience = patience
        self.check_parameters = check_parameters
        self._streak = 0
        self._terms: Dict[str, float] = {}

    def before_train(self, runner) -> None:
        """Resolve ``patience`` from the optimizer wrapper."""
        if self.patience is None:
            scaler = getattr(runner.optim_wrapper, 'loss_scaler', None)
            self.patience = 10 if scaler is not None else 1
        self._streak = 0

    def after_train_iter(self,
                         runner,
                         batch_idx: int,
                         data_batch=None,
                         outputs: Optional[dict] = None) -> None:
        """Count iterations with a non-finite loss term; stop at
        ``patience``."""
        terms = {
            key: _scalar(value)
            for key, value in (outputs or {}).items() if 'loss' in key
        }
        terms = {k: v for k, v in terms.items() if v is not None}
        if all(math.isfinite(v) for v in terms.values()):
            self._streak = 0
            return
        self._streak += 1
        self._terms = terms
        if self._streak >= self.patience:
            raise DivergenceError(self._message(runner))

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        """Refuse to write a checkpoint of a diverging run."""
        if self._streak:
            raise DivergenceError(self._message(runner))
        if not self.check_parameters:
            return
        bad = [
            key for key, value in checkpoint.get('state_dict', {}).items()
            if isinstance(value, torch.Tensor) and value.is_floating_point()
            and not torch.isfinite(value).all()
        ]
        if bad:
            raise DivergenceError(
                f'training diverged by iteration {runner.iter}: the weights '
                f'hold non-finite values ({len(bad)} tensors, first: '
                f'{", ".join(bad[:3])}); the checkpoint was not written. '
                f'{self._advice(runner)}')

    def _last_good(self, runner) -> str:
        pointer = osp.join(runner.work_dir, 'last_checkpoint')
        if osp.isfile(pointer):
            named = open(pointer).read().strip()
            if named:
                return named
        return 'none (no checkpoint was written before)'

    def _advice(self, runner) -> str:
        return (f'The last good checkpoint is {self._last_good(runner)}. '
                'Lower the learning rate (optim_wrapper.optimizer.lr), clip '
                'gradients (optim_wrapper.clip_grad) or check the data, then '
                'resume from it (--resume) or start again.')

    def _message(self, runner) -> str:
        terms = ', '.join(f'{k}={v:.4g}' for k, v in self._terms.items())
        return (f'training diverged at iteration {runner.iter + 1} (epoch '
                f'{runner.epoch + 1}): non-finite loss for {self._streak} '
                f'iteration(s) in a row (DivergenceGuardHook patience='
                f'{self.patience}); loss terms: {terms}. No checkpoint of '
                f'this state was written. {self._advice(runner)}')
