"""The FleS torch operator ``mmact::fles`` (``csrc/fles_op.cpp``): autograd
rules, errors, threads, its Python entry against the dispatch, and the
refusals of the pass operators (their values against float64:
test_fles/test_cpu.py)."""
import os
import subprocess
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mmact.ops.fles import (K_HO_MIN, fles_fused, fles_mlp_scales,
                            fles_reference, fles_shared_mlp_scales,
                            window_geometry)
from mmact.ops.fles.cpu import LOOP_MACS, operator_entry
from mmact.ops.fles.dispatch import implementation

pytestmark = pytest.mark.skipif(
    operator_entry() is None,
    reason='no C++ compiler or ninja: the CPU extension is not built')


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
    return torch.ops.mmact.fles(x, *params, *window, gate, mode, K_HO_MIN)


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


class _Subclass(torch.Tensor):
    """A tensor subclass: the entry and the dispatch leave it to torch."""


class _PassThrough(TorchDispatchMode):
    """A dispatch mode that runs every op as it is (as a FLOP counter)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _entry_cases():
    """``{name: (x, params, window, gate, mode)}``: calls on both sides of
    each condition of the operator's row of the dispatch table."""
    x, params = _inputs()
    _, shared = _inputs(shared=True)
    # 2 images x 4 windows x C=4 x hidden x 2: LOOP_MACS at hidden=1024
    hidden = LOOP_MACS // (2 * 4 * 4 * 2)
    _, at_limit = _inputs(hidden=hidden)
    _, over_limit = _inputs(hidden=hidden + 1)
    xt = x.transpose(2, 3).contiguous().transpose(2, 3)
    float64_weight = [*params[:2], params[2].double(), params[3]]
    subclass_bias = [params[0], params[1].as_subclass(_Subclass), *params[2:]]

    def case(x=x,
             params=params,
             window=(3, 4),
             gate='sigmoid',
             mode='positive'):
        return x, params, window, gate, mode

    changes = (
        ('plain', {}),
        ('shared trunk', dict(params=shared)),
        ('global window', dict(window=None)),
        ('erf, mean', dict(gate='erf', mode='mean')),
        ('x requires grad', dict(x=x.clone().requires_grad_())),
        ('parameters', dict(params=[torch.nn.Parameter(p) for p in params])),
        ('MLP at LOOP_MACS', dict(params=at_limit)),
        ('MLP over LOOP_MACS', dict(params=over_limit)),
        ('non-contiguous x', dict(x=xt)),
        ('float64 x', dict(x=x.double())),
        ('float64 fc2_weight', dict(params=float64_weight)),
        ('subclass x', dict(x=x.as_subclass(_Subclass))),
        ('subclass fc1_bias', dict(params=subclass_bias)),
        ('indicator softplus', dict(mode='softplus')),
        ('indicator quasi_linear', dict(mode='quasi_linear')),
        ('unknown gate', dict(gate='relu')),
        ('non-str gate', dict(gate=1)),
    )
    return {name: case(**change) for name, change in changes}


def test_python_entry_agrees_with_the_dispatch():
    """The C++ entry takes exactly the calls fles_fused's dispatch sends to
    the operator (its result is then the operator's) and declines the
    others with None: over a grid of calls, and under a dispatch mode."""
    entry = operator_entry()
    taken = []
    for name, (x, params, window, gate, mode) in _entry_cases().items():
        geom = window_geometry(6, 7, window)
        scale_fn = (
            fles_shared_mlp_scales
            if params[0].dim() == 2 else fles_mlp_scales)
        plan = implementation(x, geom, gate, mode, scale_fn, params)
        y = entry(x, *params, *geom.window, gate, mode, K_HO_MIN)
        assert (y is not None) == (plan.name == 'operator'), (name, plan.name)
        if y is not None:
            taken.append(name)
            torch.testing.assert_close(
                y, _call(x, params, geom.window, gate, mode))
    # both sides of every condition were seen
    assert taken == [
        'plain', 'shared trunk', 'global window', 'erf, mean',
        'x requires grad', 'parameters', 'MLP at LOOP_MACS'
    ]
    x, params, window, gate, mode = _entry_cases()['plain']
    geom = window_geometry(6, 7, window)
    with _PassThrough():
        assert implementation(x, geom, gate, mode, fles_mlp_scales,
                              params).name == 'composite'
        assert entry(x, *params, *window, gate, mode, K_HO_MIN) is None


def test_python_entry_declines_other_arguments():
    """Calls the dispatch never makes (a bool or float window, an int
    k_ho_min, an argument missing), fake tensors and forward-mode tangents
    are declined with None, not run or refused."""
    entry = operator_entry()
    x, params = _inputs()
    args = (x, *params, 3, 4, 'sigmoid', 'positive', K_HO_MIN)
    assert entry(*args) is not None and entry(*args[:-1]) is None
    # kh, kw, mode and k_ho_min of other types
    for i, value in ((5, True), (6, False), (5, 3.0), (8, None), (9, 0)):
        assert entry(*args[:i], value, *args[i + 1:]) is None, (i, value)
    # the layers' windows come from window_geometry, which refuses bools
    with pytest.raises(TypeError, match='pair of ints'):
        window_geometry(6, 7, (True, 4))
    with torch._subclasses.FakeTensorMode():
        fake = torch.randn(2, 4, 6, 7)
        assert entry(fake, *params, 3, 4, 'sigmoid', 'positive',
                     K_HO_MIN) is None
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        dual = fwAD.make_dual(x, torch.ones_like(x))
        assert entry(dual, *params, 3, 4, 'sigmoid', 'positive',
                     K_HO_MIN) is None
        geom = window_geometry(6, 7, (3, 4))
        assert implementation(dual, geom, 'sigmoid', 'positive',
                              fles_mlp_scales, params).name == 'composite'


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


def _pass_calls():
    """``{name: call(x, kh, kw)}``: each pass operator on a ``(planes, H,
    W)`` map with well-formed other arguments for a (3, 4) window grid."""
    ops = torch.ops.mmact
    kv = torch.rand(8, 2, 2) + 0.5
    go = torch.randn(8, 6, 7)
    return {
        'stats':
        lambda x, kh, kw: ops.fles_stats(x, kh, kw, 'positive'),
        'apply':
        lambda x, kh, kw: ops.fles_apply(x, kv, kv, kh, kw, 'sigmoid'),
        'gate_backward':
        lambda x, kh, kw: ops.fles_gate_backward(x, go, kv, kv, kh, kw, 'erf'),
        'indicator_backward':
        lambda x, kh, kw: ops.fles_indicator_backward(
            torch.zeros(x.shape), x, kv, kv, kh, kw, 'mean'),
    }


@pytest.mark.parametrize(
    'name', ['stats', 'apply', 'gate_backward', 'indicator_backward'])
def test_passes_refuse_a_map_they_cannot_read(name):
    """The pass operators take a contiguous float32 (planes, H, W) CPU map
    and a window that fits it; anything else is an error naming what was
    given (not a read out of bounds)."""
    call = _pass_calls()[name]
    x = torch.randn(8, 6, 7)
    call(x, 3, 4)  # well-formed
    for bad, kh, kw, got in (
        (x.view(2, 4, 6, 7), 3, 4, r'Float \[2, 4, 6, 7\]'),
        (x.double(), 3, 4, r'Double \[8, 6, 7\]'),
        (x.half(), 3, 4, r'Half \[8, 6, 7\]'),
        (x.transpose(1, 2), 3, 4, r'Float \[8, 7, 6\]'),  # not contiguous
        (x, 7, 4, r'window \(7, 4\)'),
        (x, 3, 8, r'window \(3, 8\)'),
        (x, 0, 4, r'window \(0, 4\)'),
    ):
        with pytest.raises(
                RuntimeError,
                match=r'passes take a contiguous float32 \(planes, H, W\) '
                r'CPU map and a window that fits it \(got .*' + got):
            call(bad, kh, kw)


def test_passes_refuse_window_values_they_cannot_read():
    """Per-window inputs must hold a float32 value per window of every
    plane, grad_out and grad_x x's shape; gate and mode names are the
    kernels'. The errors name the argument."""
    ops = torch.ops.mmact
    x = torch.randn(8, 6, 7)  # (3, 4) windows: a (2, 2) grid
    kv = torch.rand(8, 2, 2) + 0.5
    go = torch.randn(8, 6, 7)

    def apply(k_ve, k_ho):
        return ops.fles_apply(x, k_ve, k_ho, 3, 4, 'sigmoid')

    def gate_backward(k_ve, k_ho):
        return ops.fles_gate_backward(x, go, k_ve, k_ho, 3, 4, 'erf')

    def indicator_backward(g_ind, div):
        grad_x = torch.zeros(8, 6, 7)
        ops.fles_indicator_backward(grad_x, x, g_ind, div, 3, 4, 'positive')
        return grad_x

    for name, call, args in (
        ('k_ve', apply, (kv[:4], kv)),
        ('k_ho', apply, (kv, kv.double())),
        ('k_ve', gate_backward, (kv[:, :1], kv)),
        ('k_ho', gate_backward, (kv, kv.flatten()[1:])),
        ('g_ind', indicator_backward, (kv[:2], kv)),
        ('div', indicator_backward, (kv, kv.double())),
    ):
        with pytest.raises(
                RuntimeError,
                match=f'passes: {name} must hold float32 CPU values for the '
                r'\(8, 2, 2\) windows'):
            call(*args)
    # as many values in another shape, or a float64 g_ind: taken
    torch.testing.assert_close(apply(kv.view(2, 4, 4), kv), apply(kv, kv))
    torch.testing.assert_close(
        indicator_backward(kv.double(), kv), indicator_backward(kv, kv))
    with pytest.raises(RuntimeError, match="grad_out of x's shape"):
        ops.fles_gate_backward(x, go[:4], kv, kv, 3, 4, 'sigmoid')
    with pytest.raises(RuntimeError, match="grad_out of x's shape"):
        ops.fles_gate_backward(x, go.double(), kv, kv, 3, 4, 'sigmoid')
    for grad_x in (torch.zeros(8, 6, 6), torch.zeros(8, 6, 7).double(),
                   torch.zeros(8, 7, 6).transpose(1, 2)):
        with pytest.raises(RuntimeError, match='contiguous float32 grad_x'):
            ops.fles_indicator_backward(grad_x, x, kv, kv, 3, 4, 'mean')
    with pytest.raises(ValueError, match="unknown gate 'relu'"):
        ops.fles_apply(x, kv, kv, 3, 4, 'relu')
    with pytest.raises(ValueError, match="unknown gate 'gelu'"):
        ops.fles_gate_backward(x, go, kv, kv, 3, 4, 'gelu')
    with pytest.raises(ValueError, match="mode 'softplus'.*positive or mean"):
        ops.fles_stats(x, 3, 4, 'softplus')
    with pytest.raises(ValueError, match="mode 'max'.*positive or mean"):
        ops.fles_indicator_backward(
            torch.zeros(8, 6, 7), x, kv, kv, 3, 4, 'max')


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
@pytest.mark.parametrize('c,hidden,window,plan', [(6, 3, (3, 4), 'operator'),
                                                  (64, 32, (2, 2), 'passes')])
def test_small_and_large_mlps_match_float64(shared, c, hidden, window, plan):
    """fles_fused runs the MLP as the operator's loops up to LOOP_MACS
    multiply-adds (first case: 2 x 4 windows x 6 x 3 x 2) and larger ones
    in torch around the C passes (second: 2 x 12 windows x 64 x 32 x 2);
    both against the float64 composite."""
    x, params = _inputs(shared, seed=7, c=c, hidden=hidden)
    params = [p * 0.3 for p in params]
    geom = window_geometry(6, 7, window)
    scale_fn = fles_shared_mlp_scales if shared else fles_mlp_scales
    assert implementation(x, geom, 'erf', 'positive', scale_fn,
                          params).name == plan
    leaves = [t.clone().requires_grad_() for t in [x, *params]]
    y = fles_fused(leaves[0], geom, leaves[1:], gate='erf', scale_fn=scale_fn)
    node = 'mmact::fles_backward' if plan == 'operator' else 'FleSFunction'
    assert node in y.grad_fn.name()
    go = torch.randn_like(y)
    got = torch.autograd.grad(y, leaves, go)
    ref = [t.detach().double().requires_grad_() for t in leaves]
    want_y = fles_reference(
        ref[0], geom, ref[1:], gate='erf', scale_fn=scale_fn)
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
from mmact.ops.fles import K_HO_MIN, window_geometry
from mmact.ops.fles.cpu import operator_entry, stats
operator = operator_entry()
c, w = 2, 1 << 24
x = torch.randn(1, c, 1, w)
params = [torch.randn(2, c), torch.zeros(2), torch.randn(2, c, 2),
          torch.zeros(2, c)]
geom = window_geometry(1, w, (1, w // 2))
# the pass operator looked up before the cap
stats(torch.randn(c, 1, 64), window_geometry(1, 64, (1, 32)), 'positive')
with open('/proc/self/status') as f:
    held = next(int(s.split()[1]) for s in f if s.startswith('VmSize')) << 10
resource.setrlimit(resource.RLIMIT_AS, (held + (96 << 20), ) * 2)
for call in (lambda: operator(x, *params, 1, w // 2, 'sigmoid', 'positive',
                              K_HO_MIN),
             lambda: stats(x.view(c, 1, w), geom, 'positive')):
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
    that names the pass, in the operator and the pass operator alike."""
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
        'row buffers'
    ] * 2
