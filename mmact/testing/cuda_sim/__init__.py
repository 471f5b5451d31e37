"""The CPU simulation of mmact's CUDA kernels, for tests without a GPU.

The unchanged CUDA sources (``mmact/ops/csrc/apa_cuda.cu``,
``fles_cuda.cu``: kernels, device helpers, host-side planning) compiled by
the host compiler through small ``.cpp`` wrappers and a shim header
(``csrc/cuda_sim.h``), built by :func:`mmact.ops.cpu_build.build_extension`
under a cache key of its own, and registered for the operators of the test
namespace ``mmact_cuda_sim`` on CPU tensors: ``torch.ops.mmact_cuda_sim``
has every operator of ``mmact`` with its schema, and the CUDA row's
kernels for them (``apa`` / ``aglu`` forward, backward and rebuilt
backward, FleS's pass operators).

A launch runs its blocks one after another in a permuted order; a block's
threads are fibers that switch only at ``__syncthreads``, in a new permuted
order each time, and a divergent barrier raises. The element math takes
the GPU's formulas with the host's ``exp2f``: the GPU's steps, not its
bits. The multiprocessors the launch plans read and the orders' seed are
:func:`configure`'s; :func:`launched` lists the launches' block counts.
"""
import contextlib
import os.path as osp
import threading
from typing import Iterator, List, Optional

import torch

from mmact.ops import cpu_build

__all__ = [
    'CSRC', 'SOURCES', 'build', 'operators', 'configure', 'settings',
    'launched'
]

#: The shim, its stand-ins for c10's CUDA headers and the wrappers.
CSRC = osp.join(osp.dirname(osp.abspath(__file__)), 'csrc')
#: The library's translation units, in :data:`CSRC`.
SOURCES = ('apa_cuda_sim.cpp', 'fles_cuda_sim.cpp', 'cuda_sim.cpp')
_STEM = _NAMESPACE = 'mmact_cuda_sim'
_lock = threading.Lock()
_library: Optional[torch.library.Library] = None  # the definitions, kept


def build(cache_dir: Optional[str] = None) -> None:
    """Build the library into the cache unless it is there, and load it
    (its operators appear under ``torch.ops.mmact_cuda_sim``).

    Args:
        cache_dir: default :func:`mmact.ops.cpu_build.default_cache_dir`.

    Raises:
        RuntimeError: what :func:`mmact.ops.cpu_build.build_extension`
            raises (no gcc, a failed build).
    """
    cpu_build.build_extension(
        cache_dir=cache_dir, stem=_STEM, sources=SOURCES, include_dirs=[CSRC])


def operators() -> torch._ops._OpNamespace:
    """``torch.ops.mmact_cuda_sim``, once per process: the operators of
    ``mmact`` (the CPU extension's, :func:`mmact.ops.cpu_build.load_extension`)
    defined there with their schemas, then the library built and loaded,
    which registers the CUDA kernels for them on CPU tensors.

    Raises:
        RuntimeError: the CPU extension or the library could not be built.
    """
    global _library
    with _lock:
        if _library is None:
            if cpu_build.load_extension() is None:
                raise RuntimeError('the CPU extension, whose operators the '
                                   'simulation mirrors, could not be built')
            library = torch.library.Library(_NAMESPACE, 'FRAGMENT')
            for schema in torch._C._jit_get_all_schemas():
                if schema.name.startswith('mmact::'):
                    library.define(str(schema)[len('mmact::'):])
            build()
            _library = library
    return getattr(torch.ops, _NAMESPACE)


def configure(multiprocessors: int = 132, order_seed: int = 1) -> None:
    """Set the simulated GPU and the orders; clears :func:`launched`.

    Args:
        multiprocessors: the SM count the launch plans read (H100 SXM: 132,
            A100: 108).
        order_seed: the seed of each launch's block order and each block's
            thread orders (a launch's orders follow from the seed and the
            launches before it since this call); 0 runs blocks and threads
            in order.

    Raises:
        ValueError: ``multiprocessors < 1`` or ``order_seed < 0``, named.
    """
    operators().configure(multiprocessors, order_seed)


@contextlib.contextmanager
def settings(multiprocessors: int = 132,
             order_seed: int = 1) -> Iterator[None]:
    """:func:`configure` for the block, the defaults after it."""
    configure(multiprocessors, order_seed)
    try:
        yield
    finally:
        configure()


def launched() -> List[int]:
    """The block counts of the launches since :func:`configure`, in
    order."""
    return list(operators().launched())
