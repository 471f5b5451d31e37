"""mmact.utils.dist: how a tool's run ends."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mmact.utils import finish_run, is_launcher_main


def test_finish_run_returns_without_cpu_distributed():
    finish_run(False)  # no process group: nothing to release, no exit
    with pytest.raises(SystemExit) as stop:
        finish_run(False, 75)  # a stopped run's status
    assert stop.value.code == 75


def test_cpu_distributed_worker_exits_zero_with_output_flushed(tmp_path):
    """A CPU-distributed worker with a live gloo group leaves with status 0
    right away, after its logs and buffered prints are written out."""
    log_file = tmp_path / 'run.log'
    script = textwrap.dedent(f"""
        import logging
        import torch.distributed as dist
        from mmact.utils import finish_run
        dist.init_process_group(
            'gloo', init_method='file://{tmp_path / 'store'}', rank=0,
            world_size=1)
        logger = logging.getLogger('run')
        logger.addHandler(logging.FileHandler('{log_file}'))
        logger.warning('run finished')
        print('buffered line', end='')
        finish_run(True)
        print('not reached')
        """)
    result = subprocess.run([sys.executable, '-c', script],
                            capture_output=True,
                            text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == 'buffered line'
    assert log_file.read_text() == 'run finished\n'


@pytest.mark.skipif(
    not sys.platform.startswith('linux'),
    reason='the launcher watch is set up on Linux only')
def test_a_worker_whose_launcher_is_gone_ends_at_once():
    """The launcher the scripts name is not this worker's parent any more
    (it died before the worker set its parent-death signal)."""
    code = ('import os\n'
            'from mmact.utils.dist import end_with_launcher\n'
            'os.environ["MMACT_LAUNCHER_PID"] = str(os.getppid() + 1)\n'
            'print(end_with_launcher("none"), flush=True)\n'
            'end_with_launcher("pytorch")\n'
            'print("trained on", flush=True)\n')
    out = subprocess.run([sys.executable, '-c', code],
                         capture_output=True,
                         text=True,
                         timeout=300)
    assert out.returncode == -signal.SIGTERM, out.stderr[-2000:]
    assert out.stdout == 'False\n'  # launcher 'none': nothing set up


@pytest.mark.skipif(
    not sys.platform.startswith('linux'), reason='watches the parent (Linux)')
def test_an_orphan_that_does_not_stop_on_sigterm_is_killed():
    """A worker whose main thread cannot run its SIGTERM handler (blocked
    in a collective with a rank that is gone; here: a handler that does
    nothing) is killed ORPHAN_GRACE_S after its launcher ended."""
    code = ('import os, signal, subprocess, sys, time\n'
            'import mmact.utils.dist as dist\n'
            'dist.ORPHAN_GRACE_S = 0.5\n'
            'signal.signal(signal.SIGTERM, lambda *_: None)\n'
            'dist.end_with_launcher("pytorch")\n'
            'print("watching", flush=True)\n'
            'time.sleep(120)\n')
    # an intermediate launcher that starts the worker and ends at once
    launcher = ('import os, subprocess, sys\n'
                'os.environ["MMACT_LAUNCHER_PID"] = str(os.getpid())\n'
                f'subprocess.Popen([sys.executable, "-c", {code!r}])\n')
    worker = subprocess.Popen([sys.executable, '-c', launcher],
                              stdout=subprocess.PIPE,
                              text=True)
    worker.wait(timeout=60)
    started = time.monotonic()
    assert worker.stdout.readline() == 'watching\n'
    assert worker.stdout.read() == ''  # the orphan closed its output: gone
    assert time.monotonic() - started < 60


@pytest.mark.parametrize('launcher,env,main', [
    ('none', dict(RANK='1'), True),
    ('pytorch', dict(RANK='0'), True),
    ('pytorch', dict(RANK='1'), False),
    ('slurm', dict(SLURM_PROCID='3'), False),
    ('mpi', dict(OMPI_COMM_WORLD_RANK='0'), True),
])
def test_launcher_main_is_rank_zero_before_the_process_group(
        monkeypatch, launcher, env, main):
    for name in ('RANK', 'SLURM_PROCID', 'OMPI_COMM_WORLD_RANK'):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert is_launcher_main(launcher) == main


def test_slurm_tasks_get_torch_distributed_variables(monkeypatch):
    """On a CPU machine the slurm launcher reads rank, world size and the
    first node (``scontrol show hostname``, here a stand-in) as mmengine
    does on GPUs."""
    from mmact.utils.dist import slurm_environment
    fake = Path(__file__).parents[1] / 'test_tools' / 'fake_slurm'
    monkeypatch.setenv('PATH', f'{fake}:{os.environ["PATH"]}')
    for name, value in dict(
            SLURM_NODELIST='node[1-2]',
            SLURM_NTASKS='4',
            SLURM_PROCID='3',
            SLURM_LOCALID='1').items():
        monkeypatch.setenv(name, value)
    for name in ('MASTER_ADDR', 'MASTER_PORT', 'RANK', 'WORLD_SIZE',
                 'LOCAL_RANK'):
        monkeypatch.delenv(name, raising=False)
    slurm_environment(port=29999)
    assert (os.environ['MASTER_ADDR'], os.environ['MASTER_PORT']) == \
        ('127.0.0.1', '29999')
    assert (os.environ['RANK'], os.environ['WORLD_SIZE'],
            os.environ['LOCAL_RANK']) == ('3', '4', '1')
