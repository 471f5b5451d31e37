"""A hook the preemption tests load into train.py's processes.

``STOP_AT_ITER=k``: after iteration ``k`` rank 0 sends ``STOP_SIGNAL``
(default SIGTERM) to its whole process group (every rank and the launcher,
as slurm signals every task of a job). Every rank writes the number of
iterations it completed to ``done_rank{r}`` in the work dir, and its
parameters after training to ``params_rank{r}.pth``. ``STEP_SLEEP`` (s)
slows each iteration down. ``KILL_AT_ITER=k``: rank 1 of torchrun's first
attempt ends itself with SIGKILL after iteration ``k`` (a failed node).
``SIGNAL_BEFORE_TRAIN=1``: SIGTERM to this process when the run starts,
before any iteration; ``STOP_AT_TEST_ITER=k`` / ``STOP_AT_VAL_ITER=k``:
SIGTERM after test / (the first) validation iteration ``k``.

mmengine's iteration-based loop sleeps 2 s whenever its dataloader starts
another pass (against a deadlock of dataloader workers, which the tiny
configs do not start); the probe leaves that sleep out, as it would add a
second to each iteration of their 2-iteration passes and changes nothing
the tests check.
"""
import os
import os.path as osp
import signal
import time

import torch
from mmengine.dist import get_rank
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS
from mmengine.runner import loops


class _TimeWithoutSleep:
    """The ``time`` module, but ``sleep`` returns at once."""

    def __getattr__(self, name: str):
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        pass


loops.time = _TimeWithoutSleep()


@HOOKS.register_module()
class StopProbeHook(Hook):
    """Signal the job at one iteration; record what each rank trained."""

    priority = 'NORMAL'  # before PreemptionHook acts on the signal

    def after_train_iter(self,
                         runner,
                         batch_idx,
                         data_batch=None,
                         outputs=None) -> None:
        with open(osp.join(runner.work_dir, f'done_rank{get_rank()}'),
                  'w') as f:
            f.write(str(runner.iter + 1))
        time.sleep(float(os.environ.get('STEP_SLEEP', 0)))
        if get_rank() == 1 and runner.iter + 1 == int(
                os.environ.get('KILL_AT_ITER', -1)) and os.environ.get(
                    'TORCHELASTIC_RESTART_COUNT') == '0':
            os.kill(os.getpid(), signal.SIGKILL)
        stop_at = int(os.environ.get('STOP_AT_ITER', -1))
        if get_rank() == 0 and runner.iter + 1 == stop_at:
            name = os.environ.get('STOP_SIGNAL', 'SIGTERM')
            os.killpg(os.getpgid(0), signal.Signals[name])

    def before_run(self, runner) -> None:
        if os.environ.get('SIGNAL_BEFORE_TRAIN'):
            os.kill(os.getpid(), signal.SIGTERM)

    def after_test_iter(self,
                        runner,
                        batch_idx,
                        data_batch=None,
                        outputs=None) -> None:
        if batch_idx + 1 == int(os.environ.get('STOP_AT_TEST_ITER', -1)):
            os.kill(os.getpid(), signal.SIGTERM)

    def after_val_iter(self,
                       runner,
                       batch_idx,
                       data_batch=None,
                       outputs=None) -> None:
        if batch_idx + 1 == int(os.environ.pop('STOP_AT_VAL_ITER', -1)):
            os.kill(os.getpid(), signal.SIGTERM)

    def after_train(self, runner) -> None:
        model = runner.model.module if is_model_wrapper(
            runner.model) else runner.model
        torch.save({
            k: v.detach().clone()
            for k, v in model.named_parameters()
        }, osp.join(runner.work_dir, f'params_rank{get_rank()}.pth'))
