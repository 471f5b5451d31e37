"""When the ops take the Triton path (``MMACT_TRITON``).

The kernels sit beside the ops they serve (:mod:`mmact.ops.apa_triton`,
:mod:`mmact.ops.fles.triton_path`); this module imports no triton.
"""
import importlib.util
import os

import torch
from torch import Tensor

__all__ = ['use_triton', 'TRITON_DTYPES']

#: Input dtypes the kernels read (computed in float32, stored back as is).
TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

_HAS_TRITON = importlib.util.find_spec('triton') is not None


def use_triton(x: Tensor) -> bool:
    """Whether an op on ``x`` runs through the fused Triton kernels.

    ``MMACT_TRITON`` unset (or empty): CUDA tensors do. ``MMACT_TRITON=0``:
    nothing does (the torch path; for comparisons). ``MMACT_TRITON=1``: CPU
    tensors do too, through Triton's interpreter, which needs
    ``TRITON_INTERPRET=1`` set before triton is imported. Tensors the kernels
    do not cover (float64, sparse, tensor subclasses) and code being traced by
    ``torch.compile`` / ``torch.jit`` take the torch path.

    Args:
        x (Tensor): The op's input.

    Returns:
        bool: True for the Triton path.

    Raises:
        ValueError: ``MMACT_TRITON`` is set to another value.
        RuntimeError: ``MMACT_TRITON=1`` on a CPU tensor without
            ``TRITON_INTERPRET=1``, or without triton installed.
    """
    mode = os.environ.get('MMACT_TRITON', '')
    if mode not in ('', '0', '1'):
        raise ValueError(f'MMACT_TRITON={mode!r}: use 1 (Triton for CPU '
                         'tensors too), 0 (never Triton) or leave it unset '
                         '(Triton for CUDA tensors)')
    # Tracing first: dynamo's strict backward mode bans reading x.layout.
    if (mode == '0' or torch.compiler.is_compiling()
            or torch.jit.is_tracing()):
        return False
    if (x.dtype not in TRITON_DTYPES or x.layout != torch.strided
            or type(x) not in (Tensor, torch.nn.Parameter)):
        return False
    if x.device.type == 'cuda':
        return _HAS_TRITON
    if mode != '1' or x.device.type != 'cpu':
        return False
    if not _HAS_TRITON:
        raise RuntimeError('MMACT_TRITON=1 needs the triton package '
                           '(pip install triton), which is not installed')
    if os.environ.get('TRITON_INTERPRET', '') != '1':
        raise RuntimeError(
            'MMACT_TRITON=1 sends CPU tensors to the Triton kernels, which '
            'run on the CPU only in Triton\'s interpreter: also set '
            'TRITON_INTERPRET=1 (before Python starts, so that triton reads '
            'it at import), or unset MMACT_TRITON to use the CPU path')
    return True
