"""Fused Triton kernels of the mmact ops (GPU path).

The ops of :mod:`mmact.ops` call these for CUDA tensors of float32, float16
or bfloat16 (see :func:`use_triton` for the switch ``MMACT_TRITON`` and for
the CPU interpreter used by the tests). Kernels compute in float32 and store
results in the input dtype. Modules here other than :mod:`.dispatch` import
triton, so they are imported only when a kernel is about to run.
"""
from .dispatch import TRITON_DTYPES, use_triton

__all__ = ['use_triton', 'TRITON_DTYPES']
