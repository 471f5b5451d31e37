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
from typing import List

from mmengine.dist import is_main_process
from mmengine.fileio import LocalBackend
from mmengine.hooks import CheckpointHook
from mmengine.registry import HOOKS

__all__ = ['DurableCheckpointHook', 'write_durably']


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
    ...))``. Checkpoints written to a remote backend (``backend_args``) and
    the ``save_best`` checkpoints take mmengine's path unchanged.
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
        partial = osp.join(self.out_dir, f'.{filename}.partial')
        try:
            runner.save_checkpoint(
                self.out_dir,
                osp.basename(partial),
                self.file_client_args,
                save_optimizer=self.save_optimizer,
                save_param_scheduler=self.save_param_scheduler,
                meta=meta,
                by_epoch=self.by_epoch,
                backend_args=self.backend_args,
                **self.args)
            if is_main_process():
                _fsync_file(partial)
                os.replace(partial, final)
                _fsync_dir(self.out_dir)
        except BaseException as error:
            if is_main_process() and osp.exists(partial):
                os.remove(partial)
            if not isinstance(error, OSError):
                raise  # not the write: e.g. a hook refused the checkpoint
            kept = previous or 'none: this was the first'
            raise OSError(
                error.errno,
                f'could not write the checkpoint {final}: {error}. No part '
                f'of it was left; the last complete checkpoint is kept '
                f'({kept}). Free space in {self.out_dir} (or set '
                'default_hooks.checkpoint.out_dir) and resume with '
                '--resume') from error
        if not is_main_process():
            return
        write_durably(pointer, final)
        for old in evicted:
            path = osp.join(self.out_dir, self.filename_tmpl.format(old))
            if osp.isfile(path):
                os.remove(path)
