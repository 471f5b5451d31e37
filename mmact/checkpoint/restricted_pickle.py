"""A ``pickle`` module that unpickles only what the allow-list admits.

Python's documented way to restrict unpickling: an ``Unpickler`` whose
``find_class`` hands out allowed objects only. Every opcode that reaches a
callable (``GLOBAL``, ``STACK_GLOBAL``, ``INST``, ``OBJ``, the extension
registry) goes through ``find_class``, so a name outside
:func:`mmact.checkpoint.allow_list.allowed_globals` is refused before it is
called, and nothing is imported. ``torch.load(f,
pickle_module=restricted_pickle, weights_only=False)`` reads checkpoints
through it on every supported torch, where torch's own weights-only
unpickler before 2.6 is not enough (CVE-2025-32434).
"""
import _compat_pickle
import pickle
from typing import IO, Any

from .allow_list import RefusedGlobal, allowed_globals

__all__ = ['Unpickler', 'load']


class Unpickler(pickle.Unpickler):
    """``pickle.Unpickler`` that resolves globals through the allow-list."""

    def find_class(self, module: str, name: str) -> Any:
        # protocol 2 pickles write Python 2 names (__builtin__.set)
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        else:
            module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        key = f'{module}.{name}'
        found = allowed_globals().get(key)
        if found is None:
            raise RefusedGlobal(key)
        return found


def load(file: IO[bytes], **kwargs) -> Any:
    """``pickle.load`` through :class:`Unpickler` (torch's legacy format
    reads its header with it).

    Args:
        file: A binary file.
        **kwargs: ``pickle.Unpickler``'s keyword arguments.
    """
    return Unpickler(file, **kwargs).load()
