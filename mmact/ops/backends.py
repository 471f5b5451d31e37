"""Which kernel backends the ops may use, decided once.

The switches are read from the environment when mmact is imported (and
whenever :func:`configure` is called), checked there, and kept in one
:class:`BackendSettings`; per call the ops only look at the tensor. Each
operator picks its implementation in one table beside its math
(:func:`mmact.ops.apa.dispatch.implementation`,
:func:`mmact.ops.fles.dispatch.implementation`, and for the elementwise
operators :func:`mmact.ops.table.implementation`).

Environment (read by :func:`configure_from_env`):

- ``MMACT_TRITON``: unset or empty: CUDA tensors use the Triton kernels
  (Triton >= 2.1 installed); ``0``: never (the torch path, for
  comparisons); ``1``: CPU tensors too, through Triton's interpreter,
  which needs Triton >= 3.0 and ``TRITON_INTERPRET=1`` set before triton
  is imported (tests).
- ``MMACT_DISABLE_CPU_KERNEL=1``: no fused C kernels for CPU tensors (the
  torch path).
- ``MMACT_CUDA_KERNELS=1``: APA / AGLU on CUDA tensors run the CUDA C++
  kernels (built on first use, :mod:`mmact.ops.cuda_build`) through the same
  C++ operator as CPU tensors, ahead of Triton; where they cannot be built
  or loaded, one log line says why and the Triton row runs. Opt-in until a
  GPU has verified them. Independent of the other switches: with
  ``MMACT_TRITON=0`` the CUDA kernels still run, and
  ``MMACT_DISABLE_CPU_KERNEL=1`` leaves them on (the C++ operator is still
  built, its CPU kernels unused).
- ``MMACT_COMPOSITE=1``: every operator runs its ``composite`` row, standard
  ops that autograd records, so that gradients can be differentiated again
  (a gradient penalty); the fused backwards refuse a second derivative.

The kernels' own build settings (``MMACT_CPU_ISA``, ``MMACT_CACHE_DIR``,
``CXX``, ``CUDA_HOME``) are read when they are built
(:mod:`mmact.ops.cpu_build`, :mod:`mmact.ops.cuda_build`).
This module imports no triton.
"""
import contextlib
import functools
import os
import warnings
from dataclasses import dataclass, replace
from typing import Callable, Iterator, List, Optional

import torch
from torch import Tensor

from ..compat import (TRITON_MIN, is_tracing, triton_interpreter_available,
                      triton_version)

__all__ = [
    'BackendSettings', 'TRITON_MODES', 'TRITON_DTYPES', 'settings',
    'configure', 'configure_from_env', 'using', 'use_triton', 'takes_triton',
    'triton_launchable', 'on_change', 'refresh'
]

#: ``BackendSettings.triton`` values: Triton for CUDA tensors, for none,
#: for CPU tensors too (interpreter), and the ``MMACT_TRITON`` value of each.
TRITON_MODES = {'cuda': '', 'off': '0', 'all': '1'}

#: Input dtypes the Triton kernels read (computed in float32).
TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

_PLAIN_TYPES = (Tensor, torch.nn.Parameter)


@dataclass(frozen=True)
class BackendSettings:
    """Backends the ops may use.

    Args:
        triton (str): One of :data:`TRITON_MODES`: ``'cuda'`` (default),
            ``'off'`` or ``'all'``.
        cpu_kernels (bool): Whether float32 CPU tensors use the fused C
            kernels (built on first use). Defaults to True.
        composite (bool): Whether every call runs its operator's
            ``composite`` row (standard ops, twice differentiable; no fused
            kernel). Defaults to False.
        cuda_kernels (bool): Whether APA / AGLU on CUDA tensors run the CUDA
            C++ kernels (built on first use) before the Triton ones.
            Defaults to False.
    """
    triton: str = 'cuda'
    cpu_kernels: bool = True
    composite: bool = False
    cuda_kernels: bool = False


def _dotted(version: tuple) -> str:
    return '.'.join(map(str, version))


def _check(new: BackendSettings) -> None:
    """Refuse settings that cannot run, naming the setting."""
    if new.triton not in TRITON_MODES:
        raise ValueError(f'triton={new.triton!r}: use one of '
                         f'{sorted(TRITON_MODES)}')
    if new.triton != 'all':
        return
    what = ('MMACT_TRITON=1 (triton="all") sends CPU tensors to the Triton '
            'kernels, which run on the CPU only in the interpreter of Triton '
            '>= 3.0')
    if not triton_version():
        raise RuntimeError(f'{what}; the triton package is not installed '
                           '(pip install triton)')
    if not triton_interpreter_available():
        raise RuntimeError(
            f'{what}; Triton {_dotted(triton_version())} is installed: unset '
            'MMACT_TRITON to use the CPU path')
    if os.environ.get('TRITON_INTERPRET', '') != '1':
        raise RuntimeError(
            f'{what}: also set TRITON_INTERPRET=1 (before Python starts, so '
            'that triton reads it at import), or unset MMACT_TRITON to use '
            'the CPU path')


_settings = BackendSettings()
_listeners: List[Callable[[], None]] = []


def settings() -> BackendSettings:
    """The settings in force."""
    return _settings


def configure(triton: Optional[str] = None,
              cpu_kernels: Optional[bool] = None,
              composite: Optional[bool] = None,
              cuda_kernels: Optional[bool] = None) -> BackendSettings:
    """Change the backends the ops use (arguments left None keep theirs).

    Args:
        triton (str, optional): See :class:`BackendSettings`.
        cpu_kernels (bool, optional): See :class:`BackendSettings`.
        composite (bool, optional): See :class:`BackendSettings`.
        cuda_kernels (bool, optional): See :class:`BackendSettings`.

    Returns:
        BackendSettings: The previous settings (to restore them).

    Raises:
        ValueError: An unknown ``triton`` mode.
        TypeError: ``cpu_kernels``, ``composite`` or ``cuda_kernels`` is
            not a bool.
        RuntimeError: ``triton='all'`` where Triton's interpreter cannot run
            (no triton, Triton < 3.0, ``TRITON_INTERPRET`` not 1).
    """
    global _settings
    new = _settings
    if triton is not None:
        new = replace(new, triton=triton)
    for name, value in (('cpu_kernels', cpu_kernels),
                        ('composite', composite), ('cuda_kernels',
                                                   cuda_kernels)):
        if value is not None:
            if not isinstance(value, bool):
                raise TypeError(f'{name}={value!r}: use True or False')
            new = replace(new, **{name: value})
    _check(new)
    old, _settings = _settings, new
    for listener in _listeners:
        listener()
    return old


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener()`` whenever :func:`configure` sets the backends
    (ops that cache what the settings decided drop it there).

    Args:
        listener: A function of no arguments.
    """
    _listeners.append(listener)


def refresh() -> None:
    """Call the :func:`on_change` listeners with the settings unchanged:
    what the ops cached from them is stale (the CUDA kernels were switched
    off after a launch found no code for the GPU,
    :func:`mmact.ops.cuda_build.unserved`)."""
    for listener in _listeners:
        listener()


def _flag(name: str, meaning: str) -> bool:
    """An environment switch that is unset, ``0`` or ``1``."""
    value = os.environ.get(name, '')
    if value not in ('', '0', '1'):
        raise ValueError(f'{name}={value!r}: use 1 ({meaning}), 0 or leave '
                         'it unset')
    return value == '1'


def configure_from_env() -> BackendSettings:
    """Read ``MMACT_TRITON``, ``MMACT_DISABLE_CPU_KERNEL``,
    ``MMACT_COMPOSITE`` and ``MMACT_CUDA_KERNELS`` (done once at import);
    returns the previous settings.

    Raises:
        ValueError: One of them has another value than those documented.
        RuntimeError: as :func:`configure`.
    """
    value = os.environ.get('MMACT_TRITON', '')
    modes = {v: k for k, v in TRITON_MODES.items()}
    if value not in modes:
        raise ValueError(f'MMACT_TRITON={value!r}: use 1 (Triton for CPU '
                         'tensors too), 0 (never Triton) or leave it unset '
                         '(Triton for CUDA tensors)')
    disable = _flag('MMACT_DISABLE_CPU_KERNEL', 'no C kernels')
    composite = _flag('MMACT_COMPOSITE', 'the composite of every operator')
    cuda = _flag('MMACT_CUDA_KERNELS', 'the CUDA C++ kernels of APA / AGLU')
    try:
        return configure(
            triton=modes[value],
            cpu_kernels=not disable,
            composite=composite,
            cuda_kernels=cuda)
    except RuntimeError as e:
        raise RuntimeError(f'MMACT_TRITON={value}: {e}') from None


@contextlib.contextmanager
def using(**kwargs) -> Iterator[BackendSettings]:
    """:func:`configure` for a ``with`` block, restoring the settings after
    it (benchmarks comparing paths, tests)."""
    old = configure(**kwargs)
    try:
        yield settings()
    finally:
        configure(
            triton=old.triton,
            cpu_kernels=old.cpu_kernels,
            composite=old.composite,
            cuda_kernels=old.cuda_kernels)


@functools.lru_cache(maxsize=None)
def triton_launchable() -> bool:
    """Whether an installed Triton can compile the kernels (warns once when
    one is installed but older than :data:`~mmact.compat.TRITON_MIN`);
    asked once per process (``triton_launchable.cache_clear()`` asks
    again)."""
    version = triton_version()
    if version and version < TRITON_MIN:
        warnings.warn(
            f'mmact: Triton {_dotted(version)} is older than the '
            f'{_dotted(TRITON_MIN)} its kernels need; CUDA tensors take the '
            'torch path (pip install "triton>=2.1", or the torch that ships '
            'one)')
    return version >= TRITON_MIN


def use_triton(x: Tensor) -> bool:
    """Whether an op on ``x`` runs through the fused Triton kernels under
    the current settings: float32 / float16 / bfloat16 strided plain
    tensors on CUDA (``triton='cuda'`` or ``'all'``, Triton >= 2.1) or on
    the CPU (``'all'``). Code being traced (``torch.compile``,
    ``torch.jit``) never does.

    Args:
        x (Tensor): The op's input.

    Returns:
        bool: True for the Triton path.
    """
    # Tracing first: dynamo's strict backward mode bans reading x.layout.
    return not is_tracing() and takes_triton(x)


def takes_triton(x: Tensor) -> bool:
    """:func:`use_triton` for callers that asked
    :func:`~mmact.compat.is_tracing` already (the ops' dispatch)."""
    mode = _settings.triton
    if x.is_cuda:
        return mode != 'off' and _triton_reads(x) and triton_launchable()
    return mode == 'all' and x.is_cpu and _triton_reads(x)


def _triton_reads(x: Tensor) -> bool:
    return (x.dtype in TRITON_DTYPES and x.layout == torch.strided
            and type(x) in _PLAIN_TYPES)


configure_from_env()
