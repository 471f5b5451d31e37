"""Which checkpoint ``--resume`` continues from, and work dirs a new run
must not overwrite.

mmengine resumes from whatever ``last_checkpoint`` names: without that file
it starts from scratch (and overwrites ``epoch_N.pth`` as it goes), with an
empty one it fails on ``Checkpoint ''``, and with a truncated checkpoint it
fails while loading.
"""
import os.path as osp
import re
from glob import glob
from typing import List, Optional, Tuple

from mmengine.logging import print_log

from .checkpoints import check_checkpoint

__all__ = ['checkpoints_in', 'resume_checkpoint', 'check_fresh_work_dir']

_STEP = re.compile(r'(\d+)\.pth$')


def checkpoints_in(work_dir: str) -> List[str]:
    """The ``*.pth`` files of ``work_dir``, newest first (by the step number
    in the name, ``epoch_12.pth`` / ``iter_3000.pth``, then by time).

    Args:
        work_dir (str): A training work dir.
    """

    def key(path: str) -> Tuple[int, float]:
        step = _STEP.search(osp.basename(path))
        return (int(step.group(1)) if step else -1, osp.getmtime(path))

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
