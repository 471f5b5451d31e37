"""DivergenceGuardHook: a non-finite loss stops the run before a checkpoint
of that state is written; patience; loss scalers; bad arguments."""
import math
from types import SimpleNamespace

import pytest
import torch

from mmact.engine.hooks import DivergenceError, DivergenceGuardHook
from mmact.testing import tiny_runner

HOOKS = dict(
    logger=dict(type='LoggerHook', interval=1),
    checkpoint=dict(type='DurableCheckpointHook', interval=1))


def _runner(tmp_path, lr, guard=True, **guard_args):
    return tiny_runner(
        tmp_path / tmp_path.name,
        40,
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=lr, momentum=0.9)),
        default_hooks=HOOKS,
        custom_hooks=[dict(type='DivergenceGuardHook', **guard_args)]
        if guard else None)


def _finite(path) -> bool:
    state = torch.load(path, weights_only=False)['state_dict']
    return all(torch.isfinite(v).all() for v in state.values())


def test_huge_lr_stops_with_no_non_finite_checkpoint(tmp_path):
    runner = _runner(tmp_path, lr=1e6)
    with pytest.raises(DivergenceError) as info:
        runner.train()
    message = str(info.value)
    assert f'training diverged at iteration {runner.iter + 1}' in message
    assert 'loss terms: loss=' in message and 'patience=1' in message
    assert 'optim_wrapper.optimizer.lr' in message
    work_dir = tmp_path / tmp_path.name
    saved = sorted(work_dir.glob('*.pth'))
    assert saved and all(_finite(p) for p in saved)
    last = (work_dir / 'last_checkpoint').read_text()
    assert f'The last good checkpoint is {last}' in message


def test_without_the_guard_the_run_saves_nan(tmp_path):
    """What the guard prevents (and proof that lr=1e6 diverges here)."""
    _runner(tmp_path, lr=1e6, guard=False).train()
    work_dir = tmp_path / tmp_path.name
    assert not _finite(work_dir / 'epoch_40.pth')


def test_a_healthy_run_is_not_stopped(tmp_path):
    runner = _runner(tmp_path, lr=0.01)
    runner.train()
    assert runner.epoch == 40


def _fake_runner(scaler=None):
    return SimpleNamespace(
        iter=6,
        epoch=2,
        work_dir='/nowhere',
        optim_wrapper=SimpleNamespace(loss_scaler=scaler))


def _iters(hook, runner, losses):
    for loss in losses:
        hook.after_train_iter(
            runner,
            0,
            outputs=dict(loss=torch.tensor(loss), acc=torch.tensor(math.nan)))


def test_patience_counts_iterations_in_a_row():
    hook, runner = DivergenceGuardHook(patience=3), _fake_runner()
    hook.before_train(runner)
    _iters(hook, runner, [1.0, math.nan, math.nan, 1.0, math.inf, 2.0])
    with pytest.raises(DivergenceError, match=r'3 iteration\(s\) in a row'):
        _iters(hook, runner, [math.nan, math.nan, math.nan])


def test_non_loss_outputs_are_ignored():
    hook, runner = DivergenceGuardHook(), _fake_runner()
    hook.before_train(runner)
    _iters(hook, runner, [1.0] * 3)  # acc is nan every time


def test_a_loss_scaler_gets_patience_10():
    """mmengine's AmpOptimWrapper skips the step on overflow itself."""
    hook, runner = DivergenceGuardHook(), _fake_runner(scaler=object())
    hook.before_train(runner)
    assert hook.patience == 10
    _iters(hook, runner, [math.inf] * 9 + [1.0] + [math.inf] * 9)
    with pytest.raises(DivergenceError, match='patience=10'):
        _iters(hook, runner, [math.inf])
    plain = DivergenceGuardHook()
    plain.before_train(_fake_runner())
    assert plain.patience == 1


def test_a_checkpoint_with_non_finite_weights_is_refused():
    hook, runner = DivergenceGuardHook(), _fake_runner()
    hook.before_train(runner)
    checkpoint = dict(state_dict=dict(w=torch.tensor([1.0, math.nan])))
    with pytest.raises(
            DivergenceError,
            match=r'non-finite values \(1 '
            r'tensors, first: w\); the checkpoint was not'):
        hook.before_save_checkpoint(runner, checkpoint)
    DivergenceGuardHook(check_parameters=False).before_save_checkpoint(
        runner, checkpoint)


@pytest.mark.parametrize('patience', [0, -1, 1.5, True, '3'])
def test_bad_patience(patience):
    with pytest.raises(ValueError, match='patience must be a positive int'):
        DivergenceGuardHook(patience=patience)
