"""Cases for the Triton APA / AGLU kernels, run by test_triton_kernels.py.

Not collected on its own (no ``test_`` prefix): it must run in a process
that has ``MMACT_TEST_DEVICE`` set to ``cpu`` (with ``TRITON_INTERPRET=1``
and ``MMACT_TRITON=1`` set before start-up) or ``cuda``. The float64
reference is mmact's own torch path (float64 never takes the Triton path);
it is checked against the paper's formula in test_apa.py.
"""
import os

import pytest
import torch

from mmact.models.activations import AGLU
from mmact.models.backbones import ActResNet
from mmact.ops import aglu, apa
from mmact.ops.apa import rebuild_input, rebuilt_backward
from mmact.ops.apa import triton as triton_apa

DEVICE = os.environ.get('MMACT_TEST_DEVICE', 'cpu')
OPS = {'apa': apa, 'aglu': aglu}
# relative L2 error of values / grad_x: output rounding of the dtype
TOL = {torch.float32: 2e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}
DTYPES = list(TOL)


@pytest.fixture(autouse=True)
def launches(triton_launches):
    """Every case must go through the Triton launchers (the profiler's
    ``mmact::triton_*`` ranges, tests/test_ops/conftest.py)."""
    torch.manual_seed(0)
    yield triton_launches
    assert {'eta_forward', 'eta_backward_rebuilt'} & set(triton_launches())


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    assert torch.isfinite(a).all()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def run(name, x, kappa, lam, channel_dim=1, grad_out=None):
    """Output and (x, kappa, lambda) grads of the op; float64 x -> the torch
    path (the reference), other dtypes -> Triton."""
    x = x.detach().requires_grad_()
    kappa = kappa.detach().requires_grad_()
    lam = lam.detach().requires_grad_()
    y = OPS[name](x, kappa, lam, channel_dim=channel_dim)
    if grad_out is None:
        grad_out = torch.randn_like(y)
    grads = torch.autograd.grad(y, (x, kappa, lam), grad_out.to(y.dtype))
    return (y, ) + grads


def check(name, x, kappa, lam, channel_dim=1, dtype=torch.float32):
    """Compare the Triton path on ``x.to(dtype)`` with the float64 torch
    path on the same (rounded) values."""
    xq = x.to(dtype)
    go = torch.randn(x.shape, device=x.device).to(dtype)
    out = run(name, xq, kappa, lam, channel_dim, go)
    ref = run(name, xq.double(), kappa.double(), lam.double(), channel_dim,
              go.double())
    assert out[0].dtype == dtype and out[1].dtype == dtype
    assert out[0].shape == x.shape and out[1].shape == x.shape
    assert out[2].shape == kappa.shape and out[3].shape == lam.shape
    assert out[2].dtype == kappa.dtype and out[3].dtype == lam.dtype
    for got, want, tol in zip(out, ref, (TOL[dtype], TOL[dtype], 1e-5, 1e-5)):
        assert rel(got, want) < tol, (rel(got, want), tol)


def params(channels, seed=0, kappa_range=(0.5, 1.5), lam_range=(0.2, 1.5)):
    g = torch.Generator().manual_seed(seed)
    k = torch.empty(channels).uniform_(*kappa_range, generator=g)
    lam = torch.empty(channels).uniform_(*lam_range, generator=g)
    return k.to(DEVICE), lam.to(DEVICE)


def randn(*shape, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(DEVICE)


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('channels', [1, 5])
def test_nchw_odd_sizes(name, dtype, channels):
    # 37 * 29 = 1073 pixels per plane: not a multiple of any tile
    check(name, randn(2, 5, 37, 29), *params(channels), dtype=dtype)


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('dtype', DTYPES)
def test_nlc_channels_last_dim(name, dtype):
    check(name, randn(3, 301, 6), *params(6), channel_dim=-1, dtype=dtype)


@pytest.mark.parametrize('name', ['apa', 'aglu'])
def test_channels_last_memory_format(name):
    x = randn(2, 6, 9, 11).contiguous(memory_format=torch.channels_last)
    check(name, x, *params(6))
    y = apa(x, *params(6)) if name == 'apa' else aglu(x, *params(6))
    assert y.stride() == x.stride()  # processed in place order, no copy


@pytest.mark.parametrize('name', ['apa', 'aglu'])
def test_non_contiguous_input(name):
    x = randn(4, 6, 10, 14)[:, ::2, 1:, ::3]  # (4, 3, 9, 5) strided view
    assert not x.is_contiguous()
    check(name, x, *params(3))


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('scalar', ['kappa', 'lambda'])
def test_mixed_per_channel_and_scalar(name, scalar):
    """One parameter shared, the other per channel: the shared one's
    gradient is the sum of the per-channel gradients of its copies."""
    x = randn(2, 5, 7, 3)
    k, lam = params(5)
    if scalar == 'kappa':
        k = k[:1]
    else:
        lam = lam[:1]
    go = torch.randn_like(x)
    out = run(name, x, k, lam, grad_out=go)
    ref = run(
        name,
        x.double(),
        k.double().expand(5),
        lam.double().expand(5),
        grad_out=go.double())
    ref = list(ref)
    ref[2 if scalar == 'kappa' else 3] = ref[2 if scalar ==
                                             'kappa' else 3].sum().reshape(1)
    for got, want, tol in zip(out, ref, (2e-6, 2e-6, 1e-5, 1e-5)):
        assert got.shape == want.shape
        assert rel(got, want) < tol


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('dtype', DTYPES)
def test_extreme_inputs_and_lambda_at_clamp(name, dtype):
    base = torch.tensor(
        [-1e4, -300.0, -30.0, -1.0, -1e-3, 0.0, 1e-3, 1.0, 30.0, 300.0, 1e4])
    x = base.repeat(2, 4, 1).to(DEVICE)  # (2, 4, 11)
    if dtype == torch.float16:
        x = x.clamp(-6e4, 6e4)
    # negative, small and large slopes; lambda 0 is clamped to 1e-4. Not
    # 1e-4 itself: float32(1e-4) lies below 1e-4, so the float64 reference
    # would clamp it (zero lambda gradient) while float32 keeps it.
    k = torch.tensor([-1.0, 0.05, 1.0, 8.0], device=DEVICE)
    lam = torch.tensor([0.0, 2e-4, 1.0, 50.0], device=DEVICE)
    xq = x.to(dtype)
    go = torch.randn(x.shape, device=DEVICE).to(dtype)
    out = run(name, xq, k, lam, grad_out=go)
    ref = run(name, xq.double(), k.double(), lam.double(), grad_out=go)
    assert out[0].dtype == dtype
    for got, want in zip(out, ref):
        assert torch.isfinite(got).all()
        # elementwise: |err| <= tol * (|ref| + 1) (huge values: relative)
        err = (got.double().cpu() - want.cpu()).abs()
        scale = want.cpu().abs() + 1.0
        tol = TOL[dtype] * 10 if got.dtype == dtype else 1e-5
        assert (err <= tol * scale).all(), (err / scale).max()


@pytest.mark.parametrize('layout', ['nchw', 'nlc', 'shared'])
def test_backward_programs_walk_several_tiles(monkeypatch, layout):
    """Few programs: each walks several tiles (and a partial last run)."""
    monkeypatch.setattr(triton_apa, 'BACKWARD_PROGRAMS', 3)
    if layout == 'nlc':
        check('aglu', randn(2, 1500, 3), *params(3), channel_dim=-1)
    else:
        check('apa', randn(3, 2, 40, 45),
              *params(2 if layout == 'nchw' else 1))


def test_silu_and_sigmoid_special_case():
    x = randn(3, 4, 33, seed=4)
    one = torch.ones(1, device=DEVICE)
    torch.testing.assert_close(aglu(x, one, one), torch.nn.functional.silu(x))
    torch.testing.assert_close(apa(x, one, one), torch.sigmoid(x))


def test_only_some_gradients():
    x = randn(2, 3, 5, 5, seed=5)
    k, lam = params(3)
    xg = x.clone().requires_grad_()
    (gx, ) = torch.autograd.grad(aglu(xg, k, lam).sum(), xg)
    kg = k.clone().requires_grad_()
    (gk, ) = torch.autograd.grad(apa(x, kg, lam).square().sum(), kg)
    ref = run(
        'aglu',
        x.double(),
        k.double(),
        lam.double(),
        grad_out=torch.ones_like(x.double()))
    assert rel(gx, ref[1]) < TOL[torch.float32]
    kd = k.double().requires_grad_()
    (gk_ref, ) = torch.autograd.grad(
        apa(x.double(), kd, lam.double()).square().sum(), kd)
    assert rel(gk, gk_ref) < 1e-5


def test_empty_input():
    x = torch.empty(0, 3, 4, 4, device=DEVICE, requires_grad=True)
    k, lam = params(3)
    k.requires_grad_()
    y = aglu(x, k, lam)
    y.sum().backward()
    assert y.shape == x.shape and torch.equal(k.grad, torch.zeros_like(k))


def test_module_through_triton():
    """The AGLU module (per-channel, channels-last NLC) on the Triton path."""
    torch.manual_seed(0)
    act = AGLU(num_parameters=6, channel_dim=-1).to(DEVICE)
    x = randn(2, 17, 6, seed=6).requires_grad_()
    act(x).square().sum().backward()
    assert act.kappa_param.grad is not None
    assert torch.isfinite(act.lambda_param.grad).all()
    assert x.grad.shape == x.shape


REBUILT_LAMBDA_MIN = 2.0**-4  # exact in float32 and float64


def rebuilt_case(layout, scale, other, nk, nl, dtype, seed=0):
    """Sources of ``z = src * scale + shift + other * other_scale`` (N, C,
    H, W) = (3, 6, 7, 9), the op's parameters (two lambdas at or below the
    clamp) and an output gradient."""
    g = torch.Generator().manual_seed(seed)
    n, c, h, w = 3, 6, 7, 9

    def maps():
        t = torch.randn(n, c, h, w, generator=g)
        if layout == 'channels_last':
            t = t.contiguous(memory_format=torch.channels_last)
        return t.to(DEVICE)

    def coef(rows=1):
        return (torch.rand(rows, c, 1, 1, generator=g) + 0.5).to(DEVICE)

    src, go = maps().to(dtype), maps().to(dtype)
    scale = dict(none=None, channel=coef(), sample=coef(n))[scale]
    shift = torch.randn(1, c, 1, 1, generator=g).to(DEVICE)
    if other:
        sources = (src, scale, shift, maps().to(dtype), coef())
    else:
        sources = (src, scale, shift, None, None)
    kappa = (torch.rand(nk, generator=g) + 0.5).to(DEVICE)
    lam = torch.rand(nl, generator=g) + 0.2
    lam[:2] = torch.tensor([REBUILT_LAMBDA_MIN, REBUILT_LAMBDA_MIN / 2])[:nl]
    return sources, kappa, lam.to(DEVICE), go


def rebuilt_reference(name, sources, kappa, lam, go):
    """float64 autograd through the rebuilt input and the op."""
    z = rebuild_input(*(None if t is None else t.double()
                        for t in sources)).requires_grad_()
    kappa = kappa.detach().double().requires_grad_()
    lam = lam.detach().double().requires_grad_()
    OPS[name](z, kappa, lam, REBUILT_LAMBDA_MIN).backward(go.double())
    return z.grad, kappa.grad, lam.grad


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('nk,nl', [(1, 1), (6, 6), (6, 1)])
@pytest.mark.parametrize('layout', ['nchw', 'channels_last'])
@pytest.mark.parametrize('scale,other', [('channel', False), ('sample', True),
                                         ('none', True)])
def test_rebuilt_backward(name, nk, nl, layout, scale, other, launches):
    """The backward kernel rebuilds its input from the sources (BN affine,
    attention weights per sample, residual with a BN scale)."""
    sources, kappa, lam, go = rebuilt_case(layout, scale, other, nk, nl,
                                           torch.float32)
    got = rebuilt_backward(name, go, kappa.requires_grad_(),
                           lam.requires_grad_(), REBUILT_LAMBDA_MIN, 1,
                           *sources)
    assert launches() == ['eta_backward_rebuilt']
    want = rebuilt_reference(name, sources, kappa, lam, go)
    for a, b, what in zip(got, want, ('grad_z', 'grad_kappa', 'grad_l')):
        assert a.shape == b.shape and a.dtype == torch.float32, what
        torch.testing.assert_close(
            a.double(), b, rtol=1e-4, atol=1e-5, msg=what)
    assert got[0].stride() == sources[0].stride()
    # the clamp passes lambda's gradient only strictly above lambda_min
    assert not got[2][:2].any()


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_rebuilt_backward_half_sources(dtype, launches):
    """Half-precision maps with float32 coefficients (autocast): computed in
    float32, grad_z in the gradient's dtype."""
    sources, kappa, lam, go = rebuilt_case('nchw', 'sample', True, 6, 6, dtype)
    got = rebuilt_backward('aglu', go, kappa.requires_grad_(),
                           lam.requires_grad_(), REBUILT_LAMBDA_MIN, 1,
                           *sources)
    assert launches() == ['eta_backward_rebuilt']
    want = rebuilt_reference('aglu', sources, kappa, lam, go)
    assert got[0].dtype == dtype
    assert rel(got[0], want[0]) < TOL[dtype]
    for a, b in zip(got[1:], want[1:]):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('layout', ['nchw', 'channels_last'])
def test_rebuilt_backward_partial_sources_and_several_tiles(
        monkeypatch, layout, launches):
    """A shift only, a residual without its scale; few programs, so each
    walks several tiles."""
    monkeypatch.setattr(triton_apa, 'BACKWARD_PROGRAMS', 3)
    full, kappa, lam, go = rebuilt_case(layout, 'channel', True, 6, 6,
                                        torch.float32)
    for sources in ((full[0], None, full[2], None, None), (full[0], None, None,
                                                           full[3], None)):
        got = rebuilt_backward('aglu', go, kappa.requires_grad_(),
                               lam.requires_grad_(), REBUILT_LAMBDA_MIN, 1,
                               *sources)
        want = rebuilt_reference('aglu', sources, kappa, lam, go)
        for a, b in zip(got, want):
            torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-5)
    assert launches() == ['eta_backward_rebuilt'] * 2


@pytest.mark.parametrize('shape', [(0, 4, 5, 5), (2, 4, 0, 5), (0, 1, 4, 4),
                                   (2, 1, 0, 4)])
def test_rebuilt_backward_empty(shape):
    src = torch.empty(shape, device=DEVICE)
    kappa, lam = params(shape[1])
    got = rebuilt_backward('aglu',
                           torch.empty_like(src), kappa.requires_grad_(),
                           lam.requires_grad_(), REBUILT_LAMBDA_MIN, 1, src,
                           torch.ones(shape[0], shape[1], 1, 1,
                                      device=DEVICE), None,
                           torch.empty_like(src))
    assert got[0].shape == shape
    assert not got[1].any() and not got[2].any()


def test_rebuilt_backward_falls_back_when_samples_are_not_outermost(
        launches):
    """A per-sample scale on a map stored channel-major: the kernel cannot
    find the sample of a row, so the input is rebuilt with torch (and the
    plain backward kernel runs on it)."""
    fallback = ['eta_backward', 'eta_backward_rebuilt']
    sources, kappa, lam, go = rebuilt_case('nchw', 'sample', False, 6, 6,
                                           torch.float32)
    src = sources[0].transpose(0, 1).contiguous().transpose(0, 1)
    got = rebuilt_backward('apa', go, kappa.requires_grad_(),
                           lam.requires_grad_(), REBUILT_LAMBDA_MIN, 1, src,
                           *sources[1:])
    assert sorted(launches()) == fallback
    want = rebuilt_reference('apa', (src, ) + sources[1:], kappa, lam, go)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-5)
    # one channel: a row of the kernel's plan spans the samples
    sources, kappa, lam, go = rebuilt_case('nchw', 'sample', False, 1, 1,
                                           torch.float32)
    sources = tuple(t[:, :1] for t in sources[:3]) + sources[3:]
    go = go[:, :1].contiguous()
    got = rebuilt_backward('aglu', go, kappa.requires_grad_(),
                           lam.requires_grad_(), REBUILT_LAMBDA_MIN, 1,
                           *sources)
    assert sorted(launches()) == sorted(fallback * 2)
    want = rebuilt_reference('aglu', sources, kappa, lam, go)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-5)


def test_memory_lean_resnet_rebuilds_in_the_kernel(launches):
    """ActResNet's memory-lean AGLUs run the rebuilding backward kernel and
    give the plain path's gradients."""
    torch.manual_seed(0)
    kw = dict(act_cfg=dict(type='AGLU'), out_indices=(3, ))
    plain = ActResNet(18, recompute_act=False, **kw).to(DEVICE).train()
    fast = ActResNet(18, recompute_act=True, **kw).to(DEVICE).train()
    fast.load_state_dict(plain.state_dict())
    x = randn(2, 3, 32, 32, seed=7, scale=1.0)
    plain(x)[0].square().mean().backward()
    launches.clear()
    fast(x)[0].square().mean().backward()
    # 8 blocks x 2 activations rebuilt; the stem keeps its input
    ran = launches()
    assert ran.count('eta_backward_rebuilt') == 16
    assert ran.count('eta_backward') == 1
    for (name, p), q in zip(plain.named_parameters(), fast.parameters()):
        # float32 sums in another order (through 17 layers; both paths are
        # up to 7e-3 from float64 in the activation parameters)
        assert rel(q.grad, p.grad) < 1e-3, name


@pytest.mark.skipif(
    DEVICE != 'cuda', reason='needs a CUDA GPU (2**31 '
    'elements)')
def test_more_than_2_pow_31_elements():
    n = 2**31 + 3 * 1024 + 5
    x = torch.empty(n, device='cuda', dtype=torch.bfloat16)
    x[:4096].normal_()
    x[-4096:].normal_()
    one = torch.ones(1, device='cuda')
    y = aglu(x.requires_grad_(), one, one)
    (grad, ) = torch.autograd.grad(y, x, torch.ones_like(y))
    for part in (slice(0, 4096), slice(n - 4096, n)):
        xp = x[part].detach().float().requires_grad_()
        silu = torch.nn.functional.silu(xp)
        torch.testing.assert_close(
            y[part].float(), silu.detach(), rtol=1e-2, atol=1e-2)
        (want, ) = torch.autograd.grad(silu.sum(), xp)
        torch.testing.assert_close(
            grad[part].float(), want, rtol=1e-2, atol=1e-2)
