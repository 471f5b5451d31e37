"""mmact and the stack under it: the torch and Triton versions mmact
supports, what differs between them, and the checks and shims that keep the
OpenMMLab stack working on each (mmcv, lvis under numpy 2, mmengine's
checkpoints under weights-only loading).

This is the one module that asks which torch or Triton is installed; the rest
of mmact (and its tests) uses the names below. ``tests/test_compat.py``
fails when code elsewhere calls one of the version-dependent APIs listed in
:data:`VERSIONED_APIS` directly.

CI tests two stacks (docs/get_started.md, "Supported versions"): torch 2.1.2
with Triton 2.1 and numpy 1, and torch 2.14.1 with Triton 3.x and numpy 2.
"""
import contextlib
import functools
import importlib
import importlib.abc
import importlib.util
import re
import sys
import types
import warnings
from pathlib import Path
from typing import Dict, Iterator, Tuple

import numpy as np
import torch
import torch.autograd.forward_ad as _forward_ad

__all__ = [
    'TORCH_MIN', 'TORCH_TESTED', 'TORCH_VERSION', 'TRITON_MIN',
    'VERSIONED_APIS', 'parse_version', 'check_torch', 'is_compiling',
    'is_tracing', 'forward_ad_active', 'autocast_may_apply', 'triton_version',
    'triton_interpreter_available', 'CPU_AUTOCAST_FLOAT16',
    'WEIGHTS_ONLY_BY_DEFAULT', 'allow_in_weights_only_load',
    'needs_input_grad', 'TORCHSCRIPT_ONNX_EXPORT', 'lazy_module_init',
    'MMCV_MIN', 'MMCV_MAX', 'check_mmcv', 'patch_lvis_numpy',
    'allow_mmengine_checkpoint_globals'
]

#: Oldest torch mmact runs on; ``import mmact`` refuses anything older.
TORCH_MIN = (2, 1)
#: The torch releases CI runs the whole suite on.
TORCH_TESTED = ('2.1.2', '2.14.1')
#: Oldest Triton whose kernels mmact launches (the one torch 2.1 ships).
TRITON_MIN = (2, 1)

#: Version-dependent APIs, as written in code -> the releases that have them.
#: Only this module may use them; the names below stand in for them.
VERSIONED_APIS: Dict[str, str] = {
    'compiler.is_compiling': 'torch >= 2.3 (use is_tracing)',
    'library.custom_op': 'torch >= 2.4',
    'add_safe_globals': 'torch >= 2.4 (use allow_in_weights_only_load)',
    'dynamo=': 'torch.onnx.export on torch >= 2.5 (use '
    'TORCHSCRIPT_ONNX_EXPORT)',
    'tl.erf(': 'Triton >= 3.0 (tl.math.erf is in Triton 2.1 and 3.x)',
    'ctx.needs_input_grad': 'traced by torch.compile from torch 2.4 (use '
    'needs_input_grad)',
    'promote_types(': 'traced by torch.compile on newer torch, not on 2.1',
}


def parse_version(version: str) -> Tuple[int, ...]:
    """``'2.1.2+cu121'`` -> ``(2, 1, 2)``; ``'2.6.0a0'`` -> ``(2, 6, 0)``."""
    parts = []
    for part in version.split('+')[0].split('.')[:3]:
        digits = re.match(r'\d+', part)
        if digits is None:
            break
        parts.append(int(digits.group()))
    return tuple(parts)


TORCH_VERSION = parse_version(torch.__version__)


def check_torch(version: str = torch.__version__) -> None:
    """Refuse a torch older than :data:`TORCH_MIN`.

    Args:
        version (str): The torch version to check. Defaults to the
            installed one.

    Raises:
        ImportError: ``version`` is below the supported range.
    """
    if parse_version(version)[:2] < TORCH_MIN:
        floor = '.'.join(map(str, TORCH_MIN))
        raise ImportError(
            f'mmact needs torch>={floor}; torch {version} is installed. '
            f'CI tests torch {" and ".join(TORCH_TESTED)} '
            '(docs/get_started.md, "Supported versions"): pip install '
            f'"torch>={floor}"')


check_torch()

# torch.compiler.is_compiling is new in 2.3. Before it dynamo folds
# torch._utils.is_compiling to True while tracing (torch/_dynamo/config.py,
# constant_functions), which needs no dynamo import.
# Code that calls a native entry dynamo cannot trace asks is_compiling first.
is_compiling = getattr(torch.compiler, 'is_compiling', None)
if is_compiling is None:
    from torch._utils import is_compiling

_jit_tracing = torch._C._is_tracing
_dispatch_stack_len = torch._C._len_torch_dispatch_stack


def is_tracing() -> bool:
    """Whether ``torch.compile`` (dynamo, AOTAutograd), ``torch.jit`` or a
    Python dispatch mode (fake tensors, FLOP counters) sees the caller's
    ops, on every supported torch.

    Tracers see the torch ops, never the hand-written kernels: ask this
    before looking at a tensor's layout or the environment, which dynamo
    either rejects or turns into graph breaks, and before handing a data
    pointer to a kernel. On torch 2.1 ``is_compiling`` is False while
    AOTAutograd runs an ``autograd.Function`` on fake tensors (a C kernel
    given their pointers crashed); the active ``FakeTensorMode`` shows it.
    """
    # torch.jit.is_tracing and _get_current_dispatch_mode without their
    # Python wrappers (asked on every activation call); dynamo folds
    # is_compiling() to True and never reaches the other two.
    return (is_compiling() or _jit_tracing() or _dispatch_stack_len() > 0)


def forward_ad_active() -> bool:
    """Whether a forward-mode AD level is open (``forward_ad.dual_level``,
    ``torch.func.jvp``), in which inputs may carry tangents that only
    differentiable standard ops propagate (read from the level counter
    ``torch.autograd.forward_ad`` keeps, the same on every supported
    torch: cheaper than asking each tensor)."""
    return _forward_ad._current_level >= 0


if TORCH_VERSION >= (2, 4):
    _AUTOCAST_ENABLED = {
        'cpu': lambda: torch.is_autocast_enabled('cpu'),
        'cuda': lambda: torch.is_autocast_enabled('cuda')
    }
else:
    _AUTOCAST_ENABLED = {
        'cpu': torch.is_autocast_cpu_enabled,
        'cuda': torch.is_autocast_enabled
    }


def autocast_may_apply(device_type: str) -> bool:
    """Whether ops on ``device_type`` may run under autocast: False only
    where autocast is known to be off (cpu and cuda, outside tracing), so
    that a layer that must leave it can skip entering
    ``torch.autocast(enabled=False)`` (several us per call) otherwise.

    Args:
        device_type: a ``torch.device`` type (``'cpu'``, ``'cuda'``, ...);
            other types than cpu and cuda always give True.
    """
    enabled = _AUTOCAST_ENABLED.get(device_type)
    return enabled is None or is_tracing() or enabled()


# pytorch/pytorch#123700 (torch 2.4): dynamo reads ctx.needs_input_grad.
_DYNAMO_READS_NEEDS_INPUT_GRAD = TORCH_VERSION >= (2, 4)


def needs_input_grad(ctx, count: int) -> Tuple[bool, ...]:
    """``ctx.needs_input_grad[:count]`` in an ``autograd.Function``'s
    backward, on every supported torch.

    Before torch 2.4 ``torch.compile`` cannot read it while tracing a
    backward (the graph breaks, or ``fullgraph=True`` fails); every gradient
    is then computed, and autograd drops those no input needs.

    Args:
        ctx: The backward's context.
        count (int): How many leading inputs to report.
    """
    if _DYNAMO_READS_NEEDS_INPUT_GRAD or not is_tracing():
        return tuple(ctx.needs_input_grad[:count])
    return (True, ) * count


#: CPU autocast to float16 (torch 2.1 autocasts the CPU to bfloat16 only).
CPU_AUTOCAST_FLOAT16 = TORCH_VERSION >= (2, 2)
#: ``torch.load`` reads weights only unless told otherwise (torch >= 2.6).
WEIGHTS_ONLY_BY_DEFAULT = TORCH_VERSION >= (2, 6)


def allow_in_weights_only_load(entries: list) -> None:
    """Add classes and functions to what ``torch.load(weights_only=True)``
    may unpickle (``torch.serialization.add_safe_globals``).

    Called only where :data:`WEIGHTS_ONLY_BY_DEFAULT` holds (torch >= 2.6,
    which also takes the ``(object, name)`` entries used for renamed
    modules); older torch unpickles fully by default.

    Args:
        entries (list): Objects, or ``(object, 'module.name')`` pairs.
    """
    torch.serialization.add_safe_globals(entries)


#: Keyword arguments that make ``torch.onnx.export`` use the TorchScript
#: exporter: torch 2.5 added ``dynamo=``, and later releases made the dynamo
#: exporter (which also needs onnxscript) the default (it is in 2.14); older
#: torch has only the TorchScript one.
TORCHSCRIPT_ONNX_EXPORT = ({
    'dynamo': False
} if TORCH_VERSION >= (2, 5) else {})


@functools.lru_cache(maxsize=None)
def triton_version() -> Tuple[int, ...]:
    """The installed Triton's version, ``()`` when none is installed.

    Reads the package metadata: importing triton takes seconds and is left
    to the kernels.
    """
    if importlib.util.find_spec('triton') is None:
        return ()
    from importlib.metadata import PackageNotFoundError, version
    try:
        return parse_version(version('triton'))
    except PackageNotFoundError:  # a source checkout without metadata
        import triton
        return parse_version(triton.__version__)


def triton_interpreter_available() -> bool:
    """Whether ``TRITON_INTERPRET=1`` runs mmact's kernels on CPU tensors.

    Triton's interpreter for plain ``@triton.jit`` kernels on torch tensors
    arrived in Triton 3.0; Triton 2.1's older one needs other kernels.
    """
    return triton_version() >= (3, 0)


@contextlib.contextmanager
def lazy_module_init() -> Iterator[None]:
    """Run a lazy module's ``__init__`` (``LazyModuleMixin``) without the
    warning torch 2.1 gives at each construction ("Lazy modules are a new
    feature under heavy development"; later torch has none): FleS and
    Meta-ACON are lazy by design, and the warning reached users once per
    layer of every model they built."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            'ignore',
            message='Lazy modules are a new feature',
            category=UserWarning)
        yield


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
            '--no-cache-dir --no-build-isolation mmcv==2.1.0 (see '
            'docs/faq.md, "mmcv does not fit the installed torch").'
        ) from error


class _NumpyWithAliases(types.ModuleType):
    """numpy plus the builtin aliases numpy 2 removed, for one module only."""

    def __init__(self) -> None:
        super().__init__('numpy')
        self.__dict__.update(_REMOVED_NUMPY_ALIASES)

    def __getattr__(self, name: str):
        return getattr(np, name)


def _give_aliases(lvis_eval: types.ModuleType) -> None:
    if not hasattr(lvis_eval.np, 'float'):
        lvis_eval.np = _NumpyWithAliases()


class _AliasesOnImport(importlib.abc.MetaPathFinder):
    """Gives ``lvis.eval`` the aliases as it is imported: importing lvis
    here would import ``lvis.vis`` and with it matplotlib's pyplot in every
    process, most of which never evaluate LVIS. It finds nothing itself;
    for ``lvis.eval`` it wraps the module's real loader."""

    def find_spec(self, name, path, target=None):
        if name != 'lvis.eval':
            return None
        for finder in sys.meta_path:
            find = getattr(finder, 'find_spec', None)
            spec = None if finder is self or find is None else find(
                name, path, target)
            if spec is not None and spec.loader is not None:
                load = spec.loader.exec_module

                def exec_module(module: types.ModuleType) -> None:
                    load(module)
                    _give_aliases(module)

                spec.loader.exec_module = exec_module
                return spec
        return None


def patch_lvis_numpy() -> bool:
    """Let ``lvis`` 0.5.3 evaluate on numpy 2.

    Only the ``np`` name inside ``lvis.eval`` is rebound; numpy itself and
    every other module keep seeing the real numpy. An ``lvis.eval`` not
    imported yet gets it when it is imported.

    Returns:
        bool: Whether ``lvis.eval`` sees the aliases, or will once imported
        (False when lvis is not installed).
    """
    if importlib.util.find_spec('lvis') is None:
        return False
    if 'lvis.eval' in sys.modules:
        _give_aliases(sys.modules['lvis.eval'])
    elif not any(isinstance(f, _AliasesOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasesOnImport())
    return True


def allow_mmengine_checkpoint_globals() -> None:
    """Let ``torch.load(weights_only=True)`` read mmengine's checkpoints.

    torch >= 2.6 loads weights-only by default, and every checkpoint the
    Runner saves holds its message hub: ``HistoryBuffer`` objects (numpy
    arrays inside, statistics functions pickled through ``getattr``) and
    numpy scalars. This adds the numpy and mmengine entries of mmact's
    allow-list (:func:`mmact.checkpoint.allow_list.weights_only_entries`)
    to torch's (:func:`allow_in_weights_only_load`); anything else is still
    refused, and ``getattr`` is resolved to
    :func:`mmact.checkpoint.allow_list.history_buffer_statistic`, not to the
    builtin. Older torch unpickles fully by default: mmact's own loader
    (:mod:`mmact.checkpoint`) is the safe route there.
    """
    if not WEIGHTS_ONLY_BY_DEFAULT:
        return
    from .checkpoint.allow_list import weights_only_entries
    allow_in_weights_only_load(weights_only_entries())
