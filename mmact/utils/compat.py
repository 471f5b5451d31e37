"""Checks and shims that keep the OpenMMLab stack working on current torch/numpy."""
import importlib
import importlib.util
import os.path as osp
import types
from pathlib import Path

import numpy as np
import torch

MMCV_MIN, MMCV_MAX = '2.0.0rc4', '2.2.0'

# numpy 2 removed these aliases of Python builtins; lvis 0.5.3 still uses np.float.
_REMOVED_NUMPY_ALIASES = {'float': float, 'int': int, 'bool': bool,
                          'object': object}


def check_mmcv() -> None:
    """Fail early, with the fix, when mmcv does not fit the installed torch.

    mmcv without compiled ops (mmcv-lite) is accepted: the activations need
    none. Compiled ops that were built against another torch fail to load
    with an undefined symbol deep inside a detector; this turns that into an
    error at ``import mmact`` that says how to rebuild.

    Raises:
        ImportError: mmcv is outside ``[2.0.0rc4, 2.2.0)`` or its compiled
            ops do not load against the installed torch.
    """
    import mmcv
    import torch
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


def _load_local_checkpoint(filename: str, map_location=None) -> dict:
    """mmengine's local checkpoint loader, with ``weights_only=False``.

    torch >= 2.6 loads with ``weights_only=True`` by default, which rejects
    the message hub mmengine saves in every checkpoint (a ``HistoryBuffer``
    that pickles bound methods), so ``--resume``, ``load_from`` and
    ``tools/test.py`` could not read mmengine's own checkpoints. Like torch
    before 2.6 this unpickles the file fully: load checkpoints you trust.
    """
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'{filename} can not be found.')
    return torch.load(filename, map_location=map_location, weights_only=False)


def patch_mmengine_checkpoint_loading() -> None:
    """Let mmengine's CheckpointLoader read its own checkpoints on torch>=2.6.

    Only the loader mmengine uses for local files is replaced (through its
    ``register_scheme`` API); other ``torch.load`` callers keep torch's
    default.
    """
    from mmengine.runner import CheckpointLoader
    CheckpointLoader.register_scheme(
        prefixes='', loader=_load_local_checkpoint, force=True)
