"""When the ops take the Triton path (``MMACT_TRITON``).

The kernels sit beside the ops they serve (:mod:`mmact.ops.apa_triton`,
:mod:`mmact.ops.fles.triton_path`); this module imports no triton.
"""
import functools
import os
import warnings

import torch
from torch import Tensor

from ..versions import (TRITON_MIN, is_tracing, triton_interpreter_available,
                        triton_version)

__all__ = ['use_triton', 'TRITON_DTYPES']

#: Input dtypes the kernels read (computed in float32, stored back as is).
TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _dotted(version: tuple) -> str:
    return '.'.join(map(str, version))


@functools.lru_cache(maxsize=None)
def _triton_launchable() -> bool:
    """Whether an installed Triton can compile the kernels (warns once when
    one is installed but older than :data:`~mmact.versions.TRITON_MIN`)."""
    version = triton_version()
    if version and version < TRITON_MIN:
        warnings.warn(
            f'mmact: Triton {_dotted(version)} is older than the '
            f'{_dotted(TRITON_MIN)} its kernels need; CUDA tensors take the '
            'torch path (pip install "triton>=2.1", or the torch that ships '
            'one)')
    return version >= TRITON_MIN


def use_triton(x: Tensor) -> bool:
    """Whether an op on ``x`` runs through the fused Triton kernels.

    ``MMACT_TRITON`` unset (or empty): CUDA tensors do, with Triton >= 2.1
    installed. ``MMACT_TRITON=0``: nothing does (the torch path; for
    comparisons). ``MMACT_TRITON=1``: CPU tensors do too, through Triton's
    interpreter, which needs Triton >= 3.0 and ``TRITON_INTERPRET=1`` set
    before triton is imported. Tensors the kernels do not cover (float64,
    sparse, tensor subclasses) and code being traced by ``torch.compile`` /
    ``torch.jit`` take the torch path.

    Args:
        x (Tensor): The op's input.

    Returns:
        bool: True for the Triton path.

    Raises:
        ValueError: ``MMACT_TRITON`` is set to another value.
        RuntimeError: ``MMACT_TRITON=1`` on a CPU tensor without
            ``TRITON_INTERPRET=1``, without triton installed or with a
            Triton older than 3.0.
    """
    # Tracing first: dynamo's strict backward mode bans reading x.layout,
    # and torch 2.1's dynamo cannot trace os.environ.
    if is_tracing():
        return False
    mode = os.environ.get('MMACT_TRITON', '')
    if mode not in ('', '0', '1'):
        raise ValueError(f'MMACT_TRITON={mode!r}: use 1 (Triton for CPU '
                         'tensors too), 0 (never Triton) or leave it unset '
                         '(Triton for CUDA tensors)')
    if (mode == '0' or x.dtype not in TRITON_DTYPES
            or x.layout != torch.strided
            or type(x) not in (Tensor, torch.nn.Parameter)):
        return False
    if x.device.type == 'cuda':
        return _triton_launchable()
    if mode != '1' or x.device.type != 'cpu':
        return False
    if not triton_version():
        raise RuntimeError('MMACT_TRITON=1 needs the triton package '
                           '(pip install triton), which is not installed')
    if not triton_interpreter_available():
        raise RuntimeError(
            'MMACT_TRITON=1 sends CPU tensors to the Triton kernels, which '
            'run on the CPU only in the interpreter of Triton >= 3.0; Triton '
            f'{_dotted(triton_version())} is installed: unset MMACT_TRITON '
            'to use the CPU path')
    if os.environ.get('TRITON_INTERPRET', '') != '1':
        raise RuntimeError(
            'MMACT_TRITON=1 sends CPU tensors to the Triton kernels, which '
            'run on the CPU only in Triton\'s interpreter (Triton >= 3.0): '
            'also set TRITON_INTERPRET=1 (before Python starts, so that '
            'triton reads it at import), or unset MMACT_TRITON to use the '
            'CPU path')
    return True
