"""mmact.testing.triton_interpreter: the scalar ``__index__`` of Triton
3.0-3.7's interpreter, squeezed only there.

The kernel runs in a child process (``TRITON_INTERPRET`` is read when
Triton loads). ``make test-triton3.6`` runs this file with Triton 3.6 on
``PYTHONPATH``, where the patch applies; on the default stack's Triton 3.8
it must not.
"""
import json
import os
import subprocess
import sys

import pytest

from mmact.compat import triton_interpreter_available, triton_version
from mmact.testing.triton_interpreter import (FIXED_IN, interpreter_enabled,
                                              needs_scalar_index_patch,
                                              patch_scalar_index)

# A runtime loop bound: the interpreter calls ``n.__index__()``.
CHILD = r'''
import json
import sys

import numpy as np
import torch
import triton
import triton.language as tl
from triton.runtime import interpreter

from mmact.testing.triton_interpreter import patch_scalar_index


@triton.jit
def sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0))


patched = patch_scalar_index() if sys.argv[1] == 'patched' else False
before = getattr(tl.tensor, '__index__', None)
x = torch.arange(37, dtype=torch.float32)
out = torch.zeros(1)
report = dict(triton=triton.__version__, numpy=np.__version__,
              patched=patched)
try:
    sum_kernel[(1, )](x, out, x.numel(), BLOCK=8)
    report['sum'] = out.item()
except Exception as error:  # the interpreter wraps the TypeError
    report['error'] = repr(error)
# where Triton scopes its attributes to a launch, they are restored after
report['scoped'] = hasattr(interpreter, '_LangPatchScope')
report['restored'] = getattr(tl.tensor, '__index__', None) is before
print(json.dumps(report))
'''


@pytest.mark.parametrize('version,interpret,expected', [
    ((2, 1, 0), True, False),
    ((3, 0, 0), True, True),
    ((3, 6, 0), True, True),
    ((3, 7, 1), True, True),
    (FIXED_IN, True, False),
    ((3, 9, 0), True, False),
    ((3, 6, 0), False, False),
    ((), True, False),
])
def test_needs_scalar_index_patch(version, interpret, expected):
    assert needs_scalar_index_patch(version, interpret) is expected


@pytest.mark.parametrize('value,enabled', [('1', True), ('true', True),
                                           ('ON', True), ('0', False),
                                           ('', False), (None, False)])
def test_interpreter_enabled_reads_triton_interpret(monkeypatch, value,
                                                    enabled):
    if value is None:
        monkeypatch.delenv('TRITON_INTERPRET', raising=False)
    else:
        monkeypatch.setenv('TRITON_INTERPRET', value)
    assert interpreter_enabled() is enabled


def test_no_patch_without_the_interpreter(monkeypatch):
    monkeypatch.delenv('TRITON_INTERPRET', raising=False)
    assert patch_scalar_index() is False


def _run(mode: str) -> dict:
    env = dict(os.environ, TRITON_INTERPRET='1')
    result = subprocess.run([sys.executable, '-c', CHILD, mode],
                            env=env,
                            capture_output=True,
                            text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(
    not triton_interpreter_available(),
    reason='needs the interpreter of Triton >= 3.0 (Triton '
    f'{".".join(map(str, triton_version())) or "not installed"} here)')
def test_runtime_loop_bound_in_the_interpreter():
    """Patched only where needed; then the kernel's sum is right. Without
    it, Triton < 3.8 on numpy >= 2.4 fails as reported."""
    patched = _run('patched')
    assert patched['sum'] == sum(range(37)), patched
    version = tuple(int(v) for v in patched['triton'].split('.')[:2])
    assert patched['patched'] is (version < FIXED_IN), patched
    if patched['scoped']:  # the patch lives as long as Triton's own
        assert patched['restored'], patched
    plain = _run('plain')
    numpy_version = tuple(int(v) for v in plain['numpy'].split('.')[:2])
    if version < FIXED_IN and numpy_version >= (2, 4):
        assert 'only 0-dimensional arrays can be converted to Python ' \
            'scalars' in plain.get('error', ''), plain
    else:
        assert plain['sum'] == sum(range(37)), plain
