"""The CUDA kernels of APA / AGLU (``csrc/apa_cuda.cu``) run on the CPU by
their simulation (:mod:`mmact.testing.cuda_sim`): forward, backward and the
rebuilt backward against the float64 torch path and the C kernels, in every
layout and dtype the CUDA row takes; shapes of one or many blocks, a
partial last block, channels spread over several block groups; parameter
gradients bit for bit across block and thread orders; the plans of 1, 108
and 132 multiprocessors; the kernels' refusals."""
import pytest
import torch

from mmact.ops import aglu, apa
from mmact.ops.apa import rebuild_input
from mmact.testing import cuda_sim

OPS = {'apa': apa, 'aglu': aglu}
# relative L2 error against float64: the output rounding of the dtype (the
# GPU formulas' own error is below float32's)
TOL = {torch.float32: 2e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}
DTYPES = list(TOL)
LAMBDA_MIN = 1e-4
# the plan's multiprocessors: one, an A100's, an H100's
SMS = (1, 108, 132)


def rel(a, b):
    a, b = a.double(), b.double()
    assert torch.isfinite(a).all()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def randn(*shape, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * scale


def params(channels, seed=1):
    g = torch.Generator().manual_seed(seed)
    k = torch.empty(channels).uniform_(0.5, 1.5, generator=g)
    lam = torch.empty(channels).uniform_(0.2, 1.5, generator=g)
    return k, lam


def kernels(sim, name, x, kappa, lam, dim, go):
    """Output and (x, kappa, lambda) gradients of the simulated kernels."""
    y = getattr(sim, name)(x, kappa, lam, LAMBDA_MIN, dim)
    grads = getattr(sim, f'{name}_backward')(go, x, kappa, lam, LAMBDA_MIN,
                                             dim, True, True)
    return (y, *grads)


def reference(name, x, kappa, lam, dim, go):
    """The same from the float64 torch path."""
    leaves = [t.detach().double().requires_grad_() for t in (x, kappa, lam)]
    y = OPS[name](*leaves, LAMBDA_MIN, dim)
    return (y, *torch.autograd.grad(y, leaves, go.double()))


def c_kernels(name, x, kappa, lam, dim, go):
    """The same from the C kernels (mmact's CPU operators)."""
    y = getattr(torch.ops.mmact, name)(x, kappa, lam, LAMBDA_MIN, dim)
    grads = getattr(torch.ops.mmact,
                    f'{name}_backward')(go, x, kappa, lam, LAMBDA_MIN, dim,
                                        True, True)
    return (y, *grads)


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('params_of', ['channel', 'shared', 'mixed'])
def test_kernels_agree(sim, layouts, name, dtype, params_of,
                       param_grads_close):
    """Forward, backward and the parameter gradients against float64 and
    the C kernels; the output keeps the input's layout; a lambda at the
    clamp gets no gradient."""
    for what, x, dim, channels in layouts('cpu'):
        x = x.to(dtype)
        k, lam = params(channels)
        if params_of == 'shared':
            k, lam = k[:1], lam[:1]
        elif params_of == 'mixed':
            k = k[:1]
        lam[0] = LAMBDA_MIN / 2
        go = randn(*x.shape, seed=5).to(dtype)
        got = kernels(sim, name, x, k, lam, dim, go)
        want = reference(name, x, k, lam, dim, go)
        c = c_kernels(name, x, k, lam, dim, go)
        assert got[0].dtype == got[1].dtype == dtype, what
        # x's layout where it is dense, else contiguous
        assert got[0].stride() == torch.empty_like(x).stride(), what
        for a, b, o in zip(got[:2], want, c):
            assert a.shape == b.shape, what
            assert rel(a, b) < TOL[dtype] and rel(
                a, o) < 2 * TOL[dtype], (what, rel(a, b))
        for a, b in zip(got[2:], want[2:]):
            assert a.shape == b.shape, what
        assert param_grads_close(name, x, k, lam, dim, go, got[2:],
                                 want[2:]), what
        assert param_grads_close(name, x, k, lam, dim, go, got[2:],
                                 c[2:]), what
        if params_of != 'shared':
            assert got[3][0] == 0, what


def test_blocks_of_the_shapes(sim):
    """The shapes above make one block or many: fewer values than one
    block's 1024, a partial last block, many blocks; the parameter sums of
    a channel come from several blocks (a second launch of one block per
    channel adds them)."""
    x = randn(2, 3, 4, 5)
    k, lam = params(3)
    cuda_sim.configure()
    sim.aglu_backward(torch.ones_like(x), x, k, lam, LAMBDA_MIN, 1, True, True)
    assert cuda_sim.launched() == [1, 3]
    x = randn(2, 3, 70, 70)
    cuda_sim.configure()
    sim.aglu_backward(torch.ones_like(x), x, k, lam, LAMBDA_MIN, 1, True, True)
    grid, channels = cuda_sim.launched()
    assert grid > 6 and channels == 3


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('nk,nl', [(1, 1), (6, 6), (6, 1)])
@pytest.mark.parametrize('layout', ['nchw', 'channels_last', 'samples inside'])
@pytest.mark.parametrize('dtype', DTYPES)
def test_rebuilt_backward(sim, rebuilt_case, name, nk, nl, layout, dtype):
    """The backward that rebuilds its input from the sources (BN affine,
    attention weights per sample, a residual with a BN scale) against the
    float64 autograd of the rebuilt input, and the C kernel (float32)."""
    for scale, other in (('channel', False), ('sample', True), ('none', True)):
        sources, kappa, lam, go = rebuilt_case(layout, scale, other, nk, nl,
                                               dtype, 'cpu')
        got = getattr(sim,
                      f'{name}_backward_rebuilt')(go, kappa, lam, LAMBDA_MIN,
                                                  *sources, True, True)
        z = rebuild_input(*(None if t is None else t.double()
                            for t in sources)).requires_grad_()
        k64 = kappa.double().requires_grad_()
        l64 = lam.double().requires_grad_()
        OPS[name](z, k64, l64, LAMBDA_MIN).backward(go.double())
        assert got[0].dtype == dtype
        if layout != 'samples inside' or scale != 'sample':
            assert got[0].stride() == sources[0].stride()
        for a, b, what in zip(got, (z.grad, k64.grad, l64.grad),
                              ('grad_z', 'grad_kappa', 'grad_lambda')):
            tol = TOL[dtype] if what == 'grad_z' else 1e-5
            assert a.shape == b.shape and rel(a, b) < tol, (what, scale,
                                                            rel(a, b))
        assert not got[2][:2].any()
        if dtype == torch.float32:
            c = getattr(torch.ops.mmact,
                        f'{name}_backward_rebuilt')(go, kappa, lam, LAMBDA_MIN,
                                                    *sources, True, True)
            for a, b in zip(got, c):
                assert rel(a, b) < 4e-6, scale


@pytest.mark.parametrize('params_of', ['channel', 'shared'])
def test_parameter_gradients_are_bitwise_stable(sim, params_of):
    """Runs in other block and thread orders (and in order) give the same
    bits: the partial sums are each thread's, then fixed-order trees."""
    x = randn(3, 6, 33, 35)
    k, lam = params(6)
    if params_of == 'shared':
        k, lam = k[:1], lam[:1]
    go = randn(*x.shape, seed=2)
    first = sim.aglu_backward(go, x, k, lam, LAMBDA_MIN, 1, True, True)
    sources = (randn(3, 6, 33, 35, seed=4), randn(1, 6, 1, 1,
                                                  seed=5), None, x, None)
    rebuilt = sim.apa_backward_rebuilt(go, k, lam, LAMBDA_MIN, *sources, True,
                                       True)
    for seed in (0, 2, 3):
        with cuda_sim.settings(order_seed=seed):
            again = sim.aglu_backward(go, x, k, lam, LAMBDA_MIN, 1, True, True)
            for a, b in zip(first, again):
                assert torch.equal(a, b), seed
            again = sim.apa_backward_rebuilt(go, k, lam, LAMBDA_MIN, *sources,
                                             True, True)
            for a, b in zip(rebuilt, again):
                assert torch.equal(a, b), seed


@pytest.mark.parametrize('name', ['apa', 'aglu'])
def test_multiprocessor_counts(sim, name, param_grads_close):
    """The plans of 1, 108 and 132 multiprocessors give the float64 values,
    in NCHW and channels last; one multiprocessor walks more tiles per
    block (fewer blocks)."""
    x = randn(4, 6, 30, 31)
    k, lam = params(6)
    go = randn(*x.shape, seed=3)
    for x in (x, x.contiguous(memory_format=torch.channels_last)):
        want = reference(name, x, k, lam, 1, go)
        grids = []
        for sms in SMS:
            with cuda_sim.settings(multiprocessors=sms):
                got = kernels(sim, name, x, k, lam, 1, go)
                grids.append(cuda_sim.launched()[0])
            assert rel(got[0], want[0]) < 2e-6 and rel(got[1], want[1]) < 2e-6
            assert param_grads_close(name, x, k, lam, 1, go, got[2:],
                                     want[2:]), sms
        assert grids[0] < grids[1] <= grids[2], grids


def test_plans_of_an_a100_and_an_h100_differ(sim, param_grads_close):
    """A tensor of 2,032 tiles: about a wave of 8 blocks per
    multiprocessor walks 2 tiles per block on 108, 1 on 132; both sum to
    the float64 gradients."""
    x = randn(2, 8, 360, 360)
    k, lam = params(8)
    go = randn(*x.shape, seed=3)
    want = reference('aglu', x, k, lam, 1, go)
    for sms, blocks in ((108, 1024), (132, 2032)):
        with cuda_sim.settings(multiprocessors=sms):
            got = sim.aglu_backward(go, x, k, lam, LAMBDA_MIN, 1, True, True)
            assert cuda_sim.launched() == [blocks, 8]
        assert rel(got[0], want[1]) < 2e-6
        assert param_grads_close('aglu', x, k, lam, 1, go, got[1:],
                                 want[2:]), sms


def test_empty_input(sim):
    """No launch: an empty output and zero parameter gradients."""
    x = torch.empty(0, 4, 3)
    k, lam = params(4)
    assert sim.aglu(x, k, lam, LAMBDA_MIN, 1).shape == x.shape
    gx, gk, gl = sim.aglu_backward(x, x, k, lam, LAMBDA_MIN, 1, True, True)
    assert gx.shape == x.shape and not gk.any() and not gl.any()
    assert cuda_sim.launched() == []


def test_bad_input_is_refused_as_on_cuda(sim):
    """The CUDA operators' refusals, with their words (a device mismatch
    needs a second device): parameters of another dtype, an input dtype the kernels lack, a parameter
    count that is not the channels', a rebuilt backward's mismatched
    sources or coefficients."""
    x = randn(2, 4, 3)
    k, lam = params(4)
    with pytest.raises(
            RuntimeError,
            match=r'mmact::aglu: kappa is Half on '
            r'cpu but x is on cpu; the CUDA kernels take float32 '
            r"parameters on x's device"):
        sim.aglu(x, k.half(), lam, LAMBDA_MIN, 1)
    with pytest.raises(
            TypeError,
            match=r'mmact::aglu on CUDA takes float32 / '
            r'float16 / bfloat16 x, got Double'):
        sim.aglu(x.double(), k, lam, LAMBDA_MIN, 1)
    with pytest.raises(ValueError, match=r'kappa has 3 values'):
        sim.aglu(x, k[:3], lam, LAMBDA_MIN, 1)
    with pytest.raises(
            RuntimeError,
            match=r'mmact::aglu_backward: grad_out '
            r'\[2, 4\] on cpu, x \[2, 4, 3\] on cpu'):
        sim.aglu_backward(x[..., 0], x, k, lam, LAMBDA_MIN, 1, True, True)
    src = randn(2, 4, 3, 3)
    with pytest.raises(
            RuntimeError,
            match=r'mmact::apa_backward_rebuilt on '
            r'CUDA takes \(N, C, ...\) src, grad_out and other of '
            r'one shape'):
        sim.apa_backward_rebuilt(src[:1], k, lam, LAMBDA_MIN, src, None, None,
                                 None, None, True, True)
    with pytest.raises(
            ValueError,
            match=r'scale has 3 values, shift 0, '
            r'other_scale 0; expected C=4 each \(scale also '
            r'N\*C=8\)'):
        sim.apa_backward_rebuilt(src, k, lam, LAMBDA_MIN, src, torch.ones(3),
                                 None, None, None, True, True)


def test_rows_over_the_limit_are_refused_before_any_copy(sim):
    """2^31 rows of a channel (2^32 values, expanded: a dense copy would
    take 16 GiB): refused naming the shape and the limit before the
    kernels copy or allocate anything, in each entry."""
    x = torch.zeros(1, 2).expand(2**31, 2)
    k, lam = params(2)
    words = (r"mmact's CUDA kernels take at most 2\^31 - 1 rows of a channel "
             r'\(got 2147483648 for shape \[2147483648, 2\]\)')
    with pytest.raises(RuntimeError, match=words):
        sim.aglu(x, k, lam, LAMBDA_MIN, 1)
    with pytest.raises(RuntimeError, match=words):
        sim.apa_backward(x, x, k, lam, LAMBDA_MIN, 1, True, True)
    src = x[..., None]
    with pytest.raises(
            RuntimeError,
            match=r'rows of a channel \(got '
            r'2147483648 for shape \[2147483648, 2, 1\]\)'):
        sim.aglu_backward_rebuilt(src, k, lam, LAMBDA_MIN, src, None, None,
                                  None, None, True, True)
    assert cuda_sim.launched() == []
