"""Which implementation runs APA / AGLU (mmact.ops.apa.dispatch): the C++
entry's accept rule against the table, each row of the table, the calls
that record no autograd node, and the refusals' messages on every path."""
import contextlib

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch.utils._python_dispatch import TorchDispatchMode

from mmact.models.activations import AGLU, APA
from mmact.ops import aglu, apa, backends
from mmact.ops.apa import cpu, dispatch
from mmact.ops.apa.dispatch import implementation
from mmact.ops.cpu_build import extension
from mmact.compat import triton_interpreter_available

OPS = {'apa': apa, 'aglu': aglu}
MODULES = {'apa': APA, 'aglu': AGLU}
NO_EXTENSION = ('no C++ compiler or ninja, or the C kernels are switched off: '
                'the torch path only')
needs_extension = pytest.mark.skipif(extension() is None, reason=NO_EXTENSION)


class _Subclass(torch.Tensor):
    """A tensor subclass that overrides nothing."""


class _SubParameter(torch.nn.Parameter):
    """A subclass of ``nn.Parameter`` (not the plain one)."""


class _PassThrough(TorchDispatchMode):
    """A Python dispatch mode that runs every op unchanged."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 4, 6, generator=g)
    k = torch.rand(4, generator=g) + 0.5
    lam = torch.rand(1, generator=g) + 0.5
    return x, k, lam


def _calls():
    """``(what, x, kappa, lambda_, lambda_min, channel_dim)`` over the grid
    of inputs, parameters and arguments."""
    x, k, lam = _inputs()
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        yield f'x {dtype}', x.to(dtype), k, lam, 1e-4, 1
    yield 'int x', x.int(), k, lam, 1e-4, 1
    yield 'x strided view', x.repeat(1, 1, 2)[:, :, ::3], k, lam, 1e-4, 1
    yield 'x transposed', x.transpose(0, 2).contiguous().transpose(
        0, 2), k, lam, 1e-4, 1
    yield ('x channels_last',
           x.reshape(2, 4, 2, 3).contiguous(memory_format=torch.channels_last),
           k, lam, 1e-4, 1)
    yield 'x requires grad', x.clone().requires_grad_(), k, lam, 1e-4, 1
    yield 'x empty', x[:0], k, lam, 1e-4, 1
    yield 'x sparse', x.to_sparse(), k, lam, 1e-4, 1
    yield 'x meta', x.to('meta'), k, lam, 1e-4, 1
    yield 'x subclass', x.as_subclass(_Subclass), k, lam, 1e-4, 1
    yield 'x Parameter', torch.nn.Parameter(x), k, lam, 1e-4, 1
    yield 'kappa Parameter', x, torch.nn.Parameter(k), lam, 1e-4, 1
    yield ('lambda Parameter subclass', x, k, _SubParameter(lam), 1e-4, 1)
    yield 'kappa subclass', x, k.as_subclass(_Subclass), lam, 1e-4, 1
    yield 'lambda subclass', x, k, lam.as_subclass(_Subclass), 1e-4, 1
    yield 'kappa float64', x, k.double(), lam, 1e-4, 1
    yield 'lambda float64', x, k, lam.double(), 1e-4, 1
    yield 'kappa float16', x, k.half(), lam, 1e-4, 1
    yield 'lambda meta', x, k, lam.to('meta'), 1e-4, 1
    for lambda_min in (np.float64(1e-4), np.float32(1e-4), 1, True, 0.0, -1e-4,
                       float('nan'), '1e-4'):
        yield f'lambda_min {lambda_min!r}', x, k, lam, lambda_min, 1
    for channel_dim in (-2, True, np.int64(1), 1.0):
        yield f'channel_dim {channel_dim!r}', x, k, lam, 1e-4, channel_dim


def _args_taken(lambda_min, channel_dim) -> bool:
    """The entry's rule for the plain arguments: a float ``lambda_min`` > 0
    and an int ``channel_dim`` that is not a bool."""
    return (isinstance(lambda_min, float) and lambda_min > 0
            and isinstance(channel_dim, int)
            and not isinstance(channel_dim, bool))


def _dual(t):
    return fwAD.make_dual(t, torch.ones_like(t))


# (name, context, which argument gets a tangent: None, 'x' or 'kappa')
CONTEXTS = [
    ('plain', contextlib.nullcontext, None),
    ('no_grad', torch.no_grad, None),
    ('inference_mode', torch.inference_mode, None),
    ('dispatch mode', _PassThrough, None),
    ('FakeTensorMode', torch._subclasses.FakeTensorMode, None),
    ('forward AD, dual x', fwAD.dual_level, 'x'),
    ('forward AD, dual kappa', fwAD.dual_level, 'kappa'),
    ('forward AD, no tangent', fwAD.dual_level, None),
]


@needs_extension
@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('context,enter,tangent', CONTEXTS)
def test_entry_accepts_exactly_the_op_row(name, context, enter, tangent):
    """The C++ entry takes a call (returns a tensor) exactly when the table
    says ``op`` and the plain arguments are those the entry reads natively
    (a float ``lambda_min`` > 0, an int ``channel_dim``); it declines
    (None) every other call, which :func:`mmact.ops.apa.dispatch.run`
    then decides."""
    entry = cpu.operator_entries()[name]
    taken = declined = 0
    for what, x, k, lam, lambda_min, channel_dim in _calls():
        outside = implementation(x, k, lam)
        dense = (
            x.is_floating_point() and x.layout == torch.strided
            and not x.is_meta)
        if tangent is not None and not dense:
            continue  # make_dual takes dense floating-point tensors
        with enter():
            if tangent == 'x':
                x = _dual(x)
            elif tangent == 'kappa':
                k = _dual(k)
            impl = implementation(x, k, lam)
            y = entry(x, k, lam, lambda_min, channel_dim)
            want = impl == 'op' and _args_taken(lambda_min, channel_dim)
            if context == 'forward AD, no tangent':
                # The one asymmetry: with a forward-AD level open the table
                # says 'composite' (it asks the level counter, not each
                # tensor), while the entry asks the inputs and takes a call
                # in which none carries a tangent. The results agree:
                # nothing has a tangent to carry.
                assert impl == 'composite', what
                want = outside == 'op' and _args_taken(lambda_min, channel_dim)
                if y is not None:
                    torch.testing.assert_close(
                        y,
                        dispatch.run(name, x, k, lam, float(lambda_min),
                                     int(channel_dim)),
                        msg=what)
            assert (y is not None) == want, (context, what, impl)
        taken += want
        declined += not want
    # the grid reaches both answers where the entry may take calls at all
    may_take = context in ('plain', 'no_grad', 'inference_mode',
                           'forward AD, no tangent')
    assert declined > 0 and (taken > 0) == may_take


@needs_extension
@pytest.mark.parametrize('name', ['apa', 'aglu'])
def test_entry_declines_jit_tracing(name):
    """The JIT tracer records ops: the table says ``composite`` and the
    entry declines."""
    entry = cpu.operator_entries()[name]
    _, k, lam = _inputs()
    seen = []

    def probe(t):
        seen.append((implementation(t, k, lam), entry(t, k, lam, 1e-4, 1)))
        return t * 2

    torch.jit.trace(probe, _inputs()[0], check_trace=False)
    assert seen == [('composite', None)]


def _node(y):
    """The name of the autograd node ``y`` hangs off (None: no node)."""
    return None if y.grad_fn is None else y.grad_fn.name()


@pytest.mark.parametrize('name', ['apa', 'aglu'])
def test_each_row_is_reached(name, monkeypatch):
    """Each row of the table, and the node each records: ``op`` its C++
    node, ``torch`` its ``Function``, ``composite`` standard ops (forward
    AD, ``torch.compile``)."""
    x, k, lam = _inputs()
    leaves = [t.clone().requires_grad_() for t in (x, k, lam)]
    with backends.using(cpu_kernels=False):
        assert implementation(x, k, lam) == 'torch'
        assert _node(OPS[name](*leaves)) == 'FusedFunctionBackward'
    assert implementation(x.double(), k.double(), lam.double()) == 'torch'
    y = OPS[name](*(t.double() for t in leaves))
    assert _node(y) == 'FusedFunctionBackward'
    if extension() is not None:
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            assert implementation(x.to(dtype), k, lam) == 'op'
            y = OPS[name](leaves[0].to(dtype), *leaves[1:])
            assert _node(y) == f'mmact::{name}_backward'
    assert implementation(x, k.double(), lam) == 'torch'
    assert implementation(x.double(), k, lam) == 'torch'
    with fwAD.dual_level():
        assert implementation(x, k, lam) == 'composite'
        y = OPS[name](_dual(leaves[0]), *leaves[1:])
        assert fwAD.unpack_dual(y).tangent is not None
        assert _node(y) not in (None, 'FusedFunctionBackward',
                                f'mmact::{name}_backward')
    seen = []

    def probe(t):
        seen.append(implementation(t, k, lam))
        return OPS[name](t, k, lam)

    torch._dynamo.reset()
    compiled = torch.compile(probe, backend='eager', fullgraph=True)
    torch.testing.assert_close(compiled(x), OPS[name](x, k, lam))
    assert seen == ['composite']
    if triton_interpreter_available():
        monkeypatch.setenv('TRITON_INTERPRET', '1')  # so 'all' is accepted
        with backends.using(triton='all'):
            assert implementation(x, k, lam) == 'triton'
            assert implementation(x.double(), k, lam) == 'torch'


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('path', ['op', 'torch'])
def test_no_node_where_no_gradient_is_wanted(name, path):
    """eval under ``no_grad``, or no input that requires grad: no autograd
    node, on the ``op`` and ``torch`` rows; the same values as a call that
    records one."""
    if path == 'op' and extension() is None:
        pytest.skip(NO_EXTENSION)
    x, k, lam = _inputs(1)
    module = MODULES[name](num_parameters=4).eval()
    with backends.using(cpu_kernels=path == 'op'):
        assert implementation(x, k, lam) == path
        want = OPS[name](x.clone().requires_grad_(), k, lam)
        assert want.grad_fn is not None
        assert OPS[name](x, k, lam).grad_fn is None
        with torch.no_grad():
            y = OPS[name](*(t.clone().requires_grad_() for t in (x, k, lam)))
            assert y.grad_fn is None and not y.requires_grad
            assert module(x.clone().requires_grad_()).grad_fn is None
        with torch.inference_mode():
            assert OPS[name](x, k, lam).grad_fn is None
        assert module(x).grad_fn is not None  # its parameters want grad
    torch.testing.assert_close(y, want.detach())


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('path', ['op', 'torch'])
def test_refusals_name_the_setting(name, path):
    """Every refusal says which argument is wrong, on the ``op`` path (its
    C++ entry in use) and on the ``torch`` path."""
    if path == 'op' and extension() is None:
        pytest.skip(NO_EXTENSION)
    op = OPS[name]
    x = torch.randn(2, 8, 3, 3)
    one = torch.ones(1)
    with backends.using(cpu_kernels=path == 'op'):
        op(x, one, one)  # a call the table sends to `path`
        assert (dispatch.OpRowCache.entries is not None) == (path == 'op')
        for grad in (False, True):
            xg = x.clone().requires_grad_(grad)
            with pytest.raises(
                    ValueError,
                    match=r'kappa has 3 values \(num_parameters=3\) but the '
                    r'input has 8 channels at dim 1'):
                op(xg, torch.ones(3), one)
            with pytest.raises(
                    ValueError,
                    match=r'lambda has 5 values \(num_parameters=5\).*use '
                    r'num_parameters=1 or 8'):
                op(xg, torch.ones(8), torch.ones(5))
            with pytest.raises(
                    ValueError,
                    match='channel_dim=4 is out of range for an '
                    'input with 4 dims'):
                op(xg, torch.ones(8), one, channel_dim=4)
        for channel_dim in (True, 1.0, '1'):
            with pytest.raises(
                    TypeError,
                    match=f'{name}: channel_dim must be an int axis, got '
                    f'{channel_dim!r}'):
                op(x, one, one, channel_dim=channel_dim)
        for lambda_min in (0.0, -1e-4, 0, float('nan')):
            with pytest.raises(
                    ValueError, match=f'{name}: lambda_min must be > 0, got'):
                op(x, one, one, lambda_min=lambda_min)
        with pytest.raises(
                TypeError,
                match=f'{name}: input must be a torch.Tensor, got list'):
            op(x.tolist(), one, one)
        for bad in (x.int(), x > 0):
            with pytest.raises(
                    TypeError,
                    match=f'{name}: input must be a floating-point tensor '
                    r'\(float16, bfloat16, float32 or float64\), got dtype'):
                op(bad, one, one)


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('path', ['op', 'torch'])
def test_second_derivative_is_refused(name, path):
    """``create_graph=True`` gives the first derivatives; a second one
    through the fused / written-out backward raises, naming the op."""
    if path == 'op' and extension() is None:
        pytest.skip(NO_EXTENSION)
    x, k, lam = (t.requires_grad_() for t in _inputs(2))
    with backends.using(cpu_kernels=path == 'op'):
        y = OPS[name](x, k, lam)
        assert implementation(x, k, lam) == path
        grads = torch.autograd.grad(y.sum(), (x, k, lam), create_graph=True)
    assert all(g.requires_grad for g in grads)
    for g in grads:
        with pytest.raises(
                RuntimeError,
                match=f'mmact.ops.{name} cannot be differentiated twice'):
            g.square().sum().backward()
