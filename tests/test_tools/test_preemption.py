"""Training that survives preemption: tools/train.py, dist_train.sh and
slurm_train.sh under stop signals, 2 CPU processes (gloo) where it matters.

Each run loads ``stop_probe.py`` (signals at a chosen iteration, records what
every rank trained and its final parameters). The launcher jobs start fresh
processes; the single-process runs, which only signal themselves, are forked
from a warm interpreter in a session of their own (:func:`run_tool`).
"""
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mmact.testing import child_processes, free_port
from mmact.testing.tool_fork import run_python
from mmact.utils.preemption import PREEMPTED_EXIT_CODE
from mmact.utils.preflight import resume_checkpoint

REPO = Path(__file__).resolve().parents[2]
CONFIGS = Path(__file__).parent / 'configs'
PROBE_DIR = Path(__file__).parent
FAKE_SLURM = PROBE_DIR / 'fake_slurm'

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not sys.platform.startswith('linux'),
        reason='POSIX signals and /proc (Linux)')
]

# 12 iterations, a checkpoint and a validation every 6 (iteration-based);
# 2 epochs of 3 iterations (epoch-based)
ITERS = (f"_base_ = ['{CONFIGS}/tiny-cls_aglu-apa_iters.py']\n"
         "train_cfg = dict(max_iters=12, val_interval=6)\n"
         "param_scheduler = dict(T_max=12, end=12)\n"
         "default_hooks = dict(checkpoint=dict(interval=6))\n")
EPOCHS = f"_base_ = ['{CONFIGS}/tiny-cls_aglu-apa.py']\n"
PROBE = ("custom_imports = dict(imports=['mmact', 'stop_probe'], "
         "allow_failed_imports=False)\n"
         "custom_hooks = [dict(type='StopProbeHook')]\n")


@pytest.fixture(scope='module')
def cwd(tmp_path_factory, with_tiny_cls_data):
    folder = with_tiny_cls_data(tmp_path_factory.mktemp('preemption'))
    (folder / 'iters.py').write_text(ITERS + PROBE)
    (folder / 'epochs.py').write_text(EPOCHS + PROBE)
    return folder


#: What differs between the runs and no import reads (the launchers' port,
#: stop_probe.py's switches, the slurm job's variables): single-process runs
#: share a warm interpreter across them.
PER_RUN = ('PORT', 'STOP_AT_ITER', 'STOP_SIGNAL', 'STOP_AT_VAL_ITER',
           'STOP_AT_TEST_ITER', 'SIGNAL_BEFORE_TRAIN', 'KILL_AT_ITER',
           'STEP_SLEEP', 'SLURM_JOB_ID', 'SLURM_RESTART_COUNT')


def environment(**extra) -> dict:
    env = dict(
        os.environ,
        PYTHON=sys.executable,
        PORT=free_port(),
        PYTHONPATH=str(PROBE_DIR),
        OMP_NUM_THREADS='1')  # torchrun's default, for every launcher
    env.pop('SLURM_JOB_ID', None)
    env.update(extra)
    return env


def start(cmd, cwd, **extra) -> subprocess.Popen:
    """Start a tool in its own session (a job: signals reach only it)."""
    return subprocess.Popen(
        cmd,
        cwd=cwd,
        env=environment(**extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True)


def finish(process: subprocess.Popen, status=0) -> str:
    """The output of ``process`` (and of the workers that share its output)
    once it ended with ``status`` (one, or a tuple of accepted ones)."""
    try:
        log, _ = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    accepted = status if isinstance(status, tuple) else (status, )
    assert process.returncode in accepted, log[-4000:]
    return log


def dist_train(cwd, config, work_dir, *options, **extra) -> subprocess.Popen:
    return start([
        'bash',
        str(REPO / 'tools/dist_train.sh'), config, '2', '--work-dir',
        str(work_dir), *options
    ], cwd, **extra)


def run_tool(args, cwd, status=0, **extra) -> str:
    """``python ARGS`` in its own session, as :func:`start` runs a job, but
    forked from a warm interpreter (mmact.testing.tool_fork): its output
    once it ended with ``status`` (one, or a tuple of accepted ones). For
    single-process runs that only signal themselves."""
    done = run_python(
        args,
        cwd=cwd,
        env=environment(**extra),
        timeout=600,
        per_call=PER_RUN,
        start_new_session=True)
    log = done.stdout + done.stderr
    accepted = status if isinstance(status, tuple) else (status, )
    assert done.returncode in accepted, log[-4000:]
    return log


def train(cwd, config, work_dir, *options, status=0, **extra) -> str:
    """tools/train.py in one process (:func:`run_tool`)."""
    return run_tool(
        [REPO / 'tools/train.py', config, '--work-dir', work_dir, *options],
        cwd, status, **extra)


def params(work_dir: Path, rank: int) -> dict:
    return torch.load(work_dir / f'params_rank{rank}.pth')


def assert_same_weights(a: Path, b: Path, ranks=(0, 1)) -> None:
    for rank in ranks:
        pa, pb = params(a, rank), params(b, rank)
        assert pa.keys() == pb.keys()
        for name in pa:
            assert torch.equal(pa[name], pb[name]), (rank, name)


def trained(work_dir: Path, rank: int) -> int:
    path = work_dir / f'done_rank{rank}'
    return int(path.read_text() or 0) if path.exists() else 0


@pytest.fixture(scope='module')
def straight_iters(cwd):
    """Two processes, 12 iterations, nothing interrupts them."""
    work_dir = cwd / 'straight_iters'
    finish(dist_train(cwd, 'iters.py', work_dir))
    return work_dir


def test_sigterm_to_every_process_checkpoints_and_resumes_exactly(
        cwd, straight_iters):
    """SIGTERM to torchrun and both workers at a random iteration: a
    checkpoint of every iteration they trained, exit within 60 s; --resume
    ends with the uninterrupted run's weights, bit for bit."""
    work_dir = cwd / 'sigterm'
    at = random.Random().randint(2, 8)
    job = dist_train(cwd, 'iters.py', work_dir, STEP_SLEEP='0.4')
    deadline = time.monotonic() + 300
    while trained(work_dir, 0) < at:
        assert job.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    for pid in [job.pid] + child_processes(job.pid):
        os.kill(pid, signal.SIGTERM)
    signalled = time.monotonic()
    log = finish(job, status=1)  # torchrun's status when it was signalled
    assert time.monotonic() - signalled < 60
    done = trained(work_dir, 0)
    assert done == trained(work_dir, 1) >= at
    assert f'stopped by SIGTERM after iteration {done}: checkpoint' in log
    pointer = (work_dir / 'last_checkpoint').read_text().strip()
    assert Path(pointer).name == f'iter_{done}.pth'
    meta = torch.load(pointer, weights_only=False)['meta']
    assert meta['iter'] == done
    assert not (work_dir / '.mmact-train.lock').exists()

    finish(dist_train(cwd, 'iters.py', work_dir, '--resume'))
    assert_same_weights(straight_iters, work_dir)


def test_a_signal_to_one_rank_stops_every_rank_mid_epoch(cwd):
    """Epoch-based: SIGUSR1 to rank 0 alone after iteration 3 (epochs of 2
    batches per process): both ranks stop there, the checkpoint resumes in
    the middle of epoch 2 and ends like the uninterrupted run."""
    straight = cwd / 'straight_epochs'
    finish(dist_train(cwd, 'epochs.py', straight))
    work_dir = cwd / 'mid_epoch'
    log = finish(
        dist_train(
            cwd,
            'epochs.py',
            work_dir,
            STOP_AT_ITER='3',
            STOP_SIGNAL='SIGUSR1'),
        # torch 2.14's torchrun starts workers in their own sessions and
        # reports their status 75; torch 2.1's shares rank 0's process group
        # and dies of the SIGUSR1 it does not handle (the workers still stop
        # cleanly: they end with their launcher)
        status=(1, -signal.SIGUSR1))
    assert 'stopped by SIGUSR1 after iteration 3' in log
    assert trained(work_dir, 0) == trained(work_dir, 1) == 3
    assert Path((work_dir / 'last_checkpoint').read_text()).name == \
        'epoch_1_iter_3.pth'
    log = finish(dist_train(cwd, 'epochs.py', work_dir, '--resume'))
    assert 'resuming epoch 2 after its first 1 of 2 batches' in log
    assert_same_weights(straight, work_dir)
    saved = [
        torch.load(d / 'epoch_2.pth', weights_only=False)
        for d in (straight, work_dir)
    ]
    for part in ('optimizer', 'param_schedulers', 'random_state'):
        assert str(saved[0][part]) == str(saved[1][part]), part


def test_max_restarts_resumes_a_killed_worker(cwd, straight_iters):
    """MAX_RESTARTS=1: rank 1 dies (SIGKILL) after iteration 8; torchrun
    restarts both workers, which resume from iteration 6 (not refusing the
    work dir) and end with the uninterrupted run's weights."""
    work_dir = cwd / 'restarted'
    log = finish(
        dist_train(
            cwd, 'iters.py', work_dir, MAX_RESTARTS='1', KILL_AT_ITER='8'))
    assert 'was requeued or restarted: resuming its run' in log
    assert_same_weights(straight_iters, work_dir)


@pytest.mark.parametrize('then', ['SIGTERM', 'SIGKILL'])
def test_a_signal_during_the_checkpoint_write(cwd, then):
    """SIGTERM after iteration 4 (iteration 3's checkpoint exists); half-way
    through writing iteration 4's, a second SIGTERM is only recorded (the
    checkpoint completes), while a SIGKILL leaves iteration 3's checkpoint
    the newest loadable one, from which --resume goes on."""
    work_dir = cwd / f'write_{then}'
    (cwd / 'short.py').write_text(
        "_base_ = ['iters.py']\n"
        "train_cfg = dict(max_iters=6, val_interval=3)\n"
        "param_scheduler = dict(T_max=6, end=6)\n"
        "default_hooks = dict(checkpoint=dict(interval=3))\n")
    status = PREEMPTED_EXIT_CODE if then == 'SIGTERM' else -signal.SIGKILL
    run_tool([
        PROBE_DIR / 'signal_during_save.py', 'iter_4', then,
        REPO / 'tools/train.py', 'short.py', '--work-dir', work_dir
    ],
             cwd,
             status,
             STOP_AT_ITER='4')
    if then == 'SIGTERM':
        assert resume_checkpoint(str(work_dir)) == str(work_dir / 'iter_4.pth')
        return
    assert not (work_dir / 'iter_4.pth').exists()
    assert (work_dir / 'last_checkpoint').read_text() == \
        str(work_dir / 'iter_3.pth')
    assert resume_checkpoint(str(work_dir)) == str(work_dir / 'iter_3.pth')
    # a new process: the lock of the killed one is taken over
    log = train(cwd, 'short.py', work_dir, '--resume')
    assert 'Iter(train) [6/6]' in log


def test_a_signal_during_validation(cwd):
    """SIGTERM in the validation after iteration 2 (no periodic checkpoint
    there): the checkpoint holds the 2 trained iterations with the random
    state from before validation; resumed, the run ends like an
    uninterrupted one (one process)."""
    (cwd / 'val.py').write_text(
        "_base_ = ['iters.py']\n"
        "train_cfg = dict(max_iters=6, val_interval=2)\n"
        "param_scheduler = dict(T_max=6, end=6)\n"
        "default_hooks = dict(checkpoint=dict(interval=3))\n")
    straight, work_dir = cwd / 'val_straight', cwd / 'val_stopped'
    train(cwd, 'val.py', straight)
    log = train(
        cwd,
        'val.py',
        work_dir,
        status=PREEMPTED_EXIT_CODE,
        STOP_AT_VAL_ITER='1')
    assert 'stopped by SIGTERM during validation after iteration 2' in log
    assert Path((work_dir / 'last_checkpoint').read_text()).name == \
        'iter_2.pth'
    train(cwd, 'val.py', work_dir, '--resume')
    assert_same_weights(straight, work_dir, ranks=(0, ))


def test_slurm_requeue_resumes(cwd, straight_iters):
    """slurm_train.sh with a stand-in srun / scontrol: it asks for SIGUSR1
    90 s ahead; SIGUSR1 to the job stops it with a checkpoint, the script
    requeues it, and the requeued job (same job id, restart count 1)
    resumes by itself to the uninterrupted run's weights."""
    work_dir = cwd / 'slurm'
    log_file = cwd / 'slurm.log'
    slurm = dict(
        PATH=f'{FAKE_SLURM}:{os.environ["PATH"]}',
        FAKE_SLURM_LOG=str(log_file),
        SLURM_JOB_ID='4242',
        GPUS='2',
        GPUS_PER_NODE='2',
        MASTER_PORT=free_port())
    script = [
        'bash',
        str(REPO / 'tools/slurm_train.sh'), 'part', 'job', 'iters.py',
        str(work_dir)
    ]
    log = finish(
        start(script, cwd, STOP_AT_ITER='5', STOP_SIGNAL='SIGUSR1', **slurm),
        status=PREEMPTED_EXIT_CODE)
    assert 'requeueing job 4242' in log
    calls = log_file.read_text().splitlines()
    assert 'srun --signal=USR1@90' in calls
    assert 'scontrol requeue 4242' in calls
    assert trained(work_dir, 0) == trained(work_dir, 1) == 5
    slurm['MASTER_PORT'] = free_port()
    log = finish(start(script, cwd, SLURM_RESTART_COUNT='1', **slurm))
    assert 'slurm job 4242 was requeued or restarted' in log
    assert_same_weights(straight_iters, work_dir)


def test_a_signal_before_the_first_iteration(cwd):
    """Nothing trained: a clean exit that says so, no checkpoint."""
    work_dir = cwd / 'early'
    log = train(
        cwd,
        'iters.py',
        work_dir,
        status=PREEMPTED_EXIT_CODE,
        SIGNAL_BEFORE_TRAIN='1')
    assert 'stopped by SIGTERM before its first iteration: nothing was ' \
        'trained and no checkpoint was written' in log
    assert not list(work_dir.glob('*.pth'))
    assert not (work_dir / '.mmact-train.lock').exists()


def test_a_signal_during_evaluation(cwd, straight_iters):
    """tools/test.py: a clean exit, no results written as final."""
    out = cwd / 'preds.pkl'
    log = run_tool([
        REPO / 'tools/test.py', 'iters.py', straight_iters / 'iter_12.pth',
        '--work-dir', cwd / 'evaluation', '--out', out
    ],
                   cwd,
                   PREEMPTED_EXIT_CODE,
                   STOP_AT_TEST_ITER='1')
    assert 'evaluation stopped by SIGTERM: no results or metrics were ' \
        'written' in log
    assert not out.exists()
    assert 'accuracy/top1' not in log


def test_requeued_job_without_its_checkpoint_starts_anew(cwd):
    """A requeued job whose checkpoints were removed says so, naming the
    work dir, and trains from scratch; a new job is still refused a work
    dir with checkpoints."""
    work_dir = cwd / 'removed'
    job = dict(SLURM_JOB_ID='99')
    train(
        cwd,
        'iters.py',
        work_dir,
        status=PREEMPTED_EXIT_CODE,
        STOP_AT_ITER='2',
        **job)
    refused = train(cwd, 'iters.py', work_dir, status=1, SLURM_JOB_ID='100')
    assert 'holds checkpoints of an earlier run' in refused
    for path in work_dir.glob('*.pth'):
        path.unlink()
    log = train(cwd, 'iters.py', work_dir, SLURM_RESTART_COUNT='1', **job)
    assert 'slurm job 99 was requeued or restarted' in log
    assert f'{work_dir} holds no complete checkpoint' in log
    assert 'training starts from scratch' in log
    assert 'Iter(train) [12/12]' in log
