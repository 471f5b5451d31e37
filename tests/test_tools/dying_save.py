"""Run a script whose process dies half-way through writing its second
checkpoint: ``python dying_save.py SCRIPT ARGS...`` (exit status 3).

mmengine writes checkpoints through ``LocalBackend.put``; this writes half
of the second ``.pth`` file's bytes and ends the process at once, as a kill
or a node failure would.
"""
import os
import runpy
import sys

from mmengine.fileio.backends.local_backend import LocalBackend

_put = LocalBackend.put
_saved = []


def _dying_put(self, obj, filepath):
    if '.pth' in str(filepath):
        _saved.append(filepath)
        if len(_saved) == 2:
            with open(filepath, 'wb') as f:
                f.write(obj[:len(obj) // 2])
            os._exit(3)
    _put(self, obj, filepath)


LocalBackend.put = _dying_put
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name='__main__')
