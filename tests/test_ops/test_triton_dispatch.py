"""Which tensors take the Triton path (mmact.ops.dispatch.use_triton)."""
import pytest
import torch

from mmact.ops import aglu, apa
from mmact.ops.dispatch import use_triton
from mmact.versions import triton_interpreter_available


def test_cpu_default_is_not_triton(monkeypatch):
    monkeypatch.delenv('MMACT_TRITON', raising=False)
    assert not use_triton(torch.randn(3))


@pytest.mark.skipif(
    not triton_interpreter_available(),
    reason='needs Triton >= 3.0 (older Triton, or none: '
    'tests/test_versions.py checks that refusal)')
def test_cpu_without_interpreter_is_a_clear_error(monkeypatch):
    monkeypatch.setenv('MMACT_TRITON', '1')
    monkeypatch.delenv('TRITON_INTERPRET', raising=False)
    with pytest.raises(RuntimeError, match='set TRITON_INTERPRET=1'):
        aglu(torch.randn(4, 3), 1.0, 1.0)


def test_bad_switch_value(monkeypatch):
    monkeypatch.setenv('MMACT_TRITON', 'yes')
    with pytest.raises(ValueError, match='MMACT_TRITON=.yes.: use 1'):
        apa(torch.randn(4, 3), 1.0, 1.0)


@pytest.mark.parametrize('device', [
    'cpu',
    pytest.param(
        'cuda',
        marks=pytest.mark.skipif(
            not torch.cuda.is_available(), reason='no CUDA GPU'))
])
def test_unsupported_inputs_take_the_torch_path(monkeypatch, device):
    # MMACT_TRITON=1 without the interpreter would raise for a CPU tensor
    # that took the Triton path: these must not.
    monkeypatch.setenv('MMACT_TRITON', '1')
    monkeypatch.delenv('TRITON_INTERPRET', raising=False)
    x = torch.randn(4, 3, dtype=torch.float64, device=device)
    assert not use_triton(x)
    assert not use_triton(x.to_sparse())
    torch.testing.assert_close(aglu(x, 1.0, 1.0), torch.nn.functional.silu(x))


def test_switched_off(monkeypatch):
    monkeypatch.setenv('MMACT_TRITON', '0')
    assert not use_triton(torch.randn(3))


@pytest.mark.skipif(not torch.cuda.is_available(), reason='no CUDA GPU')
def test_cuda_takes_triton(monkeypatch):
    monkeypatch.delenv('MMACT_TRITON', raising=False)
    x = torch.randn(8, device='cuda', dtype=torch.bfloat16)
    assert use_triton(x) == (pytest.importorskip('triton') is not None)
