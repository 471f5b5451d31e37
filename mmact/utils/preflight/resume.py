"""Which checkpoint ``--resume`` continues from, and work dirs a new run
must not overwrite.

mmengine resumes from whatever ``last_checkpoint`` names: without that file
it starts from scratch (and overwrites ``epoch_N.pth`` as it goes), with an
empty one it fails on ``Checkpoint ''``, and with a truncated checkpoint it
fails while loading.

A job that slurm requeued or torchrun restarted runs the same command again;
it is told from a new run by :data:`RUN_MARKER`, which names the job that
trained in the work dir.
"""
import json
import os
import os.path as osp
import re
from glob import glob
from typing import List, Mapping, Optional, Tuple

from mmengine.logging import print_log

from ..work_dir_lock import is_restarted_job, run_identity
from .checkpoints import check_checkpoint

__all__ = [
    'checkpoints_in', 'resume_checkpoint', 'check_fresh_work_dir',
    'RUN_MARKER', 'record_run', 'is_restart_of_recorded_run'
]

# epoch_12.pth, iter_3000.pth, and epoch_2_iter_37.pth (stopped in epoch 3)
_STEP = re.compile(r'(\d+)(?:_iter_(\d+))?\.pth$')

#: The work dir's record of the job training in it (:func:`record_run`).
RUN_MARKER = '.mmact-run.json'


def checkpoints_in(work_dir: str) -> List[str]:
    """The ``*.pth`` files of ``work_dir``, newest first (by the step number
    in the name, ``epoch_12.pth`` / ``iter_3000.pth`` / ``epoch_2_iter_37.pth``,
    then by time).

    Args:
        work_dir (str): A training work dir.
    """

    def key(path: str) -> Tuple[int, int, float]:
        step = _STEP.search(osp.basename(path))
        if step is None:
            return (-1, -1, osp.getmtime(path))
        return (int(step.group(1)), int(step.group(2) or -1),
                osp.getmtime(path))

    return sorted(glob(osp.join(work_dir, '*.pth')), key=key, reverse=True)


def _loadable(path: str) -> Optional[str]:
    """None when ``path`` is a complete checkpoint, else why not."""
    try:
        check_checkpoint(path)
    except (FileNotFoundError, ValueError) as error:
        return str(error)
    return None


def resume_checkpoint(work_dir: str) -> Optional[str]:
    """The checkpoint ``--resume`` without a path continues from.

    The one ``last_checkpoint`` names when it is a complete file; otherwise
    (no such file, an empty one, a checkpoint that is missing or truncated)
    the newest complete ``*.pth`` in ``work_dir``, saying which and why. None
    when the work dir has no complete checkpoint: the run starts afresh.

    Args:
        work_dir (str): The run's work dir.

    Returns:
        str, optional: Path of the checkpoint to resume from.
    """
    pointer = osp.join(work_dir, 'last_checkpoint')
    named = open(pointer).read().strip() if osp.isfile(pointer) else None
    if named:
        problem = _loadable(named)
        if problem is None:
            return named
        why = f'{pointer} names {named}, which cannot be used ({problem})'
    else:
        why = (f'{pointer} is empty'
               if named == '' else f'there is no {pointer}')
    skipped = []
    for path in checkpoints_in(work_dir):
        problem = _loadable(path)
        if problem is None:
            print_log(
                f'--resume: {why}; resuming from {path}, the newest '
                'complete checkpoint in the work dir' +
                (f' (skipped as incomplete: {", ".join(skipped)})'
                 if skipped else ''),
                logger='current')
            return path
        skipped.append(osp.basename(path))
    print_log(
        f'--resume: {why}, and {work_dir} holds no complete checkpoint' +
        (f' ({", ".join(skipped)} are incomplete)' if skipped else '') +
        ': training starts from scratch',
        logger='current')
    return None


def check_fresh_work_dir(work_dir: str) -> None:
    """Refuse to start a new run where an earlier one left checkpoints
    (it would overwrite them as it goes).

    Args:
        work_dir (str): The run's work dir.

    Raises:
        FileExistsError: ``work_dir`` holds ``*.pth`` files; the message
            names them and the three ways on.
    """
    found = checkpoints_in(work_dir)
    if found:
        names = ', '.join(osp.basename(p) for p in found[:3])
        more = f' and {len(found) - 3} more' if len(found) > 3 else ''
        raise FileExistsError(
            f'{work_dir} holds checkpoints of an earlier run ({names}{more}) '
            'that a new run would overwrite. Continue it with --resume, start '
            'a new run elsewhere with --work-dir, or pass --force to start '
            'from scratch here anyway.')


def record_run(work_dir: str, env: Mapping[str, str] = os.environ) -> None:
    """Name the job training in ``work_dir`` (rank 0, once it starts), so
    that its requeued or restarted self resumes instead of being refused.

    Args:
        work_dir (str): The run's work dir.
        env (Mapping[str, str]): The environment to read.
    """
    identity = run_identity(env)
    path = osp.join(work_dir, RUN_MARKER)
    if identity is None:
        if osp.isfile(path):
            os.remove(path)
        return
    _write_marker(path, dict(run=identity))


def _write_marker(path: str, record: dict) -> None:
    partial = f'{path}.{os.getpid()}.partial'
    with open(partial, 'w') as f:
        json.dump(record, f)
    os.replace(partial, path)


def _read_marker(work_dir: str) -> dict:
    try:
        with open(osp.join(work_dir, RUN_MARKER)) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def is_restart_of_recorded_run(work_dir: str,
                               env: Mapping[str, str] = os.environ) -> bool:
    """Whether this process is a requeued or restarted incarnation of the
    job :func:`record_run` named in ``work_dir``.

    Args:
        work_dir (str): The run's work dir.
        env (Mapping[str, str]): The environment to read.
    """
    identity = run_identity(env)
    if identity is None or not is_restarted_job(env):
        return False
    return _read_marker(work_dir).get('run') == identity
