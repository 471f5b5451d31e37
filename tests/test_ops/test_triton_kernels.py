"""Triton kernels against the float64 reference, in a fresh process.

``TRITON_INTERPRET`` is read when triton compiles a kernel module, so the
cases (``triton_*_cases.py``) run in a subprocess: on the CPU through
Triton's interpreter (``TRITON_INTERPRET=1 MMACT_TRITON=1``, every CI run)
and, where a CUDA GPU is present, compiled on it. The rest of the suite
never sees these variables.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
CASES = ['triton_apa_cases.py']


def run_cases(cases: str, device: str) -> None:
    env = dict(os.environ, MMACT_TEST_DEVICE=device)
    env.pop('TRITON_INTERPRET', None)
    env.pop('MMACT_TRITON', None)
    if device == 'cpu':
        env.update(TRITON_INTERPRET='1', MMACT_TRITON='1')
    proc = subprocess.run([
        sys.executable, '-m', 'pytest', '-q', '-x', '-p', 'no:cacheprovider',
        str(HERE / cases)
    ],
                          cwd=HERE.parents[1],
                          env=env,
                          capture_output=True,
                          text=True,
                          timeout=900)
    assert proc.returncode == 0, (proc.stdout[-8000:] + proc.stderr[-2000:])
    print(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize('cases', CASES)
def test_in_triton_interpreter(cases):
    pytest.importorskip('triton')
    run_cases(cases, 'cpu')


@pytest.mark.skipif(not torch.cuda.is_available(), reason='no CUDA GPU')
@pytest.mark.parametrize('cases', CASES)
def test_on_cuda(cases):
    run_cases(cases, 'cuda')
