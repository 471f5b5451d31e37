"""resume_checkpoint / check_fresh_work_dir: --resume finds a complete
checkpoint, a new run never overwrites an earlier one's."""
import logging
import shutil

import pytest
import torch
from mmengine.logging import MMLogger

from mmact.testing import tiny_runner
from mmact.utils.preflight import (RUN_MARKER, check_fresh_work_dir,
                                   checkpoints_in, is_restart_of_recorded_run,
                                   record_run, resume_checkpoint)


@pytest.fixture(scope='module')
def three_epochs(tmp_path_factory):
    """A work dir with epoch_1..3.pth and last_checkpoint -> epoch_3."""
    run = tmp_path_factory.mktemp('resume') / 'three_epochs'
    tiny_runner(
        run,
        3,
        default_hooks=dict(
            logger=dict(type='LoggerHook', interval=1),
            checkpoint=dict(type='DurableCheckpointHook',
                            interval=1))).train()
    return run


@pytest.fixture
def work_dir(three_epochs, tmp_path):
    """A copy of the three-epoch work dir to damage."""
    copy = tmp_path / 'run'
    copy.mkdir()
    for path in three_epochs.glob('*.pth'):
        shutil.copy(path, copy / path.name)
    (copy / 'last_checkpoint').write_text(str(copy / 'epoch_3.pth'))
    return copy


@pytest.fixture
def log(caplog):
    logger = MMLogger.get_current_instance()
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO)
    yield caplog
    logger.removeHandler(caplog.handler)


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def test_order_is_by_step_then_time(work_dir):
    (work_dir / 'epoch_10.pth').write_bytes(b'')
    assert [p.rsplit('/', 1)[1] for p in checkpoints_in(str(work_dir))
            ] == ['epoch_10.pth', 'epoch_3.pth', 'epoch_2.pth', 'epoch_1.pth']


def test_last_checkpoint_is_used_when_complete(work_dir):
    (work_dir / 'last_checkpoint').write_text(str(work_dir / 'epoch_2.pth'))
    assert resume_checkpoint(str(work_dir)) == str(work_dir / 'epoch_2.pth')


@pytest.mark.parametrize('pointer,why', [(None, 'there is no'),
                                         ('', 'is empty')])
def test_no_or_empty_last_checkpoint_takes_the_newest(work_dir, log, pointer,
                                                      why):
    if pointer is None:
        (work_dir / 'last_checkpoint').unlink()
    else:
        (work_dir / 'last_checkpoint').write_text(pointer)
    assert resume_checkpoint(str(work_dir)) == str(work_dir / 'epoch_3.pth')
    assert why in log.text and 'resuming from' in log.text


def test_truncated_checkpoints_are_skipped_and_named(work_dir, log):
    _truncate(work_dir / 'epoch_3.pth')
    _truncate(work_dir / 'epoch_2.pth')
    assert resume_checkpoint(str(work_dir)) == str(work_dir / 'epoch_1.pth')
    assert 'names ' + str(work_dir / 'epoch_3.pth') in log.text
    assert 'skipped as incomplete: epoch_3.pth, epoch_2.pth' in log.text
    checkpoint = torch.load(
        resume_checkpoint(str(work_dir)), weights_only=False)
    assert checkpoint['meta']['epoch'] == 1


def test_nothing_complete_starts_afresh_and_says_so(work_dir, log):
    for path in work_dir.glob('*.pth'):
        _truncate(path)
    assert resume_checkpoint(str(work_dir)) is None
    assert 'holds no complete checkpoint' in log.text
    assert 'starts from scratch' in log.text


def test_resumed_run_continues_from_the_found_checkpoint(work_dir):
    """A Runner resumed from what resume_checkpoint found continues at the
    next epoch and rewrites none of the earlier checkpoints."""
    (work_dir / 'last_checkpoint').unlink()
    (work_dir / 'epoch_3.pth').unlink()
    before = (work_dir / 'epoch_1.pth').read_bytes()
    found = resume_checkpoint(str(work_dir))
    runner = tiny_runner(
        work_dir,
        3,
        load_from=found,
        resume=True,
        default_hooks=dict(checkpoint=dict(type='DurableCheckpointHook')))
    runner.train()
    assert runner.epoch == 3
    assert (work_dir / 'epoch_1.pth').read_bytes() == before


def test_a_new_run_is_refused_where_checkpoints_are(work_dir, tmp_path):
    with pytest.raises(FileExistsError) as info:
        check_fresh_work_dir(str(work_dir))
    message = str(info.value)
    assert str(work_dir) in message
    assert 'epoch_3.pth, epoch_2.pth, epoch_1.pth' in message
    for way in ('--resume', '--work-dir', '--force'):
        assert way in message
    check_fresh_work_dir(str(tmp_path / 'new'))  # absent: fine


def test_a_stop_in_the_middle_of_an_epoch_orders_between_epochs(tmp_path):
    for name in ('epoch_2.pth', 'epoch_1_iter_37.pth', 'epoch_1.pth'):
        (tmp_path / name).write_bytes(b'')  # the oldest written last
    assert [p.rsplit('/', 1)[1] for p in checkpoints_in(str(tmp_path))] \
        == ['epoch_2.pth', 'epoch_1_iter_37.pth', 'epoch_1.pth']


def test_a_requeued_job_is_told_from_a_new_one(tmp_path):
    """record_run names the job; only its requeued / restarted self (same
    job, restart count > 0) counts as the same run."""
    job = dict(SLURM_JOB_ID='12')
    record_run(str(tmp_path), job)
    assert (tmp_path / RUN_MARKER).exists()
    assert not is_restart_of_recorded_run(str(tmp_path), job)
    assert is_restart_of_recorded_run(
        str(tmp_path), dict(job, SLURM_RESTART_COUNT='1'))
    assert not is_restart_of_recorded_run(
        str(tmp_path), dict(SLURM_JOB_ID='13', SLURM_RESTART_COUNT='1'))
    record_run(str(tmp_path), {})  # a run no launcher restarts
    assert not (tmp_path / RUN_MARKER).exists()
    assert not is_restart_of_recorded_run(
        str(tmp_path), dict(job, SLURM_RESTART_COUNT='1'))
