"""rebuilt_backward: the APA / AGLU backward at an input given as
``src * scale + shift + other * other_scale`` equals autograd through the
rebuilt input and the op (kernel path, torch fallback, parameter chain)."""
import pytest
import torch

from mmact.ops import aglu, apa, backends
from mmact.ops.apa import rebuild_input, rebuilt_backward
from mmact.ops.apa.dispatch import rebuilt_implementation
from mmact.ops.cpu_build import extension

OPS = {'apa': apa, 'aglu': aglu}
LAMBDA_MIN = 0.05


def _case(dtype, nk, nl, spatial_scale=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    n, c, h, w = 2, 8, 16, 16
    src = torch.randn(n, c, h, w, generator=g).to(dtype)
    # attention weights (N, C, 1, 1); per position: not a kernel case
    scale_shape = (n, c, h, w) if spatial_scale else (n, c, 1, 1)
    scale = (torch.rand(scale_shape, generator=g) + 0.5).to(dtype)
    shift = torch.randn(1, c, 1, 1, generator=g).to(dtype)
    other = torch.randn(n, c, h, w, generator=g).to(dtype)
    o_scale = (torch.rand(1, c, 1, 1, generator=g) + 0.5).to(dtype)
    kappa = (torch.rand(nk, generator=g) + 0.5).to(dtype).requires_grad_()
    lam = torch.rand(nl, generator=g).to(dtype) + 0.2
    lam[:2] = torch.tensor([LAMBDA_MIN, LAMBDA_MIN / 2], dtype=dtype)[:nl]
    go = torch.randn(n, c, h, w, generator=g).to(dtype)
    return (src, scale, shift, other, o_scale), kappa, lam.requires_grad_(), go


def _autograd(name, sources, kappa, lam, go):
    z = rebuild_input(*sources).requires_grad_()
    kappa = kappa.detach().requires_grad_()
    lam = lam.detach().requires_grad_()
    OPS[name](z, kappa, lam, LAMBDA_MIN).backward(go)
    return z.grad, kappa.grad, lam.grad


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('nk,nl', [(1, 1), (8, 8), (8, 1), (1, 8)])
@pytest.mark.parametrize('fused', [False, True])
def test_matches_autograd(name, nk, nl, fused, mmact_ops):
    """float32 CPU sources take the fused C kernel (its one call seen),
    float64 ones the torch rebuild: both give autograd's gradients."""
    if fused and extension() is None:
        pytest.skip('no C++ compiler or ninja: no fused CPU kernel')
    dtype = torch.float32 if fused else torch.float64
    sources, kappa, lam, go = _case(dtype, nk, nl)
    assert rebuilt_implementation(go, kappa, lam, 1,
                                  *sources) == ('op' if fused else 'rebuild')
    with mmact_ops() as ran:
        got = rebuilt_backward(name, go, kappa, lam, LAMBDA_MIN, 1, *sources)
    assert ran == ([f'mmact::{name}_backward_rebuilt'] if fused else [])
    want = _autograd(name, sources, kappa, lam, go)
    tol = dict(rtol=1e-4, atol=1e-5) if fused else dict(rtol=1e-10, atol=1e-12)
    for a, b, what in zip(got, want, ('grad_z', 'grad_kappa', 'grad_l')):
        assert a.shape == b.shape and a.dtype == b.dtype, what
        torch.testing.assert_close(a, b, msg=what, **tol)
    # the clamp passes lambda's gradient only strictly above lambda_min
    assert not got[2][:2].any()


def test_torch_fallback(mmact_ops):
    """Without the kernel, and for a scale the kernel cannot index
    (per position), z is rebuilt with torch: same gradients."""
    sources, kappa, lam, go = _case(torch.float32, 8, 8, seed=1)
    want = _autograd('aglu', sources, kappa, lam, go)
    with backends.using(cpu_kernels=False), mmact_ops() as ran:
        assert rebuilt_implementation(go, kappa, lam, 1, *sources) == 'rebuild'
        got = rebuilt_backward('aglu', go, kappa, lam, LAMBDA_MIN, 1, *sources)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    sources, kappa, lam, go = _case(torch.float32, 8, 8, True, seed=2)
    assert rebuilt_implementation(go, kappa, lam, 1, *sources) == 'rebuild'
    with mmact_ops() as more:
        got = rebuilt_backward('apa', go, kappa, lam, LAMBDA_MIN, 1, *sources)
    want = _autograd('apa', sources, kappa, lam, go)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert ran == [] == more


def test_frozen_parameters_and_bad_name():
    sources, kappa, lam, go = _case(torch.float64, 1, 1)
    gz, gk, gl = rebuilt_backward('apa', go, kappa.detach(), lam.detach(),
                                  LAMBDA_MIN, 1, sources[0])
    assert gk is None and gl is None
    torch.testing.assert_close(
        gz,
        _autograd('apa', sources[:1], kappa, lam, go)[0],
        rtol=1e-10,
        atol=1e-12)
    with pytest.raises(ValueError, match="'apa' or 'aglu'"):
        rebuilt_backward('relu', go, kappa, lam, LAMBDA_MIN, 1, sources[0])


@pytest.mark.parametrize('name', ['apa', 'aglu'])
def test_lambda_at_its_floor_gets_no_gradient_on_either_path(name):
    """At ``lambda == lambda_min`` the clamp is active: the plain backward
    (autograd through ``clamp_lambda``) and the rebuilt one both give 0
    there, on every torch (``Tensor.clamp`` gives 1 on torch 2.1, 0 on
    newer torch), and the gradient just above the floor."""
    sources, kappa, _, go = _case(torch.float64, 3, 3)
    sources = tuple(t[:, :3].contiguous() for t in sources)
    lam = torch.tensor([LAMBDA_MIN, LAMBDA_MIN * (1 + 1e-9), 0.5],
                       dtype=torch.float64,
                       requires_grad=True)
    go = go[:, :3].contiguous()
    rebuilt = rebuilt_backward(name, go, kappa, lam, LAMBDA_MIN, 1,
                               *sources)[2]
    plain = _autograd(name, sources, kappa, lam, go)[2]
    torch.testing.assert_close(rebuilt, plain, rtol=1e-10, atol=0)
    assert plain[0] == 0 and (plain[1:] != 0).all()


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_half_sources_are_rebuilt_with_torch(dtype, mmact_ops):
    """Half-precision sources never reach the rebuilding C kernel (it reads
    float32); the input is rebuilt with torch and the torch backward runs
    on it: the same gradients as autograd."""
    sources, kappa, lam, go = _case(torch.float32, 8, 8, seed=3)
    sources = tuple(t.to(dtype) for t in sources)
    assert rebuilt_implementation(go.to(dtype), kappa, lam, 1,
                                  *sources) == 'rebuild'
    with mmact_ops() as ran:
        got = rebuilt_backward('aglu', go.to(dtype), kappa, lam, LAMBDA_MIN, 1,
                               *sources)
    want = _autograd('aglu', sources, kappa, lam, go.to(dtype))
    assert got[0].dtype == dtype and ran == []
    for a, b in zip(got, want):
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)
