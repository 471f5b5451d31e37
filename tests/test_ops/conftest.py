"""What the ops tests share: which of mmact's torch operators and Triton
launchers a call ran, read from the profiler (a public seam, no patch of
mmact's modules): the C++ operators show as ``mmact::<op>``, the Triton
launchers as ``mmact::triton_<launcher>`` (:mod:`mmact.ops.profiling`)."""
import contextlib
from typing import Iterator, List

import pytest
import torch

TRITON = 'mmact::triton_'


@contextlib.contextmanager
def recording() -> Iterator[List[str]]:
    names: List[str] = []
    with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        yield names
    names.extend(e.name for e in prof.events() if e.name.startswith('mmact::'))


@pytest.fixture
def sim():
    """``torch.ops.mmact_cuda_sim``: the CUDA kernels on CPU tensors
    (:mod:`mmact.testing.cuda_sim`, built once per process), at the
    simulation's defaults (an H100's 132 multiprocessors, permuted orders)
    again after the test."""
    from mmact.testing import cuda_sim
    ops = cuda_sim.operators()
    with cuda_sim.settings():
        yield ops


@pytest.fixture
def mmact_ops():
    """``with mmact_ops() as ran:``: after the block, ``ran`` lists the
    ``mmact::`` operators the block called, in order."""
    return recording


class Launches:
    """The Triton launchers called since the start (or :meth:`clear`), by
    name without the prefix (``'eta_forward'``, ``'fles'``); calling it
    reads them, stopping and restarting the profiler, so that it can be
    read in the middle of a test."""

    def __init__(self) -> None:
        self.names: List[str] = []
        self.start()

    def start(self) -> None:
        self.profile = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU])
        self.profile.start()

    def stop(self) -> None:
        self.profile.stop()
        self.names += [
            e.name[len(TRITON):] for e in self.profile.events()
            if e.name.startswith(TRITON)
        ]

    def __call__(self) -> List[str]:
        self.stop()
        self.start()
        return list(self.names)

    def clear(self) -> None:
        self()
        self.names.clear()


@pytest.fixture
def triton_launches():
    """A :class:`Launches` recording from the test's start to its end."""
    launches = Launches()
    yield launches
    launches.stop()


#: Torch ops that only allocate (the launchers' outputs and scratch).
ALLOCATIONS = frozenset({'aten::empty', 'aten::empty_like',
                         'aten::empty_strided'})


class Calls:
    """What a block of code ran, read from the profiler: ``kernels``, the
    Triton kernels launched (``triton::<kernel>`` ranges,
    :mod:`mmact.ops.triton_launch`), in order; ``ops``, the torch ops
    called outside them that do more than allocate, outermost only (an
    op's own sub-ops, and what Triton's interpreter runs inside a kernel,
    are not counted); with ``within``, only those inside the named ranges
    (an autograd node's backward: ``'FusedFunctionBackward'``); with
    ``skip``, none inside the named ranges (FleS's MLP: ``'fles.mlp'``)."""

    def __init__(self, within=None, skip=()) -> None:
        self.within = within
        self.skip = skip
        self.kernels: List[str] = []
        self.ops: List[str] = []

    def __enter__(self) -> 'Calls':
        self.profile = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU])
        self.profile.start()
        return self

    def __exit__(self, *exc) -> None:
        self.profile.stop()
        for event in self.profile.events():
            if event.name.startswith('triton::'):
                self.kernels.append(event.name[len('triton::'):])
            elif (event.name.startswith('aten::')
                  and event.name not in ALLOCATIONS and self._counts(event)):
                self.ops.append(event.name)

    def _counts(self, event) -> bool:
        inside = self.within is None
        parent = event.cpu_parent
        while parent is not None:
            if (parent.name.startswith(('aten::', 'triton::'))
                    or parent.name in self.skip):
                return False
            if self.within is not None and parent.name in self.within:
                inside = True
            parent = parent.cpu_parent
        return inside


@pytest.fixture
def torch_calls():
    """``with torch_calls() as calls:`` (or ``torch_calls(within=...)``):
    the kernels and torch ops the block ran (:class:`Calls`)."""
    return Calls


def pytest_configure(config):
    """The Triton cases under ``TRITON_INTERPRET=1`` on Triton 3.0 to 3.7
    with numpy >= 2.4: the interpreter's scalar ``__index__`` squeezed, as
    Triton 3.8 does (:mod:`mmact.testing.triton_interpreter`); nothing
    elsewhere."""
    from mmact.testing.triton_interpreter import patch_scalar_index
    patch_scalar_index()
