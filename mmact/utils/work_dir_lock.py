"""One training run per work dir.

Two runs in one work dir (started in the same second they even share the
timestamped log folder) write each other's checkpoints, logs and
``scalars.json``. The lock is a file created with ``O_CREAT | O_EXCL``, so
exactly one of two simultaneous runs gets it; it holds the owner's pid and
host so that the other can name it.
"""
import json
import os
import os.path as osp
import socket
import time
import warnings
from contextlib import contextmanager
from typing import Iterator, List, Optional

__all__ = ['LOCK_NAME', 'WorkDirLockedError', 'work_dir_lock']

LOCK_NAME = '.mmact-train.lock'


class WorkDirLockedError(RuntimeError):
    """Another live run holds the work dir."""


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
    ``kill -9``) is taken over with a warning. A lock held by a live process,
    or by a process on another host (whose liveness cannot be checked here),
    is an error naming it.

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
    owner = dict(pid=os.getpid(), host=host, since=time.time())
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
