"""A GPU the CUDA kernels hold no code for (:func:`mmact.ops.cuda_build.
unserved`), without a GPU: the launch error CUDA raises there (here raised
by stand-ins of the kernels' entries, on CPU tensors read as ``cuda:0``, a
compute capability 12.0 GPU) switches the CUDA kernels off with one warning
naming the architecture, and each place that calls them reruns the call on
the next row, with the next row's values; other errors are raised."""
import re
import warnings

import pytest
import torch

from mmact.ops import aglu, apa, backends, cpu_build, cuda_build
from mmact.ops.apa import aglu_reference, apa_reference, cpu, rebuilt_backward
from mmact.ops.apa.dispatch import OpRowCache
from mmact.ops.fles import (fles_fused, fles_reference, fles_shared_mlp_scales,
                            fused, window_geometry)
from mmact.ops.fles.dispatch import OperatorWindows, Plan

NO_IMAGE = ('CUDA error: no kernel image is available for execution on the '
            'device\nCUDA kernel errors might be asynchronously reported at '
            'some other API call')
WARNING = (r'mmact: the CUDA kernels hold no code that cuda:0 \(sm_120, '
           r'compute capability 12\.0\) runs \(CUDA error: no kernel image '
           r'is available for execution on the device\); APA / AGLU and FleS '
           r'run the Triton row in this process')


def _no_image(*args, **kwargs):
    raise RuntimeError(NO_IMAGE)


@pytest.fixture
def gpu12(monkeypatch):
    """The CUDA kernels loaded (a stand-in library: nothing is built or
    loaded), calls read as made on ``cuda:0`` of capability 12.0; yields
    the warnings :func:`cuda_build.unserved` gives."""
    monkeypatch.setattr(cuda_build, '_loaded', {})  # this test's own
    monkeypatch.setattr(cuda_build, 'build_library', lambda: 'stand-in.so')
    monkeypatch.setattr(torch.ops, 'load_library', lambda path: None)
    monkeypatch.setattr(
        torch.cuda, 'get_device_capability', lambda device=None: (12, 0))
    real = cuda_build.unserved
    monkeypatch.setattr(cuda_build, 'unserved',
                        lambda e, device: real(e, torch.device('cuda', 0)))
    with backends.using(cuda_kernels=True), warnings.catch_warnings(
            record=True) as caught:
        warnings.simplefilter('always')
        assert cuda_build.library() == 'stand-in.so'
        yield caught
        assert cuda_build.library() is None  # off for the process


def _one_warning(caught):
    words = [
        str(w.message) for w in caught if 'CUDA kernels' in str(w.message)
    ]
    assert len(words) == 1, words
    assert re.fullmatch(WARNING, words[0]), words[0]


def test_unserved_switches_the_kernels_off_once(gpu12):
    heard = []
    backends.on_change(lambda: heard.append(1))
    error = RuntimeError(NO_IMAGE)
    assert cuda_build.unserved(error, torch.device('cuda', 0))
    assert heard  # the ops' routes were dropped
    heard.clear()
    assert cuda_build.unserved(error, torch.device('cuda', 0))
    assert not heard
    _one_warning(gpu12)
    for words in ('a PTX JIT compilation failed', 'the provided PTX was '
                  'compiled with an unsupported toolchain.',
                  'PTX JIT compiler library not found'):
        assert cuda_build.unserved(
            RuntimeError(f'CUDA error: {words}'), torch.device('cuda', 0))


def test_other_errors_are_not_unserved_gpus():
    unserved = cuda_build.unserved
    cuda0 = torch.device('cuda', 0)
    assert not unserved(RuntimeError('CUDA error: out of memory'), cuda0)
    assert not unserved(ValueError(NO_IMAGE), cuda0)
    assert not unserved(RuntimeError(NO_IMAGE), torch.device('cpu'))


def _apa_inputs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, generator=g)
    kappa = (torch.rand(3, generator=g) + 0.5).requires_grad_()
    lam = (torch.rand(3, generator=g) + 0.5).requires_grad_()
    return x, kappa, lam


def _check_apa(op, reference):
    """``op`` on (N, C, L) inputs with per-channel parameters: the paper's
    formula's values."""
    x, kappa, lam = _apa_inputs()
    want = reference(x, kappa.view(-1, 1), lam.view(-1, 1))
    torch.testing.assert_close(op(x, kappa, lam), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('op, reference', [(apa, apa_reference),
                                           (aglu, aglu_reference)])
def test_the_operators_entry_reruns_the_call(gpu12, op, reference):
    OpRowCache.entries = {'apa': _no_image, 'aglu': _no_image}
    _check_apa(op, reference)
    _one_warning(gpu12)


@pytest.mark.skipif(
    cpu_build.extension() is None,
    reason='no C++ compiler: the table has no op row')
def test_the_tables_op_row_reruns_the_call(gpu12, monkeypatch):
    real = cpu.operator_entries
    unserved = {'apa': _no_image, 'aglu': _no_image}
    monkeypatch.setattr(
        cpu, 'operator_entries', lambda: real()
        if cuda_build.library() is None else unserved)
    OpRowCache.drop()
    _check_apa(apa, apa_reference)
    _one_warning(gpu12)
    monkeypatch.setattr(cpu, 'operator_entries',
                        lambda: {'apa': lambda *a: _oom()})
    OpRowCache.drop()
    with pytest.raises(RuntimeError, match='out of memory'):
        apa(*_apa_inputs())


def _oom():
    raise RuntimeError('CUDA error: out of memory')


@pytest.mark.skipif(
    cpu_build.extension() is None,
    reason='no C++ compiler: the table has no op row')
def test_the_rebuilt_backward_reruns_on_the_rebuilt_input(gpu12, monkeypatch):
    monkeypatch.setattr(cpu, 'backward_rebuilt', _no_image)
    x, kappa, lam = _apa_inputs()
    src, shift = x.unsqueeze(-1), torch.randn(1, 3, 1, 1)
    grad_out = torch.randn_like(src)
    got = rebuilt_backward(
        'apa', grad_out, kappa, lam, 1e-4, 1, src, shift=shift)
    z = (src + shift).requires_grad_()
    y = apa_reference(z, *[p.view(-1, 1, 1) for p in (kappa, lam)])
    want = torch.autograd.grad(y, (z, kappa, lam), grad_out)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    _one_warning(gpu12)


def _fles_inputs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 8, 8, generator=g)
    params = [
        torch.randn(2, 4, generator=g),
        torch.randn(2, generator=g),
        torch.randn(2, 4, 2, generator=g),
        torch.randn(2, 4, generator=g)
    ]
    return x, params, window_geometry(8, 8, (3, 3))


def test_fles_reruns_the_call(gpu12, monkeypatch):
    x, params, geom = _fles_inputs()
    real = fused.implementation
    first = iter([Plan('operator', operator=_no_image)])
    monkeypatch.setattr(fused, 'implementation',
                        lambda *a: next(first, None) or real(*a))
    kwargs = dict(scale_fn=fles_shared_mlp_scales)
    torch.testing.assert_close(
        fles_fused(x, geom, params, **kwargs),
        fles_reference(x, geom, params, **kwargs),
        rtol=1e-5,
        atol=1e-5)
    _one_warning(gpu12)


def test_fles_layers_cache_declines_the_call(gpu12):
    x, params, geom = _fles_inputs()
    windows = OperatorWindows()
    windows.windows[x.shape] = geom.window
    OperatorWindows.entry = _no_image
    assert windows(x, params, 'sigmoid', 'positive') is None
    assert OperatorWindows.entry is None  # dropped with the routes
    _one_warning(gpu12)
