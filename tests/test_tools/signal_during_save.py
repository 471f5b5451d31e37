"""Run a script that gets a signal half-way through writing a checkpoint:
``python signal_during_save.py NAME SIGNAL SCRIPT ARGS...``.

mmengine writes checkpoints through ``LocalBackend.put``; when the file's
name contains ``NAME``, this writes half of its bytes and sends SIGTERM to
the process (a second stop signal); then, for SIGNAL ``SIGTERM``, the write
goes on to the end, and for ``SIGKILL`` the process is killed there (slurm's
grace period ran out).
"""
import os
import runpy
import signal
import sys

from mmengine.fileio.backends.local_backend import LocalBackend

_put = LocalBackend.put
NAME, THEN = sys.argv[1], sys.argv[2]


def _interrupted_put(self, obj, filepath):
    if NAME not in str(filepath):
        return _put(self, obj, filepath)
    with open(filepath, 'wb') as f:
        f.write(obj[:len(obj) // 2])
        f.flush()
        os.kill(os.getpid(), signal.SIGTERM)
        if THEN == 'SIGKILL':
            os.kill(os.getpid(), signal.SIGKILL)
        f.write(obj[len(obj) // 2:])


LocalBackend.put = _interrupted_put
sys.argv = sys.argv[3:]
runpy.run_path(sys.argv[0], run_name='__main__')
