"""DurableCheckpointHook: complete checkpoints only, old ones deleted after
the new one is written, failed writes named and cleaned up."""
import errno
import os
import subprocess
import sys

import pytest
import torch
from mmengine.config import Config
from mmengine.evaluator import BaseMetric
from mmengine.fileio.backends.local_backend import LocalBackend

from mmact.engine.hooks import replace_stock_hook, write_durably
from mmact.testing import tiny_runner


def _hooks(checkpoint_type='DurableCheckpointHook', **kwargs):
    return dict(
        logger=dict(type='LoggerHook', interval=1),
        checkpoint=dict(
            dict(type=checkpoint_type, interval=1, max_keep_ckpts=1),
            **kwargs))


def _load(path):
    return torch.load(path, map_location='cpu', weights_only=False)


def _files(folder):
    return sorted(p.name for p in folder.iterdir() if p.is_file())


def _full_disk_on_save(monkeypatch, n, name_part=''):
    """The ``n``-th checkpoint write (of those whose path holds
    ``name_part``) stores half of its bytes and fails as a full disk does."""
    put, calls = LocalBackend.put, []

    def failing_put(self, obj, filepath):
        if name_part in filepath:
            calls.append(filepath)
        if name_part in filepath and len(calls) == n:
            with open(filepath, 'wb') as f:
                f.write(obj[:len(obj) // 2])
            raise OSError(errno.ENOSPC, 'No space left on device')
        put(self, obj, filepath)

    monkeypatch.setattr(LocalBackend, 'put', failing_put)
    return calls


def test_keeps_the_newest_and_names_them(tmp_path):
    run = tmp_path / tmp_path.name  # a unique experiment name
    tiny_runner(run, 3, default_hooks=_hooks(max_keep_ckpts=2)).train()
    assert [f for f in _files(run) if not f.endswith('.py')
            ] == ['epoch_2.pth', 'epoch_3.pth', 'last_checkpoint']
    assert (run / 'last_checkpoint').read_text() == str(run / 'epoch_3.pth')
    checkpoint = _load(run / 'epoch_3.pth')
    assert checkpoint['meta']['epoch'] == 3
    assert checkpoint['message_hub']['runtime_info']['keep_ckpt_ids'] == [2, 3]


def test_full_disk_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    run = tmp_path / tmp_path.name  # a unique experiment name
    calls = _full_disk_on_save(monkeypatch, 2)
    with pytest.raises(OSError) as info:
        tiny_runner(run, 3, default_hooks=_hooks()).train()
    assert info.value.errno == errno.ENOSPC
    message = str(info.value)
    assert f'could not write the checkpoint {run / "epoch_2.pth"}' in message
    assert 'No space left on device' in message
    assert f'the last complete checkpoint is kept ({run / "epoch_1.pth"})' \
        in message and '--resume' in message
    assert calls[-1] == str(run / '.epoch_2.pth.partial')
    assert [f for f in _files(run)
            if not f.endswith('.py')] == ['epoch_1.pth', 'last_checkpoint']
    assert (run / 'last_checkpoint').read_text() == str(run / 'epoch_1.pth')
    assert _load(run / 'epoch_1.pth')['meta']['epoch'] == 1


def test_the_stock_hook_loses_it_under_the_same_fault(tmp_path, monkeypatch):
    """What the hook fixes (and proof that the fault above hits the write):
    mmengine deletes epoch_1.pth first and leaves a truncated epoch_2.pth."""
    run = tmp_path / tmp_path.name  # a unique experiment name
    _full_disk_on_save(monkeypatch, 2)
    with pytest.raises(OSError, match='No space left'):
        tiny_runner(run, 3, default_hooks=_hooks('CheckpointHook')).train()
    assert 'epoch_1.pth' not in _files(run)
    with pytest.raises(Exception):
        _load(run / 'epoch_2.pth')


class _RisingScore(BaseMetric):
    """A score that improves every validation: each epoch has a new best."""

    def __init__(self):
        super().__init__()
        self.validations = 0

    def process(self, data_batch, data_samples):
        self.results.append(0)

    def compute_metrics(self, results):
        self.validations += 1
        return dict(score=float(self.validations))


def _validating(run, epochs):
    """A tiny run that validates every epoch and keeps the best
    checkpoint."""
    return tiny_runner(
        run,
        epochs,
        default_hooks=_hooks(save_best='score', rule='greater'),
        val_evaluator=[_RisingScore()])


def test_best_checkpoint_replaced_after_the_new_one_is_complete(tmp_path):
    run = tmp_path / tmp_path.name  # a unique experiment name
    _validating(run, 3).train()
    assert sorted(p.name for p in run.glob('*.pth')) == [
        'best_score_epoch_3.pth', 'epoch_3.pth'
    ]
    assert _load(run / 'best_score_epoch_3.pth')['meta']['epoch'] == 3


def test_full_disk_keeps_the_previous_best_checkpoint(tmp_path, monkeypatch):
    run = tmp_path / tmp_path.name  # a unique experiment name
    _full_disk_on_save(monkeypatch, 2, name_part='best_')
    with pytest.raises(OSError) as info:
        _validating(run, 3).train()
    message = str(info.value)
    assert f'could not write the checkpoint {run / "best_score_epoch_2.pth"}' \
        in message and 'the previous best checkpoint is kept' in message
    assert _load(run / 'best_score_epoch_1.pth')['meta']['epoch'] == 1
    assert not (run / 'best_score_epoch_2.pth').exists()
    assert not list(run.glob('.*partial'))


def test_killed_while_saving_leaves_a_resumable_work_dir(tmp_path):
    """The process dies half-way through writing epoch_2.pth (subprocess);
    a resumed run starts from epoch_1.pth and finishes."""
    run = tmp_path / tmp_path.name  # a unique experiment name
    code = ('import os\n'
            'from mmengine.fileio.backends.local_backend import LocalBackend\n'
            'from mmact.testing import tiny_runner\n'
            'put, calls = LocalBackend.put, []\n'
            'def dying_put(self, obj, path):\n'
            '    calls.append(path)\n'
            '    if len(calls) == 2:\n'
            '        open(path, "wb").write(obj[:len(obj) // 2])\n'
            '        os._exit(3)\n'
            '    put(self, obj, path)\n'
            'LocalBackend.put = dying_put\n'
            f'tiny_runner({str(run)!r}, 3, default_hooks={_hooks()!r})'
            '.train()\n')
    out = subprocess.run([sys.executable, '-c', code],
                         capture_output=True,
                         text=True,
                         timeout=300)
    assert out.returncode == 3, out.stderr[-3000:]
    assert (run / 'last_checkpoint').read_text() == str(run / 'epoch_1.pth')
    assert _load(run / 'epoch_1.pth')['meta']['epoch'] == 1
    runner = tiny_runner(run, 3, default_hooks=_hooks(), resume=True)
    runner.train()
    assert runner.epoch == 3
    assert [f for f in _files(run) if f.endswith('.pth')] == ['epoch_3.pth']
    assert not list(run.glob('.*partial'))


@pytest.mark.parametrize('given,want', [
    (None, dict(type='DurableCheckpointHook', interval=1)),
    (dict(type='CheckpointHook', interval=2, max_keep_ckpts=3),
     dict(type='DurableCheckpointHook', interval=2, max_keep_ckpts=3)),
    (dict(type='mmengine.CheckpointHook',
          by_epoch=False), dict(type='DurableCheckpointHook', by_epoch=False)),
    (dict(type='MyCheckpointHook'), dict(type='MyCheckpointHook')),
])
def test_replace_stock_hook(given, want):
    cfg = Config(
        dict(default_hooks={} if given is None else dict(checkpoint=given)))
    replace_stock_hook(cfg, 'checkpoint', 'DurableCheckpointHook')
    assert cfg.default_hooks.checkpoint.to_dict() == want


def test_replace_stock_hook_leaves_a_disabled_hook_and_names_keys():
    cfg = Config(dict(default_hooks=dict(checkpoint=None)))
    replace_stock_hook(cfg, 'checkpoint', 'DurableCheckpointHook')
    assert cfg.default_hooks.checkpoint is None
    with pytest.raises(ValueError, match=r"\['checkpoint', 'logger'\]"):
        replace_stock_hook(cfg, 'timer', 'X')


def test_write_durably_replaces_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / 'last_checkpoint'
    write_durably(str(path), 'a')
    write_durably(str(path), 'b')
    assert path.read_text() == 'b'

    def broken_replace(src, dst):
        raise OSError(errno.EACCES, 'Permission denied')

    monkeypatch.setattr(os, 'replace', broken_replace)
    with pytest.raises(OSError, match='Permission denied'):
        write_durably(str(path), 'c')
    assert path.read_text() == 'b'
    assert _files(tmp_path) == ['last_checkpoint']
