"""work_dir_lock: one training run per work dir."""
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from mmact.utils import work_dir_lock as lock_module
from mmact.utils.work_dir_lock import (LOCK_NAME, WorkDirLockedError,
                                       work_dir_lock)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, '-c', 'pass'])
    proc.wait()
    return proc.pid


def test_holds_and_releases(tmp_path):
    with work_dir_lock(str(tmp_path / 'run')) as path:
        holder = json.loads(open(path).read())
        assert holder['pid'] == os.getpid()
        assert holder['host'] == socket.gethostname()
    assert not os.path.exists(path)


def test_released_when_the_run_fails(tmp_path):
    with pytest.raises(ZeroDivisionError):
        with work_dir_lock(str(tmp_path)):
            1 / 0
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_second_run_is_refused_naming_the_first(tmp_path):
    with work_dir_lock(str(tmp_path)):
        with pytest.raises(WorkDirLockedError) as info:
            with work_dir_lock(str(tmp_path)):
                pass
        message = str(info.value)
        assert f'process {os.getpid()} on {socket.gethostname()}' in message
        assert '--work-dir' in message and LOCK_NAME in message
    assert not (tmp_path / LOCK_NAME).exists()  # the holder released it


def test_a_dead_holder_is_taken_over_with_a_warning(tmp_path):
    pid = _dead_pid()
    (tmp_path / LOCK_NAME).write_text(
        json.dumps(dict(pid=pid, host=socket.gethostname(), since=0)))
    with pytest.warns(UserWarning, match=f'lock of process {pid}'):
        with work_dir_lock(str(tmp_path)) as path:
            assert json.loads(open(path).read())['pid'] == os.getpid()


def test_a_holder_on_another_host_is_not_judged(tmp_path):
    (tmp_path / LOCK_NAME).write_text(
        json.dumps(dict(pid=_dead_pid(), host='node-7', since=0)))
    with pytest.raises(WorkDirLockedError, match='on node-7'):
        with work_dir_lock(str(tmp_path)):
            pass
    assert (tmp_path / LOCK_NAME).exists()  # not ours to remove


def test_simultaneous_runs_get_one_lock(tmp_path):
    """Eight processes race for one work dir: exactly one holds it, and
    holds it until the other seven have given up."""
    work_dir, release = tmp_path / 'run', tmp_path / 'release'
    module = os.path.join(
        os.path.dirname(lock_module.__file__), 'work_dir_lock.py')
    code = (
        'import importlib.util, os, sys, time\n'
        f'spec = importlib.util.spec_from_file_location("lock", {module!r})\n'
        'lock = importlib.util.module_from_spec(spec)\n'
        'spec.loader.exec_module(lock)\n'
        'try:\n'
        f'    with lock.work_dir_lock({str(work_dir)!r}):\n'
        f'        while not os.path.exists({str(release)!r}):\n'
        '            time.sleep(0.05)\n'
        'except lock.WorkDirLockedError:\n'
        '    sys.exit(7)\n')
    procs = [subprocess.Popen([sys.executable, '-c', code]) for _ in range(8)]
    losers, deadline = [], time.monotonic() + 120
    while len(losers) < 7:
        assert time.monotonic() < deadline, 'the racers did not finish'
        time.sleep(0.02)
        losers = [p for p in procs if p.poll() is not None]
        assert all(p.returncode == 7 for p in losers)
    release.touch()
    assert sorted(p.wait(timeout=60) for p in procs) == [0] + [7] * 7


def test_a_run_that_wrote_nothing_leaves_no_work_dir(tmp_path):
    with pytest.raises(ValueError):
        with work_dir_lock(str(tmp_path / 'work_dirs' / 'new')):
            raise ValueError('a check failed')
    assert not (tmp_path / 'work_dirs').exists()
    (tmp_path / 'kept').mkdir()
    with work_dir_lock(str(tmp_path / 'kept')):
        pass
    assert (tmp_path / 'kept').is_dir()  # it was there before


def test_a_restarted_job_takes_its_own_lock_back(tmp_path, monkeypatch):
    """slurm requeued the job (same id, restart count 1) onto another
    host: the lock its killed predecessor left there is taken over; a new
    job is still refused it."""
    monkeypatch.setenv('SLURM_JOB_ID', '31')
    (tmp_path / LOCK_NAME).write_text(
        json.dumps(
            dict(
                pid=1, host='node-7', since=0,
                run=lock_module.run_identity())))
    with pytest.raises(WorkDirLockedError, match='on node-7'):
        with work_dir_lock(str(tmp_path)):
            pass
    monkeypatch.setenv('SLURM_RESTART_COUNT', '1')
    with pytest.warns(
            UserWarning, match='earlier incarnation of slurm job 31'):
        with work_dir_lock(str(tmp_path)) as path:
            assert json.loads(open(path).read())['pid'] == os.getpid()


@pytest.mark.parametrize('env, identity', [
    (dict(SLURM_JOB_ID='7', TORCHELASTIC_RUN_ID='r'), 'slurm job 7'),
    (dict(TORCHELASTIC_RUN_ID='r',
          TORCHELASTIC_RESTART_COUNT='0'), 'torchrun run r'),
    (dict(TORCHELASTIC_RUN_ID='none', TORCHELASTIC_RESTART_COUNT='0'),
     f'torchrun {os.getppid()} on {socket.gethostname()}'),
    ({}, None),
])
def test_run_identity(env, identity):
    assert lock_module.run_identity(env) == identity


@pytest.mark.parametrize('env, restarted', [
    (dict(SLURM_RESTART_COUNT='2'), True),
    (dict(TORCHELASTIC_RESTART_COUNT='1'), True),
    (dict(SLURM_RESTART_COUNT='0', TORCHELASTIC_RESTART_COUNT='0'), False),
    ({}, False),
])
def test_is_restarted_job(env, restarted):
    assert lock_module.is_restarted_job(env) is restarted
