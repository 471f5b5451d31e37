"""The CUDA C++ kernels of APA / AGLU (``MMACT_CUDA_KERNELS=1``): the C++
operator's CUDA branch against the float64 torch path, the Triton and the
composite rows, in float32 / float16 / bfloat16 and every layout the Triton
row takes; the backward at a rebuilt input (ActResNet's memory-lean path);
determinism, streams, devices and bad input. They need a CUDA GPU, and a
toolkit of torch's CUDA major version to build the kernels
(``python -m mmact.ops.cuda_build`` first builds them outside the test)."""
import warnings

import pytest
import torch

from mmact.ops import aglu, apa, backends
from mmact.ops.apa import cpu, rebuild_input, rebuilt_backward
from mmact.ops.apa.dispatch import implementation, rebuilt_implementation

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason='needs a CUDA GPU (the kernels are compiled without one by '
    'tests/test_ops/test_cuda_build.py)')

OPS = {'apa': apa, 'aglu': aglu}
# relative L2 error against float64: the output rounding of the dtype (and
# between rows); the float32 kernels' own against float64 is the conftest's
# FLOAT32_TOL, from the simulation and exp2f's documented error
TOL = {torch.float32: 2e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}
DTYPES = list(TOL)
LAMBDA_MIN = 1e-4


@pytest.fixture(autouse=True)
def cuda_kernels():
    """Every case runs with the CUDA kernels selected, which must load."""
    with backends.using(cuda_kernels=True):
        assert cpu.cuda_routed(), 'the CUDA kernels did not load: see the log'
        yield


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    assert torch.isfinite(a).all()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def randn(*shape, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).cuda()


def params(channels, seed=1):
    g = torch.Generator().manual_seed(seed)
    k = torch.empty(channels).uniform_(0.5, 1.5, generator=g)
    lam = torch.empty(channels).uniform_(0.2, 1.5, generator=g)
    return k.cuda(), lam.cuda()


def run(name, x, kappa, lam, channel_dim, grad_out, **settings):
    """Output and (x, kappa, lambda) grads under ``settings``."""
    x = x.detach().requires_grad_()
    kappa = kappa.detach().requires_grad_()
    lam = lam.detach().requires_grad_()
    with backends.using(**settings):
        y = OPS[name](x, kappa, lam, LAMBDA_MIN, channel_dim)
        grads = torch.autograd.grad(y, (x, kappa, lam), grad_out.to(y.dtype))
    return (y, ) + grads


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('params_of', ['channel', 'shared', 'mixed'])
def test_rows_agree(name, dtype, params_of, mmact_ops, layouts,
                    float32_tol, param_grads_close):
    """The CUDA kernels against the float64 torch path, the Triton row and
    the composite: output and all three gradients, output layout kept."""
    for what, x, dim, channels in layouts('cuda'):
        x = x.to(dtype)
        k, lam = params(channels)
        if params_of == 'shared':
            k, lam = k[:1], lam[:1]
        elif params_of == 'mixed':
            k = k[:1]
        lam[0] = LAMBDA_MIN / 2  # clamped: no gradient
        go = randn(*x.shape, seed=5).to(dtype)
        with mmact_ops() as ran:
            got = run(name, x, k, lam, dim, go)
        # the operator (again below autograd: its CUDA kernel), its backward
        assert set(ran) == {f'mmact::{name}', f'mmact::{name}_backward'}, what
        want = run(name, x.double(), k.double(), lam.double(), dim,
                   go.double())
        assert got[0].dtype == got[1].dtype == dtype
        # x's layout where it is dense, else contiguous
        assert got[0].stride() == torch.empty_like(x).stride(), what
        tols = float32_tol if dtype is torch.float32 else (TOL[dtype], ) * 2
        for a, b, tol in zip(got, want, tols):
            assert a.shape == b.shape and rel(a, b) < tol, (what, rel(a, b))
        # parameter gradients against their terms' scale: a cancelling sum's
        # relative error is not the kernel's
        assert param_grads_close(name, x, k, lam, dim, go, got[2:],
                                 want[2:]), what
        if params_of != 'shared':
            assert got[3][0] == 0, what
        triton = run(name, x, k, lam, dim, go, cuda_kernels=False)
        composite = run(name, x, k, lam, dim, go, composite=True)
        for other in (triton, composite):
            for a, b in zip(got[:2], other[:2]):
                assert rel(a, b) < 2 * TOL[dtype], what
            assert param_grads_close(name, x, k, lam, dim, go, got[2:],
                                     other[2:], 2), what


@pytest.mark.parametrize('name', ['apa', 'aglu'])
def test_float64_gradcheck_on_cuda(name):
    """float64 is not a kernel dtype: the torch row, checked by gradcheck
    on the GPU; the float32 kernels' gradients are held to it above."""
    x = randn(2, 3, 4, 5, scale=2.0).double().requires_grad_()
    k, lam = params(3)
    k, lam = k.double().requires_grad_(), lam.double().requires_grad_()
    assert implementation(x, k, lam) == 'torch'
    assert torch.autograd.gradcheck(
        lambda *t: OPS[name](*t, LAMBDA_MIN, 1), (x, k, lam))


@pytest.mark.parametrize('name', ['apa', 'aglu'])
def test_extreme_inputs_and_special_cases(name):
    """Very large / small inputs and parameters stay finite and match
    float64; k = l = 1 is sigmoid / SiLU."""
    x = torch.cat([
        torch.linspace(-200, 200, 4001),
        torch.tensor([0.0, -1e-30, 1e-30, 88.0, -88.0])
    ]).cuda().reshape(1, -1)
    for k, lam in ((1.0, 1.0), (30.0, 1e-5), (0.01, 50.0), (-2.0, 0.3)):
        kk = torch.tensor([k], device='cuda')
        ll = torch.tensor([lam], device='cuda')
        go = torch.ones_like(x)
        got = run(name, x, kk, ll, 1, go)
        want = run(name, x.double(), kk.double(), ll.double(), 1, go.double())
        for a, b in zip(got, want):
            torch.testing.assert_close(
                a.double(), b, rtol=2e-4, atol=1e-5, msg=(k, lam))
    special = {'apa': torch.sigmoid, 'aglu': torch.nn.functional.silu}[name]
    one = torch.ones(1, device='cuda')
    torch.testing.assert_close(OPS[name](x, one, one), special(x))


def test_backward_is_deterministic_and_gradients_optional():
    """Two backward passes give the same bits (no atomics); a gradient not
    wanted is not computed."""
    x = randn(8, 64, 28, 28).requires_grad_()
    k, lam = params(64)
    k.requires_grad_()
    lam.requires_grad_()
    go = randn(8, 64, 28, 28, seed=3)
    first = torch.autograd.grad(aglu(x, k, lam), (x, k, lam), go)
    second = torch.autograd.grad(aglu(x, k, lam), (x, k, lam), go)
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    gk, = torch.autograd.grad(aglu(x.detach(), k, lam.detach()), (k, ), go)
    torch.testing.assert_close(gk, first[1])


def test_eval_records_no_node_and_empty_input():
    k, lam = params(4)
    with torch.no_grad():
        assert aglu(randn(2, 4, 3).requires_grad_(), k, lam).grad_fn is None
    for kk, ll in ((k, lam), (k[:1], lam[:1])):
        empty = torch.empty(0, 4, 3, device='cuda', requires_grad=True)
        kk = kk.detach().requires_grad_()
        y = aglu(empty, kk, ll)
        y.sum().backward()
        assert y.shape == empty.shape and not kk.grad.any()
    sources = (torch.empty(0, 4, 5, 5, device='cuda'), None, None, None, None)
    got = rebuilt_backward('aglu', sources[0], k[:1].requires_grad_(),
                           lam[:1], LAMBDA_MIN, 1, *sources)
    assert got[0].shape == sources[0].shape and not got[1].any()


def test_current_stream_and_device():
    """The kernels run on the current stream of the input's device."""
    x = randn(4, 16, 32, 32)
    k, lam = params(16)
    want = aglu(x, k, lam)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        got = aglu(x, k, lam)
    stream.synchronize()
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    if torch.cuda.device_count() > 1:
        x1, k1, l1 = (t.to('cuda:1') for t in (x, k, lam))
        with torch.cuda.device(0):
            torch.testing.assert_close(aglu(x1, k1, l1).cpu(), want.cpu())


def test_bad_input_is_named():
    """Parameters on another device or of another dtype: the Triton row with
    one warning naming them (through mmact.ops), an error naming them (the
    operator called directly); a dtype the kernels do not take: an error
    naming it."""
    x = randn(2, 4, 3)
    k, lam = params(4)
    with pytest.warns(UserWarning, match=r'kappa is torch.float32 on cpu'):
        assert implementation(x, k.cpu(), lam) == 'triton'
    with pytest.warns(UserWarning, match=r'lambda is torch.float64 on cuda'):
        assert implementation(x, k, lam.double()) == 'triton'
    with pytest.raises(RuntimeError, match=r'mmact::aglu: kappa is Float on '
                       r'cpu but x is on cuda:\d'):
        torch.ops.mmact.aglu(x, k.cpu(), lam, LAMBDA_MIN, 1)
    with pytest.raises(TypeError, match='float32 / float16 / bfloat16 x, got '
                       'Double'):
        torch.ops.mmact.aglu(x.double(), k, lam, LAMBDA_MIN, 1)
    with pytest.raises(ValueError, match='kappa has 3 values'):
        torch.ops.mmact.aglu(x, k[:3], lam, LAMBDA_MIN, 1)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert implementation(x, k, lam) == 'op'


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('nk,nl', [(1, 1), (6, 6), (6, 1)])
@pytest.mark.parametrize('layout', ['nchw', 'channels_last', 'samples inside'])
@pytest.mark.parametrize('scale,other', [('channel', False), ('sample', True),
                                         ('none', True)])
@pytest.mark.parametrize('dtype', DTYPES)
def test_rebuilt_backward(name, nk, nl, layout, scale, other, dtype,
                          mmact_ops, rebuilt_case):
    """The CUDA backward rebuilds its input from the sources (BN affine,
    attention weights per sample, residual with a BN scale), as the float64
    autograd of the rebuilt input and the Triton kernel."""
    sources, kappa, lam, go = rebuilt_case(layout, scale, other, nk, nl,
                                           dtype, 'cuda')
    args = (go, kappa.requires_grad_(), lam.requires_grad_(), LAMBDA_MIN, 1,
            *sources)
    assert rebuilt_implementation(go, kappa, lam, 1, *sources) == 'op'
    with mmact_ops() as ran:
        got = rebuilt_backward(name, *args)
    assert ran == [f'mmact::{name}_backward_rebuilt']
    z = rebuild_input(*(None if t is None else t.double()
                        for t in sources)).requires_grad_()
    k64 = kappa.detach().double().requires_grad_()
    l64 = lam.detach().double().requires_grad_()
    OPS[name](z, k64, l64, LAMBDA_MIN).backward(go.double())
    with backends.using(cuda_kernels=False):
        triton = rebuilt_backward(name, *args)
    assert got[0].dtype == dtype
    if layout != 'samples inside' or scale != 'sample':
        assert got[0].stride() == sources[0].stride()
    for a, b, t, what in zip(got, (z.grad, k64.grad, l64.grad), triton,
                             ('grad_z', 'grad_kappa', 'grad_lambda')):
        assert a.shape == b.shape, what
        tol = TOL[dtype] if what == 'grad_z' else 1e-5
        assert rel(a, b) < tol and rel(a, t) < 2 * tol, (what, rel(a, b))
    assert not got[2][:2].any()


def test_memory_lean_resnet_rebuilds_in_the_kernel(mmact_ops):
    """ActResNet's memory-lean AGLUs run the CUDA rebuilding backward and
    give the plain path's gradients."""
    from mmact.models.backbones import ActResNet
    torch.manual_seed(0)
    kw = dict(act_cfg=dict(type='AGLU'), out_indices=(3, ))
    plain = ActResNet(18, recompute_act=False, **kw).cuda().train()
    fast = ActResNet(18, recompute_act=True, **kw).cuda().train()
    fast.load_state_dict(plain.state_dict())
    x = randn(2, 3, 32, 32, seed=7, scale=1.0)
    plain(x)[0].square().mean().backward()
    with mmact_ops() as ran:
        fast(x)[0].square().mean().backward()
    assert ran.count('mmact::aglu_backward_rebuilt') == 16
    for (name, p), q in zip(plain.named_parameters(), fast.parameters()):
        assert rel(q.grad, p.grad) < 1e-3, name
