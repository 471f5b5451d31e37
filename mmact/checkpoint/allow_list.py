"""What a checkpoint may hold: the one allow-list of pickled globals.

A torch checkpoint is a pickle, and unpickling calls whatever callables the
pickle names. mmact's loader (:mod:`mmact.checkpoint.restricted_pickle`)
resolves every name through this table instead of importing it, so a name
outside it is refused before anything is called. The entries are what
mmengine's checkpoints, mmact's own and the released models of
Alexandridis et al. (2024) hold:

- ``torch``: tensors and parameters as ``torch.save`` writes them (the
  rebuild functions, dtypes, layouts, devices, sizes; the same set as
  torch's own weights-only unpickler);
- ``python``: containers and scalars pickled by reference (``set``,
  ``OrderedDict``, ``bytes``, ...);
- ``numpy``: arrays, scalars and numeric dtypes, under numpy 1's and
  numpy 2's module names;
- ``mmengine``: the message hub's ``HistoryBuffer`` and its statistics
  functions, pickled as ``getattr(HistoryBuffer, name)``; ``getattr`` is
  resolved to :func:`history_buffer_statistic`, never to the builtin;
- ``reference``: the authors' torchvision-style training script saves its
  ``argparse.Namespace``.

Keys are the ``module.name`` pickle writes, after Python 2 names
(``__builtin__``) are mapped to Python 3's.
"""
import argparse
import collections
import functools
import importlib
import pickle
from typing import Any, Dict, Iterator, List, Tuple

import numpy as np
import torch

__all__ = [
    'RefusedGlobal', 'allowed_globals', 'history_buffer_statistic',
    'HISTORY_STATISTICS', 'weights_only_entries'
]

# What a HistoryBuffer pickles: its statistics functions, written by pickle
# as getattr(HistoryBuffer, name).
HISTORY_STATISTICS = ('min', 'max', 'current', 'mean')

_REBUILD_FUNCTIONS = ('_rebuild_tensor', '_rebuild_tensor_v2',
                      '_rebuild_tensor_v3', '_rebuild_parameter',
                      '_rebuild_parameter_with_state', '_rebuild_qtensor',
                      '_rebuild_sparse_tensor',
                      '_rebuild_meta_tensor_no_storage',
                      '_rebuild_nested_tensor', '_rebuild_wrapper_subclass',
                      '_rebuild_device_tensor_from_numpy',
                      '_rebuild_device_tensor_from_cpu_tensor')


class RefusedGlobal(pickle.UnpicklingError):
    """A pickle named a global outside the allow-list.

    Args:
        name (str): What was refused: ``'module.name'`` as the pickle wrote
            it (Python 3 spelling), or the ``getattr`` call.
    """

    def __init__(self, name: str) -> None:
        super().__init__(f'{name} is not on the allow-list')
        self.name = name


def history_buffer_statistic(owner: type, name: str) -> Any:
    """``builtins.getattr`` as mmengine checkpoints use it, and only that.

    Hands out nothing but the statistics methods of ``HistoryBuffer``.

    Args:
        owner (type): The object pickle asks an attribute of.
        name (str): The attribute.

    Raises:
        RefusedGlobal: Anything else is asked for.
    """
    from mmengine.logging import HistoryBuffer
    if owner is HistoryBuffer and name in HISTORY_STATISTICS:
        return getattr(owner, name)
    # getattr(HistoryBuffer, name) for name in HISTORY_STATISTICS only
    raise RefusedGlobal(f'getattr({owner!r}, {name!r})')


def _torch_entries() -> Iterator[Tuple[str, Any]]:
    for name in _REBUILD_FUNCTIONS:
        if hasattr(torch._utils, name):  # the set grows with torch releases
            yield f'torch._utils.{name}', getattr(torch._utils, name)
    # tensor subclasses and attributes, e.g. a Parameter saved on its own
    yield 'torch._tensor._rebuild_from_type_v2', \
        torch._tensor._rebuild_from_type_v2
    yield 'torch.nn.parameter.Parameter', torch.nn.Parameter
    yield 'torch.Tensor', torch.Tensor
    yield 'torch.Size', torch.Size
    yield 'torch.device', torch.device
    yield 'torch.serialization._get_layout', torch.serialization._get_layout
    yield 'torch.torch_version.TorchVersion', type(torch.__version__)
    constants = (torch.dtype, torch.layout, torch.memory_format, torch.qscheme)
    for name in dir(torch):
        if isinstance(getattr(torch, name), constants):
            yield f'torch.{name}', getattr(torch, name)
    for tensor_class in torch._tensor_classes:  # torch.FloatTensor, ...
        yield f'{tensor_class.__module__}.{tensor_class.__name__}', \
            tensor_class


def _python_entries() -> Iterator[Tuple[str, Any]]:
    import codecs
    yield '_codecs.encode', codecs.encode  # bytes under pickle protocol 2
    for builtin in (set, frozenset, bytes, bytearray, complex, slice, range):
        yield f'builtins.{builtin.__name__}', builtin
    yield 'collections.OrderedDict', collections.OrderedDict
    yield 'collections.Counter', collections.Counter


def _numpy_entries() -> Iterator[Tuple[str, Any]]:
    multiarray = importlib.import_module('numpy._core.multiarray' if hasattr(
        np, '_core') else 'numpy.core.multiarray')
    for core in ('numpy.core', 'numpy._core'):  # numpy 1 and 2 write these
        yield f'{core}.multiarray._reconstruct', multiarray._reconstruct
        yield f'{core}.multiarray.scalar', multiarray.scalar
    yield 'numpy.ndarray', np.ndarray
    yield 'numpy.dtype', np.dtype
    # numpy >= 1.25 builds each dtype as its own class (Float64DType, ...)
    for code in '?' + np.typecodes['AllInteger'] + np.typecodes['AllFloat']:
        dtype_class = type(np.dtype(code))
        yield f'{dtype_class.__module__}.{dtype_class.__name__}', dtype_class


def _mmengine_entries() -> Iterator[Tuple[str, Any]]:
    from mmengine.logging import HistoryBuffer
    yield 'mmengine.logging.history_buffer.HistoryBuffer', HistoryBuffer
    yield 'builtins.getattr', history_buffer_statistic


def _reference_entries() -> Iterator[Tuple[str, Any]]:
    yield 'argparse.Namespace', argparse.Namespace


_GROUPS = {
    'torch': _torch_entries,
    'python': _python_entries,
    'numpy': _numpy_entries,
    'mmengine': _mmengine_entries,
    'reference': _reference_entries,
}


@functools.lru_cache(maxsize=None)
def _group(name: str) -> Tuple[Tuple[str, Any], ...]:
    return tuple(_GROUPS[name]())


@functools.lru_cache(maxsize=None)
def allowed_globals() -> Dict[str, Any]:
    """``'module.name'`` -> the object a checkpoint may unpickle under it.

    Returns:
        dict: Every entry of every group (built once).
    """
    return {key: obj for group in _GROUPS for key, obj in _group(group)}


def weights_only_entries() -> List[Any]:
    """The numpy and mmengine entries, as
    :func:`mmact.compat.allow_in_weights_only_load` takes them: what torch >= 2.6's own weights-only
    unpickler needs beside its built-in set to read mmengine's checkpoints.

    Objects whose pickled name differs from where they live now (numpy 1's
    ``numpy.core``, ``getattr``) are given as ``(object, name)`` pairs.
    """
    entries: List[Any] = []
    for key, obj in _group('numpy') + _group('mmengine'):
        module = getattr(obj, '__module__', None)
        native = isinstance(obj, type) and \
            f'{module}.{obj.__qualname__}' == key
        entries.append(obj if native else (obj, key))
    return entries
