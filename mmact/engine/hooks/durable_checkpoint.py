"""A CheckpointHook whose checkpoints survive a crash or a full disk.

mmengine's ``CheckpointHook`` deletes the oldest kept checkpoint *before* it
writes the new one, writes the new one in place and then overwrites
``last_checkpoint`` in place. A process killed (or a disk filled) while
``iter_3.pth`` is written therefore leaves a truncated ``iter_3.pth``, no
``iter_2.pth`` when ``max_keep_ckpts=1``, and a ``last_checkpoint`` that
names whatever it named before.
"""
import os
import os.path as osp
from typing import Callable, List

from mmengine.dist import is_main_process
from mmengine.fileio import LocalBackend
from mmengine.hooks import CheckpointHook
from mmengine.registry import HOOKS

__all__ = ['DurableCheckpointHook', 'save_durably', 'write_durably']


def _fsync_dir(folder: str) -> None:
    """Make a rename inside ``folder`` durable (POSIX; a no-op elsewhere)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # file systems without directory fsync
    finally:
        os.close(fd)


def _fsync_file(path: str) -> None:
    with open(path, 'rb+') as f:
        os.fsync(f.fileno())


def write_durably(path: str, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old or the new
    content, never a part: a temporary file beside it, flushed, fsynced and
    renamed over ``path``.

    Args:
        path (str): The file to (re)write.
        text (str): Its new content.
    """
    partial = f'{path}.{os.getpid()}.partial'
    try:
        with open(partial, 'w') as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
    except BaseException:
        if osp.exists(partial):
            os.remove(partial)
        raise
    _fsync_dir(osp.dirname(osp.abspath(path)))


def save_durably(final: str, save: Callable[[str], None], kept: str) -> None:
    """Write a checkpoint to a hidden partial file beside ``final`` with
    ``save(partial_name)``, fsync it and rename it over ``final`` (rank 0
    writes; every rank calls this).

    Args:
        final (str): The checkpoint's path.
        save (Callable[[str], None]): Writes the checkpoint under the file
            name it is given, in ``final``'s folder.
        kept (str): What stays in place if the write fails, for the error.

    Raises:
        OSError: The write failed (disk full, permission); the message
            names ``final`` and what is ``kept``.
    """
    out_dir = osp.dirname(final)
    partial = osp.join(out_dir, f'.{osp.basename(final)}.partial')
    try:
        save(osp.basename(partial))
        if is_main_process():
            _fsync_file(partial)
            os.replace(partial, final)
            _fsync_dir(out_dir)
    except BaseException as error:
        if is_main_process() and osp.exists(partial):
            os.remove(partial)
        if not isinstance(error, OSError):
            raise  # not the write: e.g. a hook refused the checkpoint
        raise OSError(
            error.errno,
            f'could not write the checkpoint {final}: {error}. No part '
            f'of it was left; {kept}. Free space in {out_dir} (or set '
            'default_hooks.checkpoint.out_dir) and resume with '
            '--resume') from error


@HOOKS.register_module()
class DurableCheckpointHook(CheckpointHook):
    """:class:`~mmengine.hooks.CheckpointHook` that never leaves the work
    dir without a complete checkpoint.

    A checkpoint is written to a hidden temporary file in the same directory
    (``.iter_3.pth.partial``), flushed and fsynced, and renamed over its
    final name; ``last_checkpoint`` is then rewritten the same way, and only
    after that are checkpoints beyond ``max_keep_ckpts`` deleted. A failed
    write (disk full, permission) removes the partial file and raises an
    ``OSError`` naming the checkpoint and the last complete one, which is
    kept.

    ``tools/train.py`` uses it in place of ``CheckpointHook`` (named in the
    config or the default) with the same arguments; other configs select it
    with ``default_hooks = dict(checkpoint=dict(type='DurableCheckpointHook',
    ...))``. The ``save_best`` checkpoint is written the same way, and the
    previous best deleted after it. Checkpoints written to a remote backend
    (``backend_args``) take mmengine's path unchanged.
    """

    def _save_checkpoint_with_step(self, runner, step, meta) -> None:
        if not isinstance(self.file_backend, LocalBackend):
            return super()._save_checkpoint_with_step(runner, step, meta)
        evicted: List[int] = []
        if self.max_keep_ckpts > 0 and not (self.keep_ckpt_ids and
                                            self.keep_ckpt_ids[-1] == step):
            if len(self.keep_ckpt_ids) == self.max_keep_ckpts:
                evicted.append(self.keep_ckpt_ids.popleft())
            self.keep_ckpt_ids.append(step)
            # saved inside the checkpoint: a resumed run evicts the same ones
            runner.message_hub.update_info('keep_ckpt_ids',
                                           list(self.keep_ckpt_ids))
        filename = self.filename_tmpl.format(step)
        final = osp.join(self.out_dir, filename)
        pointer = osp.join(runner.work_dir, 'last_checkpoint')
        previous = open(pointer).read().strip() if osp.isfile(pointer) else ''
        self.last_ckpt = final
        runner.message_hub.update_info('last_ckpt', final)
        kept = f'the last complete checkpoint is kept ' \
            f'({previous or "none: this was the first"})'
        save_durably(
            final, lambda name: runner.save_checkpoint(
                self.out_dir,
                name,
                self.file_client_args,
                save_optimizer=self.save_optimizer,
                save_param_scheduler=self.save_param_scheduler,
                meta=meta,
                by_epoch=self.by_epoch,
                backend_args=self.backend_args,
                **self.args), kept)
        if not is_main_process():
            return
        write_durably(pointer, final)
        for old in evicted:
            path = osp.join(self.out_dir, self.filename_tmpl.format(old))
            if osp.isfile(path):
                os.remove(path)

    def _save_best_checkpoint(self, runner, metrics) -> None:
        """mmengine's, with the new best checkpoint written durably and the
        previous best deleted only after it is complete."""
        if not isinstance(self.file_backend, LocalBackend):
            return super()._save_best_checkpoint(runner, metrics)
        replaced: List[str] = []
        written: List[str] = []
        save_checkpoint = runner.save_checkpoint

        def save(out_dir: str, filename: str, *args, **kwargs) -> None:
            final = osp.join(out_dir, filename)
            save_durably(
                final,
                lambda name: save_checkpoint(out_dir, name, *args, **kwargs),
                'the previous best checkpoint is kept')
            written.append(final)

        # mmengine removes the previous best, then saves the new one
        runner.save_checkpoint = save
        self.file_backend.remove = replaced.append
        try:
            super()._save_best_checkpoint(runner, metrics)
        finally:
            del runner.save_checkpoint
            del self.file_backend.remove
        if is_main_process():
            for path in replaced:
                if path not in written and osp.isfile(path):
                    os.remove(path)
