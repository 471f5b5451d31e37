"""The rule that decides which tests make test-torch2.1 leaves out
(mmact.testing.stack_rule): what counts as a use of the stack, and the
check tests/conftest.py runs on every test marked stack_independent."""
import subprocess
import sys

import numpy as np
import pytest
import torch

from mmact.testing.stack_rule import STACK_MODULES, StackUse, stack_imports


def test_torch_operators_are_seen():
    with StackUse() as use:
        x = torch.ones(3)
        (x * 2).sum()
    assert use.found[0] == 'torch operator aten.ones.default'
    assert any('aten.mul' in f for f in use.found), use.found
    # gone after the block
    with StackUse() as idle:
        pass
    torch.zeros(2)
    assert idle.found == []


def test_numpy_functions_are_seen_and_still_work():
    with StackUse() as use:
        a = np.arange(4)
    with StackUse() as ufunc:
        total = np.add.reduce(a)
    with StackUse() as random:
        rng = np.random.default_rng(0)
    assert total == 6 and rng.integers(0, 1) == 0
    assert use.found == ['numpy function numpy.arange']
    assert ufunc.found == ['numpy function numpy.add']
    # first (numpy's own code calls its namespace too)
    assert random.found[0] == 'numpy function numpy.random.default_rng'
    assert type(np.add).__name__ == 'ufunc'  # restored


def test_numpy_functions_keep_their_docstrings():
    """numpy.ma, first imported inside the block (a test's config check
    imports mmdet's datasets), rewrites numpy's docstrings: reading one is
    no use, and each is the function's."""
    with StackUse() as use:
        docs = [np.arange.__doc__, np.random.default_rng.__doc__]
    assert docs == [np.arange.__doc__, np.random.default_rng.__doc__]
    assert 'arange : ndarray' in docs[0]
    assert use.found == []


def test_processes_are_seen(tmp_path):
    with StackUse() as use:
        subprocess.run([sys.executable, '-c', 'pass'], check=True)
    assert use.found == [f'process {sys.executable} -c pass']
    assert subprocess.Popen.__init__.__name__ == '__init__'
    # a shell script's syntax check reads it only
    script = tmp_path / 'x.sh'
    script.write_text('echo ran > ran.txt\n')
    with StackUse() as check:
        subprocess.run(['bash', '-n', str(script)], cwd=tmp_path, check=True)
    assert check.found == [] and not (tmp_path / 'ran.txt').exists()
    with StackUse() as run:
        subprocess.run(['bash', str(script)], cwd=tmp_path, check=True)
    assert run.found == [f'process bash {script}']
    with StackUse() as idle:
        str(1)
    assert idle.found == []


def test_forked_tool_runs_are_seen():
    from mmact.testing.tool_fork import _Zygote, run_python
    run_python(['-c', 'pass'], timeout=120)  # its zygote started before
    unwatched = _Zygote.run
    with StackUse() as use:
        assert run_python(['-c', 'pass'], timeout=120).returncode == 0
    assert use.found == ['process (forked) -c pass']
    assert _Zygote.run is unwatched


def test_a_first_import_is_not_a_use(tmp_path, monkeypatch):
    """A module's top-level code runs in whichever test imports it first:
    not a use (the rule would depend on the order); its functions are."""
    (tmp_path / 'stack_rule_probe.py').write_text(
        'import torch\nONES = torch.ones(2)\n\n\n'
        'def twos():\n    return torch.full((2, ), 2.0)\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    with StackUse() as use:
        import stack_rule_probe
    assert use.found == [] and stack_rule_probe.ONES.sum() == 2
    with StackUse() as call:
        stack_rule_probe.twos()
    assert call.found == ['torch operator aten.full.default']


def test_reading_files_and_configs_uses_nothing(tmp_path):
    from mmengine.config import Config
    config = tmp_path / 'c.py'
    config.write_text('model = dict(type="ReLU", depth=[1, 2])\n')
    with StackUse() as use:
        cfg = Config.fromfile(str(config))
        text = config.read_text()
    assert cfg.model.depth == [1, 2] and 'ReLU' in text
    assert use.found == []


PROBE = """
import json
import numpy as np
from mmact.ops import apa
from mmact import ops
from mmengine.config import Config


def test_plain():
    import re


def test_torch():
    import torch.nn as nn
    from triton import language
"""


def test_stack_imports_of_a_module_and_a_test(tmp_path):
    """The module's top-level imports and the test's own (mmengine and
    mmdet are the same on both stacks)."""
    import importlib.util
    path = tmp_path / 'probe.py'
    path.write_text(PROBE)
    spec = importlib.util.spec_from_file_location('probe', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    top = ['numpy', 'mmact.ops', 'mmact.ops.apa']
    assert stack_imports(module) == top
    assert stack_imports(module, module.test_plain) == top
    assert stack_imports(
        module,
        module.test_torch) == top + ['torch.nn', 'triton', 'triton.language']
    assert {'torch', 'numpy', 'triton', 'mmcv'} <= set(STACK_MODULES)


pytest_plugins = ['pytester']


def test_conftest_fails_a_marked_test_that_uses_the_stack(pytester):
    """A test marked stack_independent that runs a torch operator, calls
    numpy, starts a process or imports torch fails with what it used; one
    that reads text passes; unmarked tests are not held to the rule."""
    pytester.makeconftest(
        open(
            __file__.replace('test_testing/test_stack_rule.py',
                             'conftest.py')).read())
    pytester.makepyfile(test_probe='''
        import subprocess, sys
        import pytest
        mark = pytest.mark.stack_independent

        @pytest.fixture
        def tensor_fixture():
            import torch
            return torch.zeros(1)

        @mark
        def test_text():
            assert 'a b'.split() == ['a', 'b']

        @mark
        def test_operator():
            import torch
            torch.ones(1)

        @mark
        def test_in_fixture(tensor_fixture):
            pass

        @mark
        def test_numpy():
            import numpy
            numpy.zeros(1)

        @mark
        def test_process():
            subprocess.run([sys.executable, '-c', 'pass'])

        def test_unmarked():
            import torch
            torch.ones(1)
        ''')
    result = pytester.runpytest_inprocess('-p', 'no:cacheprovider', '-q')
    result.assert_outcomes(passed=2, failed=4)
    out = result.stdout.str()
    assert 'test_operator is marked stack_independent' in out
    assert 'imports torch; used torch operator aten.ones.default' in out
    assert 'test_in_fixture is marked' in out and 'aten.zeros' in out
    assert 'used numpy function numpy.zeros' in out
    assert f'used process {sys.executable} -c pass' in out
