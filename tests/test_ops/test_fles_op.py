"""The FleS torch operator ``mmact::fles`` (``csrc/fles_op.cpp``): autograd
rules, errors and threads (its values against float64:
test_fles_cpu_kernel.py)."""
import os
import subprocess
import sys

import pytest
import torch

from mmact.ops.fles import (fles_mlp_scales, fles_reference,
                            fles_shared_mlp_scales, window_geometry)
from mmact.ops.fles.cpu_kernel import get_fles_operator

pytestmark = pytest.mark.skipif(
    get_fles_operator() is None,
    reason='no C++ compiler or ninja: the operator is not built')


def _inputs(shared=False, seed=0, c=4, hidden=2):
    g = torch.Generator().manual_seed(seed)
    trunk = (hidden, ) if shared else (2, hidden)
    x = torch.randn(2, c, 6, 7, generator=g)
    params = [
        torch.randn(*trunk, c, generator=g),
        torch.randn(*trunk, generator=g),
        torch.randn(2, c, hidden, generator=g),
        torch.randn(2, c, generator=g)
    ]
    return x, params


def _call(x, params, window=(3, 4), gate='sigmoid', mode='positive'):
    return torch.ops.mmact.fles(x, *params, *window, gate, mode)


def test_one_autograd_node_and_none_without_grad():
    x, params = _inputs()
    x.requires_grad_()
    y = _call(x, params)
    assert y.grad_fn.name() == 'mmact::fles_backward'
    assert [e[0] for e in y.grad_fn.next_functions][1:] == [None] * 4
    with torch.no_grad():
        assert _call(x, params).grad_fn is None
    assert _call(x.detach(), params).grad_fn is None


@pytest.mark.parametrize('needs', [(0, ), (1, 3), (0, 2, 4)])
def test_partial_gradients(needs):
    """Only the inputs that require grad get one, and those equal the
    composite's."""
    x, params = _inputs(shared=True, seed=1)
    leaves = [x, *params]
    for i in needs:
        leaves[i].requires_grad_()
    y = _call(leaves[0], leaves[1:])
    go = torch.randn_like(y)
    got = torch.autograd.grad(y, [leaves[i] for i in needs], go)
    ref = [t.detach().double().requires_grad_() for t in leaves]
    want_y = fles_reference(
        ref[0],
        window_geometry(6, 7, (3, 4)),
        ref[1:],
        scale_fn=fles_shared_mlp_scales)
    want = torch.autograd.grad(want_y, [ref[i] for i in needs], go.double())
    torch.testing.assert_close(
        y.detach().double(), want_y.detach(), rtol=1e-4, atol=1e-5)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-4)


def test_non_contiguous_input_and_saved_version_check():
    x, params = _inputs(seed=2)
    xt = x.transpose(2, 3).contiguous().transpose(2, 3).requires_grad_()
    xc = x.clone().requires_grad_()
    go = torch.randn_like(x)
    a = torch.autograd.grad(_call(xt, params), xt, go)[0]
    b = torch.autograd.grad(_call(xc, params), xc, go)[0]
    torch.testing.assert_close(a, b)
    # an in-place change of a saved input after the forward is detected
    y = _call(x.requires_grad_(), params)
    params[2].add_(1.0)
    with pytest.raises(RuntimeError, match='modified by an inplace'):
        y.sum().backward()


def test_backward_twice_needs_retain_graph():
    x, params = _inputs(seed=3)
    x.requires_grad_()
    y = _call(x, params)
    y.sum().backward(retain_graph=True)
    first = x.grad.clone()
    y.sum().backward()
    torch.testing.assert_close(x.grad, 2 * first)
    y = _call(x, params)
    y.sum().backward()
    with pytest.raises(RuntimeError, match='second time'):
        y.sum().backward()


def test_second_derivative_raises():
    x, params = _inputs(seed=4)
    x.requires_grad_()
    (gx, ) = torch.autograd.grad(_call(x, params).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match='cannot be differentiated twice'):
        gx.sum().backward()


def test_forward_mode_is_refused():
    import torch.autograd.forward_ad as fwAD
    x, params = _inputs(seed=5)
    with fwAD.dual_level():
        dual = fwAD.make_dual(x, torch.ones_like(x))
        with pytest.raises(RuntimeError, match='no forward-mode derivative'):
            _call(dual, params)


def test_python_entry_takes_what_dispatch_sends():
    """The Python entry takes plain contiguous float32 CPU calls (the same
    result as the operator) and declines the others (None), which
    mmact.ops.fles.fused decides."""
    from torch.testing._internal.logging_tensor import LoggingTensor
    entry = get_fles_operator()
    x, params = _inputs()
    torch.testing.assert_close(
        entry(x, *params, 3, 4, 'sigmoid', 'positive'), _call(x, params))
    xt = x.transpose(2, 3).contiguous().transpose(2, 3)
    for args in ((x, *params, 3, 4, 'sigmoid'), (x, *params, True, 4,
                                                 'sigmoid', 'positive'),
                 (x, *params, 3.0, 4, 'sigmoid', 'positive'),
                 (x.double(), *params, 3, 4, 'sigmoid', 'positive'),
                 (x, params[0].double(), *params[1:], 3, 4, 'sigmoid',
                  'positive'), (xt, *params, 3, 4, 'sigmoid', 'positive'),
                 (LoggingTensor(x), *params, 3, 4, 'sigmoid', 'positive')):
        assert entry(*args) is None
    with torch._subclasses.FakeTensorMode():
        fake = torch.randn(2, 4, 6, 7)
        assert entry(fake, *params, 3, 4, 'sigmoid', 'positive') is None
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        dual = fwAD.make_dual(x, torch.ones_like(x))
        assert entry(dual, *params, 3, 4, 'sigmoid', 'positive') is None


def test_errors_name_the_arguments():
    x, params = _inputs()
    with pytest.raises(ValueError, match="unknown gate 'relu'.*tanh_gate"):
        _call(x, params, gate='relu')
    with pytest.raises(ValueError, match="mode 'softplus'.*positive or mean"):
        _call(x, params, mode='softplus')
    with pytest.raises(ValueError, match=r'window \(7, 4\).*6x7'):
        _call(x, params, window=(7, 4))
    with pytest.raises(ValueError, match='do not fit C=4'):
        _call(x, [params[0][:, :, :3], *params[1:]])
    with pytest.raises(RuntimeError, match='float32 .* CPU tensor'):
        _call(x.double(), params)
    with pytest.raises(RuntimeError, match='MLP parameters must be float32'):
        _call(x, [p.double() for p in params])


def test_threads_give_the_same_result():
    x, params = _inputs(seed=6, c=8)
    x = torch.randn(4, 8, 64, 64)  # enough pixels for several threads
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _call(x, params, window=(16, 16))
        torch.set_num_threads(max(2, threads))
        many = _call(x, params, window=(16, 16))
        assert torch.get_num_threads() == max(2, threads)  # restored
    finally:
        torch.set_num_threads(threads)
    torch.testing.assert_close(one, many)


@pytest.mark.parametrize('shared', [False, True])
@pytest.mark.parametrize('c,hidden,window', [(6, 3, (3, 4)), (64, 32, (2, 2))])
def test_small_and_large_mlps_match_float64(shared, c, hidden, window):
    """The MLP runs as plain loops up to 2**16 multiply-adds per layer
    (first case: 2 x 4 windows x 6 x 3) and as matmuls above (second:
    2 x 12 windows x 64 x 32 x 2); both against the float64 composite."""
    x, params = _inputs(shared, seed=7, c=c, hidden=hidden)
    params = [p * 0.3 for p in params]
    leaves = [t.clone().requires_grad_() for t in [x, *params]]
    y = _call(leaves[0], leaves[1:], window=window, gate='erf')
    go = torch.randn_like(y)
    got = torch.autograd.grad(y, leaves, go)
    ref = [t.detach().double().requires_grad_() for t in leaves]
    want_y = fles_reference(
        ref[0],
        window_geometry(6, 7, window),
        ref[1:],
        gate='erf',
        scale_fn=fles_shared_mlp_scales if shared else fles_mlp_scales)
    want = torch.autograd.grad(want_y, ref, go.double())
    torch.testing.assert_close(
        y.detach().double(), want_y.detach(), rtol=1e-4, atol=1e-5)
    for a, b in zip(got, want):
        torch.testing.assert_close(
            a.double(), b, rtol=1e-4, atol=1e-5 * (1 + float(b.abs().max())))


def test_profiler_sees_the_stages():
    """The operator labels its stages as the Python path does (what
    benchmark_fles.py --profile reads)."""
    from torch.profiler import ProfilerActivity, profile
    x, params = _inputs(seed=8)
    x.requires_grad_()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _call(x, params).sum().backward()
    names = {e.key for e in prof.key_averages()}
    assert {
        'fles.stats', 'fles.mlp', 'fles.apply', 'fles.bwd.gate',
        'fles.bwd.mlp', 'fles.bwd.indicator'
    } <= names


@pytest.mark.parametrize('window', [(3, 4), (6, 7)])
def test_empty_batch(window):
    """No images (a mask head without RoIs): empty output and gradients,
    zero parameter gradients."""
    _, params = _inputs(seed=9)
    x = torch.randn(0, 4, 6, 7, requires_grad=True)
    params = [p.requires_grad_() for p in params]
    y = _call(x, params, window=window)
    assert y.shape == x.shape
    grads = torch.autograd.grad(y.sum(), [x, *params])
    assert grads[0].shape == x.shape
    for g, p in zip(grads[1:], params):
        assert g.shape == p.shape and not g.any()


# Address space capped just above what the process holds, then a map wide
# enough that a pass's row buffers (2 rows of W floats: 128 MiB) do not fit;
# two windows per row (one window per row needs no buffers).
_ALLOCATION_FAILURE = '''
import resource, torch
from mmact.ops.fles import window_geometry
from mmact.ops.fles.cpu_kernel import get_fles_kernel, get_fles_operator
operator, kernel = get_fles_operator(), get_fles_kernel()
c, w = 2, 1 << 24
x = torch.randn(1, c, 1, w)
params = [torch.randn(2, c), torch.zeros(2), torch.randn(2, c, 2),
          torch.zeros(2, c)]
with open('/proc/self/status') as f:
    held = next(int(s.split()[1]) for s in f if s.startswith('VmSize')) << 10
resource.setrlimit(resource.RLIMIT_AS, (held + (96 << 20), ) * 2)
for call in (lambda: operator(x, *params, 1, w // 2, 'sigmoid', 'positive'),
             lambda: kernel.stats(x.view(c, 1, w),
                                  window_geometry(1, w, (1, w // 2)),
                                  'positive')):
    try:
        call()
        print('no error')
    except (MemoryError, RuntimeError) as e:
        print(type(e).__name__, str(e).splitlines()[0])
'''


@pytest.mark.skipif(
    not sys.platform.startswith('linux'),
    reason='caps the address space through /proc and RLIMIT_AS (Linux)')
def test_allocation_failure_is_an_error_not_a_crash():
    """The C passes' row buffers come from malloc: a failure is an error
    that names the pass, on the operator and the ctypes path alike."""
    run = subprocess.run([sys.executable, '-c', _ALLOCATION_FAILURE],
                         capture_output=True,
                         text=True,
                         timeout=300,
                         env={
                             **os.environ, 'OMP_NUM_THREADS': '1'
                         })
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.splitlines() == [
        "RuntimeError mmact::fles: fles.stats: no memory for the kernel's "
        'row buffers',
        "MemoryError fles_stats: no memory for the kernel's row buffers"
    ]
