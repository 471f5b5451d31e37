"""The CPU simulation of the CUDA kernels itself (:mod:`mmact.testing.cuda_sim`):
the orders it runs blocks and threads in, why they are permuted, its
barrier checks, its settings, the operators it mirrors and what its build
key holds. The kernels' own tests through it are test_apa/test_cuda_sim.py
and test_fles/test_cuda_sim.py."""
import re

import pytest
import torch

from mmact.ops import cpu_build
from mmact.testing import cuda_sim


def test_orders(sim):
    """Seed 0 runs blocks and threads in order; another seed permutes the
    blocks of each launch and the threads of each block anew at each
    barrier; a seed repeats its orders after configure."""
    cuda_sim.configure(order_seed=0)
    ranks, blocks = sim.probe_orders(16, 64)
    assert torch.equal(blocks, torch.arange(16))
    assert torch.equal(ranks, torch.arange(64).expand(16, 2, 64))
    cuda_sim.configure(order_seed=1)
    ranks, blocks = sim.probe_orders(16, 64)
    assert torch.equal(blocks.sort().values, torch.arange(16))
    assert not torch.equal(blocks, torch.arange(16))
    assert torch.equal(
        ranks.sort(-1).values,
        torch.arange(64).expand(16, 2, 64))
    assert not (ranks == torch.arange(64)).all(-1).any()
    assert not (ranks[:, 0] == ranks[:, 1]).all(-1).any()
    assert not (ranks[0] == ranks[1]).all()
    cuda_sim.configure(order_seed=1)
    assert all(map(torch.equal, sim.probe_orders(16, 64), (ranks, blocks)))
    cuda_sim.configure(order_seed=2)
    assert not torch.equal(sim.probe_orders(16, 64)[0], ranks)
    assert cuda_sim.launched() == [16]


def test_permuted_threads_show_a_missing_barrier(sim):
    """Threads that read what their neighbours wrote to shared memory: with
    the barrier right in any order; without it right in order (each thread
    ran after its neighbour), wrong in permuted orders."""
    want = torch.arange(-1, 63).expand(4, 64) + 1000 * torch.arange(4)[:, None]
    want[:, 0] = -1
    assert torch.equal(sim.probe_neighbours(4, True), want)
    cuda_sim.configure(order_seed=0)
    assert torch.equal(sim.probe_neighbours(4, False), want)
    cuda_sim.configure(order_seed=1)
    assert (sim.probe_neighbours(4, False) != want).sum() > 4 * 16


def test_divergent_barriers_raise(sim):
    """Threads at different __syncthreads, or some returned while others
    wait: an error naming both places, not a hang."""
    with pytest.raises(
            RuntimeError,
            match=r'mmact_cuda_sim: a divergent __syncthreads in '
            r'block \d: thread \d waits at cuda_sim\.cpp:(\d+), '
            r'thread \d waits at cuda_sim\.cpp:(?!\1)\d+'):
        sim.probe_divergence(0)
    with pytest.raises(
            RuntimeError,
            match=r'thread \d waits at cuda_sim\.cpp:\d+, thread 3 '
            r'has returned'):
        sim.probe_divergence(1)
    # the next launch runs
    assert sim.probe_neighbours(1, True)[0, 1] == 0


def test_settings_are_checked(sim):
    with pytest.raises(ValueError, match='multiprocessors=0 must be >= 1'):
        cuda_sim.configure(multiprocessors=0)
    with pytest.raises(ValueError, match='order_seed=-1 must be >= 0'):
        cuda_sim.configure(order_seed=-1)


def test_every_operator_of_mmact_is_mirrored(sim):
    """The namespace has each mmact operator with its schema; the CUDA
    kernels' are registered for CPU tensors."""
    names = [
        s.name[len('mmact::'):] for s in torch._C._jit_get_all_schemas()
        if s.name.startswith('mmact::')
    ]
    assert {'apa', 'aglu_backward_rebuilt', 'fles_stats'} <= set(names)
    for name in names:
        schema = str(getattr(sim, name).default._schema)
        want = str(getattr(torch.ops.mmact, name).default._schema)
        assert schema == want.replace('mmact::', 'mmact_cuda_sim::', 1)
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    for name in ('apa', 'aglu_backward', 'fles_gate_backward',
                 'fles_indicator_backward'):
        assert has(f'mmact_cuda_sim::{name}', 'CPU'), name


def test_the_build_key_holds_the_kernels_and_the_stand_ins():
    """The key's text of each wrapper inlines the CUDA source, its headers
    and the shim's stand-ins for c10's CUDA headers (found first on the
    include path), so a change to any of them builds again."""
    folders = [cuda_sim.CSRC, cpu_build.CSRC]
    text = cpu_build.read_source('apa_cuda_sim.cpp', folders)
    files = re.findall(r'^#line 1 "(.+)"$', text, re.MULTILINE)
    assert files == [
        'csrc/apa_cuda_sim.cpp', 'csrc/cuda_sim.h', 'csrc/apa_cuda.cu',
        'csrc/c10/cuda/CUDAException.h', 'csrc/c10/cuda/CUDAGuard.h',
        'csrc/c10/cuda/CUDAStream.h', 'csrc/apa_checks.h',
        'csrc/cuda_tensors.h', 'csrc/apa_math.h', 'csrc/approx.h'
    ]
    assert '#include <ATen/core/Tensor.h>' in text  # torch's: not inlined
    fles = cpu_build.read_source('fles_cuda_sim.cpp', folders)
    assert 'fles_math.h' in fles and 'MMACT_GPU_MATH' in fles
