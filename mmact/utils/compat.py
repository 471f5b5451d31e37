"""Checks and shims that keep the OpenMMLab stack working on every supported
torch and numpy (which versions those are: :mod:`mmact.versions`)."""
import importlib
import importlib.util
import pickle
import types
from pathlib import Path

import numpy as np
import torch

from mmact.versions import WEIGHTS_ONLY_BY_DEFAULT, allow_in_weights_only_load

__all__ = [
    'check_mmcv', 'patch_lvis_numpy', 'allow_mmengine_checkpoint_globals'
]

MMCV_MIN, MMCV_MAX = '2.0.0rc4', '2.2.0'

# numpy 2 removed these aliases of Python builtins; lvis 0.5.3 still uses np.float.
_REMOVED_NUMPY_ALIASES = {
    'float': float,
    'int': int,
    'bool': bool,
    'object': object
}


def check_mmcv() -> None:
    """Fail early, with the fix, when mmcv does not fit the installed torch.

    mmcv without compiled ops (mmcv-lite) is accepted: the activations need
    none. Compiled ops that were built against another torch fail to load
    with an undefined symbol deep inside a detector; this turns that into an
    error that says how to rebuild. The training and test tools call it
    before building anything.

    Raises:
        ImportError: mmcv is outside ``[2.0.0rc4, 2.2.0)`` or its compiled
            ops do not load against the installed torch.
    """
    import mmcv
    from mmengine.utils import digit_version

    if not (digit_version(MMCV_MIN) <= digit_version(mmcv.__version__) <
            digit_version(MMCV_MAX)):
        raise ImportError(
            f'mmact needs mmcv>={MMCV_MIN},<{MMCV_MAX} (mmdet 3.x asserts '
            f'the same), found mmcv {mmcv.__version__}.')
    if not any(Path(mmcv.__file__).parent.glob('_ext*.so')):
        return
    try:
        importlib.import_module('mmcv._ext')
    except (ImportError, OSError) as error:
        raise ImportError(
            f'mmcv {mmcv.__version__} has compiled ops that do not load '
            f'against the installed torch {torch.__version__}: {error}. '
            'They were built against another torch (pip reuses cached mmcv '
            'wheels whatever the torch version). Run tools/setup_env.sh, or '
            'rebuild: pip uninstall mmcv; MMCV_WITH_OPS=1 pip install '
            '--no-cache-dir --no-build-isolation mmcv==2.1.0 (see README, '
            '"Installation").') from error


class _NumpyWithAliases(types.ModuleType):
    """numpy plus the builtin aliases numpy 2 removed, for one module only."""

    def __init__(self) -> None:
        super().__init__('numpy')
        self.__dict__.update(_REMOVED_NUMPY_ALIASES)

    def __getattr__(self, name: str):
        return getattr(np, name)


def patch_lvis_numpy() -> bool:
    """Let ``lvis`` 0.5.3 evaluate on numpy 2.

    Only the ``np`` name inside ``lvis.eval`` is rebound; numpy itself and
    every other module keep seeing the real numpy.

    Returns:
        bool: Whether ``lvis.eval`` now sees the aliases (False when lvis is
        not installed).
    """
    if importlib.util.find_spec('lvis') is None:
        return False
    lvis_eval = importlib.import_module('lvis.eval')
    if not hasattr(lvis_eval.np, 'float'):
        lvis_eval.np = _NumpyWithAliases()
    return True


# What a HistoryBuffer pickles: its statistics functions, written by pickle
# as getattr(HistoryBuffer, name).
_HISTORY_STATISTICS = ('min', 'max', 'current', 'mean')


def _history_buffer_statistic(owner: type, name: str):
    """``builtins.getattr`` as mmengine checkpoints use it, and only that.

    The weights-only unpickler resolves the ``getattr`` of a checkpoint to
    this function, which hands out nothing but the statistics methods of
    ``HistoryBuffer``.
    """
    from mmengine.logging import HistoryBuffer
    if owner is HistoryBuffer and name in _HISTORY_STATISTICS:
        return getattr(owner, name)
    raise pickle.UnpicklingError(
        f'weights-only load: getattr({owner!r}, {name!r}) is not allowed '
        f'(mmact allows getattr(HistoryBuffer, name) for name in '
        f'{_HISTORY_STATISTICS} only)')


def allow_mmengine_checkpoint_globals() -> None:
    """Let ``torch.load(weights_only=True)`` read mmengine's checkpoints.

    torch >= 2.6 loads weights-only by default, and every checkpoint the
    Runner saves holds its message hub: ``HistoryBuffer`` objects (numpy
    arrays inside, statistics functions pickled through ``getattr``) and
    numpy scalars. This adds exactly those classes (numpy: arrays, scalars
    and the numeric dtypes) and functions to torch's allow-list
    (:func:`mmact.versions.allow_in_weights_only_load`); anything else in
    a checkpoint is still refused, and ``getattr`` is resolved to
    :func:`_history_buffer_statistic`, not to the builtin. Names from
    numpy 1 (``numpy.core``) are mapped too, so older checkpoints load.
    """
    from mmengine.logging import HistoryBuffer
    if not WEIGHTS_ONLY_BY_DEFAULT:
        return  # older torch unpickles fully by default
    multiarray = importlib.import_module('numpy._core.multiarray' if hasattr(
        np, '_core') else 'numpy.core.multiarray')
    reconstruct, scalar = multiarray._reconstruct, multiarray.scalar
    # numpy >= 1.25 builds each dtype as its own class (Float64DType, ...)
    numeric_dtypes = {
        type(np.dtype(code))
        for code in '?' + np.typecodes['AllInteger'] + np.typecodes['AllFloat']
    }
    allow_in_weights_only_load([
        HistoryBuffer,
        np.ndarray,
        np.dtype,
        *sorted(numeric_dtypes, key=str),
        (reconstruct, 'numpy._core.multiarray._reconstruct'),
        (reconstruct, 'numpy.core.multiarray._reconstruct'),
        (scalar, 'numpy._core.multiarray.scalar'),
        (scalar, 'numpy.core.multiarray.scalar'),
        (_history_buffer_statistic, 'builtins.getattr'),
    ])
