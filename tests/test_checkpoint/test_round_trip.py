"""Every kind of checkpoint mmact's training writes loads through the
allow-list, equal to what full unpickling gives, and resumes under it."""
import pytest
import torch

import mmact  # noqa: F401  (registers the hooks and wrappers)
from mmact.checkpoint import safe_checkpoint_loading, safe_load
from mmact.testing import tiny_runner

KINDS = {
    'plain': {},
    'exact resume + EMA + durable':
    dict(
        custom_hooks=[dict(type='ExactResumeHook'),
                      dict(type='EMAHook')],
        default_hooks=dict(
            logger=dict(type='LoggerHook', interval=1),
            checkpoint=dict(type='DurableCheckpointHook', interval=1))),
    'bfloat16 AMP on the CPU':
    dict(
        optim_wrapper=dict(
            type='CPUAmpOptimWrapper',
            optimizer=dict(type='SGD', lr=0.01, momentum=0.9))),
}


@pytest.mark.parametrize('kind', KINDS)
def test_training_checkpoints_load_and_resume_through_the_allow_list(
        tmp_path, kind, same):
    tiny_runner(tmp_path / 'first', max_epochs=1, **KINDS[kind]).train()
    path = tmp_path / 'first' / 'epoch_1.pth'
    ours = safe_load(path, map_location='cpu')
    assert same(ours, torch.load(path, map_location='cpu', weights_only=False))
    runner = tiny_runner(
        tmp_path / 'second',
        max_epochs=2,
        load_from=str(path),
        resume=True,
        **KINDS[kind])
    with safe_checkpoint_loading():
        runner.train()
    assert runner.epoch == 2
