"""One training run per work dir.

Two runs in one work dir (started in the same second they even share the
timestamped log folder) write each other's checkpoints, logs and
``scalars.json``. The lock is a file created with ``O_CREAT | O_EXCL``, so
exactly one of two simultaneous runs gets it; it holds the owner's pid, host
and job (:func:`run_identity`) so that the other can name it, and a
requeued or restarted job can take it back from its killed predecessor.
This module imports nothing of mmact (tests load it on its own).
"""
import json
import os
import os.path as osp
import socket
import time
import warnings
from contextlib import contextmanager
from typing import Iterator, List, Mapping, Optional

__all__ = [
    'LOCK_NAME', 'WorkDirLockedError', 'work_dir_lock', 'run_identity',
    'is_restarted_job'
]

LOCK_NAME = '.mmact-train.lock'


class WorkDirLockedError(RuntimeError):
    """Another live run holds the work dir."""


def run_identity(env: Mapping[str, str] = os.environ) -> Optional[str]:
    """What stays the same when a job is requeued or its workers restarted:
    slurm's job id, else torchrun's run id (``--rdzv-id``), else this
    host's torchrun process. None for a process no launcher restarts.

    Args:
        env (Mapping[str, str]): The environment to read.
    """
    if env.get('SLURM_JOB_ID'):
        return f'slurm job {env["SLURM_JOB_ID"]}'
    run_id = env.get('TORCHELASTIC_RUN_ID')
    if run_id and run_id != 'none':
        return f'torchrun run {run_id}'
    if 'TORCHELASTIC_RESTART_COUNT' in env:
        return f'torchrun {os.getppid()} on {socket.gethostname()}'
    return None


def is_restarted_job(env: Mapping[str, str] = os.environ) -> bool:
    """Whether slurm requeued this job or torchrun restarted this worker.

    Args:
        env (Mapping[str, str]): The environment to read.
    """
    counts = [
        env.get(name, '0')
        for name in ('SLURM_RESTART_COUNT', 'TORCHELASTIC_RESTART_COUNT')
    ]
    return any(c.isdigit() and int(c) > 0 for c in counts)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _read(path: str) -> Optional[dict]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _try_create(path: str, owner: dict) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, 'w') as f:
        json.dump(owner, f)
    return True


def _missing_folders(path: str) -> List[str]:
    """The folders ``os.makedirs(path)`` would create, deepest first."""
    missing = []
    path = osp.abspath(path)
    while not osp.isdir(path):
        missing.append(path)
        path = osp.dirname(path)
    return missing


@contextmanager
def work_dir_lock(work_dir: str) -> Iterator[str]:
    """Hold ``work_dir`` for one training run.

    A lock left by a process that no longer runs on this host (a crash, a
    ``kill -9``) is taken over with a warning, and so is one left by an
    earlier incarnation of this requeued or restarted job (on any host). A
    lock held by a live process, or by a process on another host (whose
    liveness cannot be checked here), is an error naming it.

    Args:
        work_dir (str): The run's work dir (created if missing, and removed
            again, with the parents created for it, when the run wrote
            nothing into it).

    Yields:
        str: The lock file's path; removed on exit.

    Raises:
        WorkDirLockedError: Another run holds the work dir.
    """
    created = _missing_folders(work_dir)
    os.makedirs(work_dir, exist_ok=True)
    path = osp.join(work_dir, LOCK_NAME)
    host = socket.gethostname()
    run = run_identity()
    owner = dict(pid=os.getpid(), host=host, since=time.time(), run=run)
    while not _try_create(path, owner):
        holder = _read(path)
        if holder is None:  # being written this instant: look again
            time.sleep(0.05)
            holder = _read(path) or {}
        pid, where = holder.get('pid'), holder.get('host')
        if where == host and isinstance(pid, int) and not _alive(pid):
            warnings.warn(f'{path}: taking over the lock of process {pid} on '
                          f'{host}, which no longer runs (a run that crashed '
                          'or was killed)')
            os.remove(path)
            continue
        if run is not None and holder.get('run') == run and \
                is_restarted_job():
            # slurm requeues a job only once all its processes have ended
            warnings.warn(f'{path}: taking over the lock of process {pid} on '
                          f'{where}, an earlier incarnation of {run}')
            os.remove(path)
            continue
        started = time.strftime('%Y-%m-%d %H:%M:%S',
                                time.localtime(holder.get('since', 0)))
        raise WorkDirLockedError(
            f'{work_dir} is in use by another training run (process {pid} on '
            f'{where}, since {started}; lock file {path}). Wait for it, or '
            'use another --work-dir; if that process is gone for good (e.g. '
            'its host failed), delete the lock file.')
    try:
        yield path
    finally:
        if (_read(path) or {}).get('pid') == os.getpid():
            os.remove(path)
        # a run that failed its checks leaves nothing behind
        for folder in created:
            if os.listdir(folder):
                break
            os.rmdir(folder)
