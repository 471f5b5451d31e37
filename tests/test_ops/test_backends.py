"""Which backends the ops use: the settings, read once
(mmact.ops.backends), and the per-operator table
(mmact.ops.apa.dispatch)."""
import os
import subprocess
import sys

import pytest
import torch

from mmact.ops import aglu, backends
from mmact.ops.apa.dispatch import implementation
from mmact.ops.backends import use_triton
from mmact.compat import triton_interpreter_available

needs_interpreter = pytest.mark.skipif(
    not triton_interpreter_available(),
    reason='needs Triton >= 3.0 (older Triton, or none: '
    'tests/test_compat.py checks that refusal)')


def test_cpu_default_is_not_triton():
    assert backends.settings().triton == 'cuda'
    assert not use_triton(torch.randn(3))


def test_environment_is_read_once(monkeypatch):
    """Per call the ops look at the tensor only: a switch changed after the
    settings were made has no effect until they are made again."""
    monkeypatch.setenv('MMACT_DISABLE_CPU_KERNEL', '1')
    assert backends.settings().cpu_kernels
    old = backends.configure_from_env()
    try:
        assert not backends.settings().cpu_kernels
        x = torch.randn(4)
        assert implementation(x, x[:1], x[:1]) == 'torch'
    finally:
        backends.configure(triton=old.triton, cpu_kernels=old.cpu_kernels)


@needs_interpreter
def test_cpu_without_interpreter_is_refused_when_configured(monkeypatch):
    monkeypatch.delenv('TRITON_INTERPRET', raising=False)
    with pytest.raises(RuntimeError, match='set TRITON_INTERPRET=1'):
        backends.configure(triton='all')
    monkeypatch.setenv('MMACT_TRITON', '1')
    with pytest.raises(
            RuntimeError, match='MMACT_TRITON=1: .*set TRITON_INTERPRET=1'):
        backends.configure_from_env()
    assert backends.settings().triton == 'cuda'  # unchanged


@pytest.mark.parametrize('name,value,match', [
    ('MMACT_TRITON', 'yes', "MMACT_TRITON='yes': use 1"),
    ('MMACT_DISABLE_CPU_KERNEL', 'true',
     "MMACT_DISABLE_CPU_KERNEL='true': use 1"),
])
def test_bad_switch_values(monkeypatch, name, value, match):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=match):
        backends.configure_from_env()
    with pytest.raises(ValueError, match="triton='yes': use one of"):
        backends.configure(triton='yes')
    with pytest.raises(TypeError, match="cpu_kernels='0': use True or False"):
        backends.configure(cpu_kernels='0')
    assert backends.settings() == backends.BackendSettings()  # unchanged


def test_a_bad_switch_stops_the_import():
    """The environment is checked where it is read: at import."""
    env = dict(os.environ, MMACT_TRITON='yes')
    proc = subprocess.run([sys.executable, '-c', 'import mmact.ops'],
                          env=env,
                          capture_output=True,
                          text=True)
    assert proc.returncode != 0
    assert "MMACT_TRITON='yes': use 1" in proc.stderr


@pytest.mark.parametrize('device', [
    'cpu',
    pytest.param(
        'cuda',
        marks=pytest.mark.skipif(
            not torch.cuda.is_available(), reason='no CUDA GPU'))
])
@needs_interpreter
def test_unsupported_inputs_take_the_torch_path(monkeypatch, device):
    monkeypatch.setenv('TRITON_INTERPRET', '1')  # so that 'all' is accepted
    with backends.using(triton='all'):
        x = torch.randn(4, 3, dtype=torch.float64, device=device)
        assert not use_triton(x)
        assert not use_triton(x.to_sparse())
        assert implementation(x, x[0, :1], x[0, :1]) == 'torch'
        torch.testing.assert_close(
            aglu(x, 1.0, 1.0), torch.nn.functional.silu(x))


def test_switched_off():
    with backends.using(triton='off'):
        assert backends.settings().triton == 'off'
        assert not use_triton(torch.randn(3))
    assert backends.settings().triton == 'cuda'


def test_traced_calls():
    """Tracers see the torch ops, never a kernel's data pointer (the ONNX
    export path: tests/test_ops/test_apa/test_apa.py::test_onnx_round_trip)."""
    seen = []

    def probe(x):
        seen.append(implementation(x, x[:1], x[:1]))
        return x * 2

    torch._dynamo.reset()
    torch.compile(probe, backend='eager', fullgraph=True)(torch.ones(2))
    torch.jit.trace(probe, torch.ones(2), check_trace=False)
    assert seen == ['composite', 'composite']


@pytest.mark.skipif(not torch.cuda.is_available(), reason='no CUDA GPU')
def test_cuda_takes_triton():
    x = torch.randn(8, device='cuda', dtype=torch.bfloat16)
    assert use_triton(x) == (pytest.importorskip('triton') is not None)
    assert implementation(x, x[:1], x[:1]) == 'triton'
    with backends.using(triton='off'):
        assert implementation(x, x[:1], x[:1]) == 'torch'
