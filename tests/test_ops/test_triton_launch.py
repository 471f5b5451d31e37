"""mmact.ops.triton_launch: each Triton version's launch path.

The direct path of each version runs here on stand-in kernels (no GPU
compiles a kernel in CI); the installed Triton's own sources are held to
the call it makes (``JITFunction.run``'s launch of a cached kernel and
``CompiledKernel[grid]``'s runner are the same call), on each stack's
Triton (2.1 and 3.x; ``PYTHONPATH`` with another Triton checks that one).
"""
import inspect
import re

import pytest

from mmact.compat import triton_version
from mmact.ops.triton_launch import DIRECT_MODE, Launch, direct_mode


class StandIn:
    """A ``@triton.jit`` kernel's interface: ``kernel[grid](*args,
    **constexprs)`` returns the compiled kernel (None in the interpreter),
    whose ``[grid]`` is a runner."""
    __name__ = 'stand_in_kernel'
    arg_names = ['x_ptr', 'n', 'BLOCK', 'FLAG']

    def __init__(self, compiles: bool = True) -> None:
        self.compiles = compiles
        self.runs, self.direct = [], []

    def __getitem__(self, grid):

        def run(*args, **constexprs):
            self.runs.append((grid, args, constexprs))
            return self if self.compiles else None

        return run

    def runner(self, grid):
        return lambda *args: self.direct.append((grid, args))


class Compiled(StandIn):

    def __getitem__(self, grid):
        if self.runs:  # compiled: CompiledKernel[grid]
            return self.runner(grid)
        return super().__getitem__(grid)


@pytest.mark.parametrize('mode,tail', [('runtime', ()), ('all', (64, True))])
def test_direct_modes_call_the_compiled_kernel(mode, tail):
    kernel = Compiled()
    launch = Launch(kernel, (5, ), dict(BLOCK=64, FLAG=True), mode=mode)
    for n in (3, 4, 5):
        launch('x', n)
    # the first call compiles through JITFunction.run, later ones go to the
    # compiled kernel's runner with the grid padded to three axes
    assert kernel.runs == [((5, 1, 1), ('x', 3), dict(BLOCK=64, FLAG=True))]
    assert kernel.direct == [((5, 1, 1), ('x', n) + tail) for n in (4, 5)]


@pytest.mark.parametrize('compiles', [True, False])
def test_without_direct_mode_every_call_is_jit_run(compiles):
    """Triton 3.0-3.5, and the interpreter (whose run returns None)."""
    kernel = StandIn(compiles)
    mode = None if compiles else 'all'
    launch = Launch(kernel, (2, 3), dict(BLOCK=8, FLAG=False), mode=mode)
    launch('x', 1)
    launch('x', 2)
    assert [r[1] for r in kernel.runs] == [('x', 1), ('x', 2)]
    assert kernel.direct == []


def test_modes_per_version():
    assert direct_mode((2, 1, 0)) == 'runtime'
    assert direct_mode((2, 3, 1)) == 'runtime'
    for version in ((3, 0, 0), (3, 2, 0), (3, 5, 1)):
        assert direct_mode(version) is None
    for version in ((3, 6, 0), (3, 7, 1), (3, 8, 0)):
        assert direct_mode(version) == 'all'
    assert direct_mode((3, 8, 0), interpreted=True) is None
    assert direct_mode(()) is None


def _flat(source: str) -> str:
    return re.sub(r'\s+', '', source)


def _call(source: str, name: str) -> str:
    """The text of the first call ``name(...)`` in ``source``."""
    start = source.index(name + '(')
    depth = 0
    for i in range(start, len(source)):
        depth += {'(': 1, ')': -1}.get(source[i], 0)
        if depth == 0 and source[i] == ')':
            return source[start:i + 1]
    raise AssertionError(f'no call of {name}')


def test_installed_triton_launches_as_the_runner():
    """The installed Triton's JITFunction.run launches a cached kernel with
    the call CompiledKernel[grid]'s runner makes (so the runner with the
    arguments Launch passes is JITFunction.run without the look-up)."""
    pytest.importorskip('triton')
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.jit import JITFunction
    runner = _flat(inspect.getsource(CompiledKernel.__getitem__))
    version = triton_version()
    if version >= (3, 0):
        launch = _flat(_call(inspect.getsource(JITFunction.run), 'kernel.run'))
        launch = (launch.replace('kernel.', 'self.').replace(
            'grid_0,grid_1,grid_2', 'grid[0],grid[1],grid[2]').replace(
                '*bound_args.values()', '*args'))
        # all bound arguments, the constexprs included, in order
        assert '*bound_args.values()' in _flat(
            inspect.getsource(JITFunction.run))
    else:
        source = inspect.getsource(JITFunction._make_launcher)
        launch = _flat(_call(source[source.index('if not warmup'):],
                             'bin.c_wrapper'))
        launch = (launch.replace('bin.', 'self.').replace(
            ',bin,', ',self,').replace('grid_0,grid_1,grid_2',
                                       'grid[0],grid[1],grid[2]').replace(
                                           '{args}', '*args'))
        # the runtime arguments only (the constexprs are not passed)
        assert "regular_args=[f'{arg}'" in _flat(source)
    assert launch in runner, (launch, runner)
    assert DIRECT_MODE == direct_mode(version)
