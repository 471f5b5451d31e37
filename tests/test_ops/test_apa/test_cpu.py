"""Tests of the fused CPU kernels behind mmact.ops.apa / aglu: the torch
operators ``mmact::apa`` / ``aglu`` (and their backward at a rebuilt input)
of mmact's CPU extension, against float64 torch, for every ISA build this
CPU runs."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mmact.ops import aglu, apa, backends
from mmact.ops.apa import cpu, dispatch, rebuild_input
from mmact.ops.apa.dispatch import implementation
from mmact.ops.cpu_build import (ISAS, default_cache_dir, extension,
                                 host_isa, supported_isas)

OPS = {'apa': apa, 'aglu': aglu}

pytestmark = pytest.mark.skipif(
    extension() is None,
    reason='no C++ compiler or ninja (or the C kernels are switched off): '
    'the torch path only')


def _entries():
    return cpu.operator_entries()


def _run(op, x, k, lam, channel_dim, go, node=None):
    """Output and gradients of ``op``; with ``node``, the output must hang
    off the autograd node of that name (``mmact::aglu_backward``: the C++
    operator ran)."""
    x = x.detach().clone().requires_grad_()
    k = k.detach().clone().requires_grad_()
    lam = lam.detach().clone().requires_grad_()
    y = op(x, k, lam, channel_dim=channel_dim)
    if node is not None:
        assert y.grad_fn.name() == node
    y.backward(go.to(y.dtype))
    return y.detach(), x.grad, k.grad, lam.grad


def _inputs(shape, channels, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g) * 4
    x.view(-1)[:8] = torch.tensor(
        [-1e4, 1e4, -300., 300., 0., -1e-6, 88., -88.])
    k = torch.rand(channels, generator=g) * 2 - 0.5
    lam = torch.rand(channels, generator=g) + 1e-3
    go = torch.rand(*shape, generator=g) + 0.5
    return x, k, lam, go


def test_dispatch():
    k, lam = torch.ones(1), torch.ones(1)
    for x in (torch.randn(2, 8, 16, 16), torch.randn(10), torch.randn(0)):
        assert implementation(x, k, lam) == 'op'
    x = torch.randn(10)
    assert implementation(x.double(), k, lam) == 'torch'
    assert implementation(x, k.double(), lam) == 'torch'
    assert implementation(x.half(), k, lam) == 'op'  # in float32
    with backends.using(cpu_kernels=False):
        assert implementation(x, k, lam) == 'torch'


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('shape,channels', [((0, 3), 3), ((1, ), 1),
                                            ((2, 3, 5), 3), ((1, 3), 1)])
def test_tiny_and_empty_tensors(name, shape, channels):
    """Small tensors take the C kernels too (one call each way)."""
    x, k, lam, go = _inputs((64, ), channels, seed=7)
    n = torch.Size(shape).numel()
    x, go = x[:n].reshape(shape), go[:n].reshape(shape)
    got = _run(OPS[name], x, k, lam, 1, go, f'mmact::{name}_backward')
    want = _run(OPS[name], x.double(), k.double(), lam.double(), 1,
                go.double())
    for a, b in zip(got, want):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b.float(), rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize(
    'shape,channels,channel_dim',
    [
        ((4, 8, 16, 16), 8, 1),
        ((4, 8, 16, 16), 1, 1),
        ((3, 400, 16), 16, -1),
        ((2, 6, 20, 20), 20, 3),
        # rows longer than the kernel's 256-value block, not a multiple of it
        # (a row's last block is cut short), and more channels than its
        # table of channel constants keeps on the stack (256)
        ((2, 300, 300), 300, 1),
        ((4, 3, 600), 600, -1),
    ])
def test_matches_float64(name, shape, channels, channel_dim):
    op = OPS[name]
    x, k, lam, go = _inputs(shape, channels)
    assert implementation(x, k, lam) == 'op'
    got = _run(op, x, k, lam, channel_dim, go, f'mmact::{name}_backward')
    want = _run(op, x.double(), k.double(), lam.double(), channel_dim,
                go.double())
    for a, b, what in zip(got, want, ('out', 'grad_x', 'grad_k', 'grad_l')):
        assert a.dtype == torch.float32 and torch.isfinite(a).all(), what
        # a parameter's gradient sums thousands of float32 terms that
        # cancel (the kernel before the short-row blocks, 7391612, was as
        # far off at the 300- and 600-channel shapes)
        atol = 1e-5
        if what in ('grad_k', 'grad_l'):
            atol = max(atol, 1e-4 * float(b.abs().max()))
        torch.testing.assert_close(
            a, b.float(), rtol=2e-5, atol=atol, msg=f'{name} {what}')


@pytest.mark.parametrize('name', ['apa', 'aglu'])
def test_fused_equals_torch_path(name):
    op = OPS[name]
    x, k, lam, go = _inputs((2, 16, 16, 16), 16, seed=3)
    fused = _run(op, x, k, lam, 1, go, f'mmact::{name}_backward')
    with backends.using(cpu_kernels=False):
        plain = _run(op, x, k, lam, 1, go, 'FusedFunctionBackward')
    torch.testing.assert_close(fused[0], plain[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fused[1], plain[1], rtol=1e-5, atol=1e-5)
    # parameter gradients are float32 sums of 8192 terms in another order
    torch.testing.assert_close(fused[2], plain[2], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(fused[3], plain[3], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_half_inputs_use_kernel_in_float32(dtype):
    x, k, lam, go = _inputs((2, 8, 16, 16), 1, seed=4)
    x = x.clamp(-60000, 60000).to(dtype)
    y, gx, gk, gl = _run(aglu, x, k, lam, 1, go, 'mmact::aglu_backward')
    assert y.dtype == dtype and gx.dtype == dtype
    for t in (y, gx, gk, gl):
        assert torch.isfinite(t).all()
    want = _run(aglu, x.double(), k.double(), lam.double(), 1, go.double())
    torch.testing.assert_close(y, want[0].to(dtype))


@pytest.mark.parametrize('name', ['apa', 'aglu'])
def test_operator_is_one_autograd_node(name):
    """The operator clamps and expands inside its own C++ node: the output
    hangs directly off the three leaves; no node at all without grad."""
    x, k, lam, _ = _inputs((2, 8, 4, 4), 8)
    leaves = [t.requires_grad_() for t in (x, k[:1].clone(), lam)]
    y = OPS[name](*leaves)
    assert y.grad_fn.name() == f'mmact::{name}_backward'
    nodes = [type(f).__name__ for f, _ in y.grad_fn.next_functions]
    assert nodes == ['AccumulateGrad'] * 3
    with torch.no_grad():
        assert OPS[name](*leaves).grad_fn is None


@pytest.mark.parametrize('name', ['apa', 'aglu'])
def test_operator_node_keeps_autograd_rules(name):
    """The node saves its inputs as torch's own nodes do: it is freed after
    backward, and an input changed in place after the call is refused."""
    x, k, lam, go = _inputs((2, 8, 4, 4), 8)
    x, k, lam = (t.requires_grad_() for t in (x, k, lam))
    y = _entries()[name](x, k, lam, 1e-4, 1)
    assert y.grad_fn.name() == f'mmact::{name}_backward'
    y.backward(go)
    with pytest.raises(
            RuntimeError, match='backward through the graph a '
            'second time'):
        y.backward(go)
    z = x.detach().clone().requires_grad_()
    h = z * 1.0
    y = _entries()[name](h, k, lam, 1e-4, 1)
    h.add_(1.0)
    with pytest.raises(RuntimeError, match='modified by an inplace'):
        y.backward(go)


@pytest.mark.parametrize('name', ['apa', 'aglu'])
def test_forward_mode_ad_carries_tangents(name):
    """Under forward-mode AD the ops run the composite of standard ops,
    whose tangents (of the input and the parameters) match central
    differences in float64; the operators' Python entries decline
    tangents, and the operators called directly refuse them rather than
    drop them."""
    import torch.autograd.forward_ad as fwAD
    x, k, lam, _ = _inputs((2, 8, 4, 4), 8)
    tangents = [torch.randn_like(t) for t in (x, k, lam)]
    with fwAD.dual_level():
        duals = [fwAD.make_dual(p, t) for p, t in zip((x, k, lam), tangents)]
        assert implementation(*duals) == 'composite'
        y = fwAD.unpack_dual(OPS[name](*duals))
        assert _entries()[name](duals[0], k, lam, 1e-4, 1) is None
        assert _entries()[name](x, duals[1], lam, 1e-4, 1) is None
        for args in ((duals[0], k, lam), (x, k, duals[2])):
            with pytest.raises(
                    RuntimeError,
                    match=f'mmact::{name} has no forward-mode derivative'):
                getattr(torch.ops.mmact, name)(*args, 1e-4, 1)
    # central differences of the float64 op along the tangents
    h = 1e-6
    f = [
        OPS[name](*(p.double() + s * h * t.double()
                    for p, t in zip((x, k, lam), tangents))) for s in (1, -1)
    ]
    torch.testing.assert_close(y.primal, OPS[name](x, k, lam))
    torch.testing.assert_close(
        y.tangent, ((f[0] - f[1]) / (2 * h)).float(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('name', ['apa', 'aglu'])
def test_operator_entry_takes_what_dispatch_sends(name):
    """The operators' Python entries take the calls the Python dispatch
    sends to ``op`` and decline (None) the others, which it decides
    (test_dispatch.py holds the whole rule to the table); the
    operators refuse other devices with an error that says what they
    take."""
    entry = _entries()[name]
    from torch.testing._internal.logging_tensor import LoggingTensor
    x, one = torch.randn(2, 8, 3), torch.ones(1)
    y = entry(x, one, one, 1e-4, 1)
    torch.testing.assert_close(
        y,
        OPS[name](x.double(), one.double(), one.double()).float(),
        rtol=2e-5,
        atol=1e-6)
    for args in ((x, one, 1.0, 1e-4, 1), (x, one, one, 1e-4),
                 (x, one, one, 1e-4, True), (x, one, one, 'small', 1),
                 (x, one, one, 1, 1), (x, one, one, 0.0, 1),
                 (x, one, one, 1e-4, 1.0), (x.double(), one, one, 1e-4, 1),
                 (x, one.double(), one, 1e-4,
                  1), (x.to_sparse(), one, one, 1e-4,
                       1), (x.to('meta'), one, one, 1e-4,
                            1), (LoggingTensor(x), one, one, 1e-4, 1)):
        assert entry(*args) is None
    with torch._subclasses.FakeTensorMode():
        assert entry(torch.randn(2, 8, 3), one, one, 1e-4, 1) is None
    traced = []
    torch.jit.trace(
        lambda t: traced.append(entry(t, one, one, 1e-4, 1)) or t * 2,
        x,
        check_trace=False)
    assert traced == [None]
    with pytest.raises(
            RuntimeError, match=r'run on CPU tensors \(got x on meta\)'):
        getattr(torch.ops.mmact, name)(x.to('meta'), one, one, 1e-4, 1)


def test_settings_change_drops_the_operator_entries():
    """A call that takes the operators makes apa / aglu try their entries
    first; configuring the backends drops that, so that switching the C
    kernels off takes effect on the next call."""
    x, k, lam, _ = _inputs((2, 8, 3), 8)
    want = aglu(x, k, lam)
    assert dispatch.OpRowCache.entries == _entries()
    assert dispatch.OpRowCache.entries['aglu'] == _entries()['aglu']
    with backends.using(cpu_kernels=False):
        assert dispatch.OpRowCache.entries is None
        y = aglu(x.requires_grad_(), k, lam)
        assert y.grad_fn.name() == 'FusedFunctionBackward'
        assert dispatch.OpRowCache.entries is None
    torch.testing.assert_close(y, want)
    assert dispatch.OpRowCache.entries is None
    assert aglu(x, k, lam).grad_fn.name() == 'mmact::aglu_backward'
    assert dispatch.OpRowCache.entries == _entries()


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_second_derivative_raises(name, dtype):
    """create_graph gives the same first derivatives; a second derivative
    through the written-out backward raises instead of being dropped, on
    the operators (float32) and on the torch path (float64)."""
    x, k, lam, _ = (t.to(dtype) for t in _inputs((2, 8, 4, 4), 8))
    x, k, lam = (t.requires_grad_() for t in (x, k, lam))
    y = OPS[name](x, k, lam)
    want = torch.autograd.grad(y.sum(), (x, k, lam), retain_graph=True)
    got = torch.autograd.grad(y.sum(), (x, k, lam), create_graph=True)
    for a, b in zip(got, want):
        assert a.requires_grad and torch.equal(a, b)
    penalty = y.sum() + got[0].square().sum()
    with pytest.raises(
            RuntimeError,
            match=f'mmact.ops.{name} cannot be differentiated '
            'twice'):
        penalty.backward()


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('shared', ['kappa', 'lambda'])
@pytest.mark.parametrize('needs', [(True, False, True), (False, True, False)])
def test_mixed_parameter_counts_and_partial_grads(name, shared, needs):
    """One shared parameter beside a per-channel one (its gradient summed),
    and gradients asked for some inputs only."""
    x, k, lam, go = _inputs((2, 8, 5, 3), 8, seed=9)
    k, lam = (k[:1], lam) if shared == 'kappa' else (k, lam[:1])

    def run(*tensors):
        leaves = [
            t.detach().clone().requires_grad_(n)
            for t, n in zip(tensors, needs)
        ]
        y = OPS[name](*leaves)
        y.backward(go.to(y.dtype))
        return [y.detach()] + [t.grad for t in leaves]

    assert implementation(x, k, lam) == 'op'
    got = run(x, k, lam)
    want = run(x.double(), k.double(), lam.double())
    for a, b in zip(got, want):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.shape == b.shape
            torch.testing.assert_close(a, b.float(), rtol=2e-5, atol=1e-4)


def test_wrong_parameter_count_names_num_parameters():
    """The operators refuse a count that does not fit in the words of the
    torch path (mmact.ops.checks.broadcast_shape)."""
    x = torch.randn(2, 8, 3, 3)
    assert implementation(x, torch.ones(3), torch.ones(1)) == 'op'
    with pytest.raises(
            ValueError,
            match=r'kappa has 3 values '
            r'\(num_parameters=3\).* 8 channels at dim 1'):
        aglu(x, torch.ones(3), torch.ones(1))
    with pytest.raises(ValueError, match='lambda has 5 values'):
        apa(x.requires_grad_(), torch.ones(8), torch.ones(5))
    with pytest.raises(ValueError, match='lambda has 5 values'):
        _entries()['apa'](x, torch.ones(8), torch.ones(5), 1e-4, 1)


@pytest.mark.parametrize(
    'shape,channels,channel_dim',
    [
        ((8, 16, 32, 32), 16, 1),  # 2 x 65536: ranges on row ends
        ((65, 41, 53), 41, 1),  # the second range starts inside a row
        ((2, 65601, 3), 3, -1),  # rows of one value, from channel 1
    ])
def test_threads_split_the_work(shape, channels, channel_dim):
    x, k, lam, go = _inputs(shape, channels, seed=5)
    node = 'mmact::aglu_backward'
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _run(aglu, x, k, lam, channel_dim, go, node)
        torch.set_num_threads(2)
        two = _run(aglu, x, k, lam, channel_dim, go, node)
    finally:
        torch.set_num_threads(old)
    assert torch.equal(one[0], two[0]) and torch.equal(one[1], two[1])
    torch.testing.assert_close(one[2], two[2])
    torch.testing.assert_close(one[3], two[3])


# rows of several blocks, blocks across rows of whole vectors (4 x 4) and
# with a remainder (7 x 7), rows of one value
ISA_SHAPES = [((3, 8, 24, 24), 1), ((3, 8, 4, 4), 1), ((3, 8, 7, 7), 1),
              ((3, 70, 8), -1)]
# (per_channel, rows, with_other, spatial) of the rebuilt backward: rows of
# one block or more, blocks across rows, rows of one value
REBUILT_CASES = [(p, r, o, s) for p in (False, True) for r in (False, True)
                 for o in (False, True) for s in ((13, 11), (4, 4), (1, 1))]


def _check_op(name, shape, channel_dim, isa):
    """The operator's values, input and parameter gradients against
    float64 autograd through the torch path."""
    x, k, lam, go = _inputs(shape, shape[channel_dim], seed=6)
    assert implementation(x, k, lam) == 'op'
    got = _run(OPS[name], x, k, lam, channel_dim, go,
               f'mmact::{name}_backward')
    want = _run(OPS[name], x.double(), k.double(), lam.double(), channel_dim,
                go.double(), 'FusedFunctionBackward')
    for a, b, what in zip(got, want, ('out', 'grad_x', 'grad_k', 'grad_l')):
        assert a.dtype == torch.float32 and a.shape == b.shape, what
        torch.testing.assert_close(
            a,
            b.float(),
            rtol=2e-5,
            atol=1e-5,
            msg=f'{isa} {name} {shape} {what}')


def _check_rebuilt(name, per_channel, rows, with_other, spatial, isa=''):
    """The backward that rebuilds ``z = src * scale + shift (+ other *
    other_scale)`` per element, against float64 autograd on the rebuilt z
    (gradient of z and both parameter sums)."""
    n, c = 3, 8
    src, k, lam, go = _inputs((n, c, *spatial), c if per_channel else 1, 7)
    g = torch.Generator().manual_seed(8)
    scale = torch.rand(n if rows else 1, c, 1, 1, generator=g) + 0.5
    shift = torch.randn(1, c, 1, 1, generator=g)
    other = torch.randn(src.shape, generator=g) if with_other else None
    o_scale = torch.rand(1, c, 1, 1, generator=g) + 0.5 if with_other else None
    got = cpu.backward_rebuilt(name, go, k, lam, 1e-4, src, scale, shift,
                               other, o_scale, True, True)
    z = rebuild_input(*(None if t is None else t.double()
                        for t in (src, scale, shift, other, o_scale)))
    want = _run(OPS[name], z, k.double(), lam.double(), 1, go.double())[1:]
    case = f'{isa} {name} {per_channel} {rows} {with_other} {spatial}'
    for a, b, what in zip(got, want, ('grad_z', 'grad_k', 'grad_l')):
        assert a.dtype == torch.float32 and torch.isfinite(a).all(), what
        assert a.shape == b.shape, what
        torch.testing.assert_close(
            a, b.float(), rtol=2e-5, atol=1e-5, msg=f'{case} {what}')
    _, gk, gl = cpu.backward_rebuilt(name, go, k, lam, 1e-4, src, scale, shift,
                                     other, o_scale, False, False)
    assert gk is None and gl is None


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('per_channel,rows,with_other,spatial', REBUILT_CASES)
def test_rebuilt_backward_matches_float64(name, per_channel, rows, with_other,
                                          spatial):
    _check_rebuilt(name, per_channel, rows, with_other, spatial)


def check_build(isa, cache_dir=None):
    """The extension loaded in this process is the ``isa`` build (from
    ``cache_dir`` when given), and its operators and rebuilt backward match
    float64 torch; run in a subprocess for another ISA than the host's."""
    module = extension()
    assert module is not None, 'the extension was not built'
    folder = os.path.dirname(os.path.abspath(module.__file__))
    assert os.path.basename(folder).startswith(f'mmact_cpu_{isa}_'), folder
    if cache_dir is not None:
        assert os.path.dirname(folder) == os.path.abspath(cache_dir), folder
    for name in OPS:
        for shape, channel_dim in ISA_SHAPES:
            _check_op(name, shape, channel_dim, isa)
        for case in REBUILT_CASES:
            _check_rebuilt(name, *case, isa=isa)


@pytest.mark.parametrize('isa', [
    isa if isa == host_isa() else pytest.param(isa, marks=pytest.mark.slow)
    for isa in ISAS
])
def test_every_isa_build_matches_float64(isa):
    """Each ISA build this CPU can run, against float64 torch: the host's
    build in this process, every other in a subprocess of its own (its
    operators would be registered a second time here). The builds go to
    the cache in force, where FleS's ISA test finds them too (torch's
    builder locks a build folder while it builds)."""
    if isa not in supported_isas():
        pytest.skip(f'this CPU cannot run {isa} code (no such hardware)')
    if isa == host_isa():
        check_build(isa)
        return
    env = dict(os.environ, MMACT_CPU_ISA=isa)
    script = (f'import runpy; runpy.run_path({__file__!r})'
              f'["check_build"]({isa!r}, {default_cache_dir()!r})')
    proc = subprocess.run([sys.executable, '-c', script],
                          cwd=Path(__file__).resolve().parents[3],
                          env=env,
                          capture_output=True,
                          text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
