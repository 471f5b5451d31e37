"""The fused float32 C kernel of FleS against the float64 composite, as the
torch operator ``mmact::fles`` (``op``) and through ctypes (``c``)."""
import importlib

import pytest
import torch

from mmact.ops import backends
from mmact.ops.cpu_build import supported_isas
from mmact.ops.fles import (fles_fused, fles_mlp_scales, fles_reference,
                            fles_shared_mlp_scales, window_geometry)
from mmact.ops.fles.cpu_kernel import (build_fles_kernel, get_fles_kernel,
                                       get_fles_operator)

fused_mod = importlib.import_module('mmact.ops.fles.fused')

pytestmark = pytest.mark.skipif(
    get_fles_kernel() is None, reason='no C compiler: torch path only')

GEOMS = [
    # tiles with cut border tiles, exact tiles, global; whole-row tiles
    # (one window per row: the kernels' contiguous-run path) with a cut band
    (11, 17, (3, 5)),
    (6, 10, (3, 5)),
    (7, 9, None),
    (10, 6, (4, 6)),
]

LAYOUTS = {'per_head': fles_mlp_scales, 'shared': fles_shared_mlp_scales}


@pytest.fixture(params=['op', 'c'])
def path(request, monkeypatch):
    """Run a test through the torch operator and through ctypes."""
    if request.param == 'op' and get_fles_operator() is None:
        pytest.skip('no C++ compiler or ninja: the operator is not built')
    if request.param == 'c':
        monkeypatch.setattr(fused_mod, 'get_fles_operator', lambda: None)
    return request.param


def _params(c, hidden, seed, layout='per_head'):
    g = torch.Generator().manual_seed(seed)
    trunk = (2, hidden) if layout == 'per_head' else (hidden, )
    return [
        torch.randn(*trunk, c, generator=g) * 0.5,
        torch.randn(*trunk, generator=g) * 0.5,
        torch.randn(2, c, hidden, generator=g) * 0.5,
        torch.randn(2, c, generator=g) * 0.5,
    ]


def _grads(x, params, geom, gate, mode, go, fn, layout='per_head'):
    x = x.detach().clone().requires_grad_()
    params = [p.detach().clone().requires_grad_() for p in params]
    y = fn(x, geom, params, gate=gate, mode=mode, scale_fn=LAYOUTS[layout])
    grads = torch.autograd.grad(y, [x] + params, go.to(y.dtype))
    return [y.detach()] + list(grads)


def _spy(monkeypatch, path, kernel):
    """Records the calls of the implementation ``path`` names."""
    calls = []
    if path == 'op':
        real = get_fles_operator()
        monkeypatch.setattr(fused_mod, 'get_fles_operator',
                            lambda: lambda *a: calls.append(1) or real(*a))
    else:
        monkeypatch.setattr(fused_mod, 'get_fles_operator', lambda: None)
        real = kernel.apply
        monkeypatch.setattr(kernel, 'apply',
                            lambda *a: calls.append(1) or real(*a))
    return calls


def _check(kernel,
           monkeypatch,
           h,
           w,
           window,
           gate,
           mode,
           seed=0,
           path='c',
           layout='per_head'):
    monkeypatch.setattr(fused_mod, 'get_fles_kernel', lambda: kernel)
    g = torch.Generator().manual_seed(seed)
    c = 6
    x = torch.randn(3, c, h, w, generator=g) * 2
    x[0, 0, 0, :4] = torch.tensor([0.0, -100.0, 100.0, -0.0])
    # a band of windows with no value >= 0: the positive indicator's
    # divisor (the count of x >= 0) is floored at 1
    band = window[0] if window else h
    x[0, 1, :band] = -x[0, 1, :band].abs() - 0.1
    go = torch.randn(3, c, h, w, generator=g)
    params = _params(c, 3, seed, layout)
    geom = window_geometry(h, w, window)
    calls = _spy(monkeypatch, path, kernel)
    got = _grads(x, params, geom, gate, mode, go, fles_fused, layout)
    assert calls, f'the {path} implementation was not used'
    want = _grads(x.double(), [p.double() for p in params], geom, gate, mode,
                  go.double(), fles_reference, layout)
    names = ['out', 'grad_x', 'fc1_w', 'fc1_b', 'fc2_w', 'fc2_b']
    for a, b, name in zip(got, want, names):
        assert a.dtype == torch.float32
        # float32 sums over the map: errors scale with the largest value
        # (1e-5 of it seen in the MLP's weight gradients, which sum
        # products with inputs of up to 100 over every window)
        atol = 1e-5 + 2e-5 * float(b.abs().max())
        torch.testing.assert_close(
            a, b.float(), rtol=1e-4, atol=atol, msg=f'{gate} {mode} {name}')


@pytest.mark.parametrize('h,w,window', GEOMS)
@pytest.mark.parametrize('gate',
                         ['sigmoid', 'tanh_gate', 'erf', 'tanh_softplus'])
@pytest.mark.parametrize('mode', ['positive', 'mean'])
@pytest.mark.parametrize('layout', ['per_head', 'shared'])
def test_kernel_matches_float64(h, w, window, gate, mode, layout, path,
                                monkeypatch):
    _check(
        get_fles_kernel(),
        monkeypatch,
        h,
        w,
        window,
        gate,
        mode,
        path=path,
        layout=layout)


@pytest.mark.parametrize('isa', ['avx512', 'avx2', 'portable'])
def test_every_isa_build_matches_float64(isa, tmp_path, monkeypatch):
    if isa not in supported_isas():
        pytest.skip(f'this CPU cannot run {isa} code (no such hardware)')
    kernel = build_fles_kernel(isa, cache_dir=str(tmp_path))
    for gate in ('sigmoid', 'erf', 'tanh_softplus'):
        _check(kernel, monkeypatch, 11, 17, (3, 5), gate, 'positive', seed=1)
        _check(kernel, monkeypatch, 7, 9, None, gate, 'positive', seed=1)


@pytest.mark.parametrize('mode', ['softplus', 'quasi_linear'])
def test_other_indicators_mix_torch_and_kernel(mode, monkeypatch):
    """Indicators the kernel lacks run in torch; the gate still in C."""
    monkeypatch.setattr(fused_mod, 'get_fles_kernel', get_fles_kernel)
    g = torch.Generator().manual_seed(2)
    c = 4
    x = torch.randn(2, c, 8, 9, generator=g)
    go = torch.randn(2, c, 8, 9, generator=g)
    params = _params(c, 2, 2)
    gamma, beta = torch.rand(c, generator=g) + 0.5, torch.randn(c, generator=g)
    geom = window_geometry(8, 9, (3, 4))

    def run(x, params, gamma, beta, fn):
        leaves = [
            t.detach().clone().requires_grad_()
            for t in [x, gamma, beta, *params]
        ]
        y = fn(
            leaves[0],
            geom,
            leaves[3:],
            mode=mode,
            gamma=leaves[1],
            beta=leaves[2])
        return [y.detach()] + list(
            torch.autograd.grad(y, leaves, go.to(y.dtype), allow_unused=True))

    got = run(x, params, gamma, beta, fles_fused)
    want = run(x.double(), [p.double() for p in params], gamma.double(),
               beta.double(), fles_reference)
    for a, b in zip(got, want):
        if b is None:
            assert a is None
            continue
        torch.testing.assert_close(a, b.float(), rtol=1e-4, atol=1e-5)


def test_dispatch(path):
    x = torch.randn(2, 3, 8, 8)
    tiles = window_geometry(8, 8, (3, 3))
    params = _params(3, 2, 0)

    def plan(x,
             geom,
             gate='sigmoid',
             mode='positive',
             scale_fn=None,
             params=params):
        return fused_mod._implementation(x, geom, gate, mode, scale_fn
                                         or fles_mlp_scales, params)

    def parts(p):
        return p.name, p.c_stats, p.c_gate

    whole = 'operator' if path == 'op' else 'c'
    assert plan(x, tiles).name == whole
    assert plan(x, window_geometry(8, 8)).name == whole
    assert plan(x, tiles, scale_fn=fles_shared_mlp_scales).name == whole
    # what the operator lacks: the pixel passes in C, the rest in torch
    assert parts(plan(x, tiles, scale_fn=lambda *a: a)) == ('c', True, True)
    assert parts(plan(x, tiles, params=[p.double()
                                        for p in params])) == ('c', True, True)
    assert parts(plan(x, tiles, 'sigmoid', 'softplus')) == ('c', False, True)
    assert plan(x, window_geometry(8, 8, (3, 3), (2, 2))).name == 'torch'
    assert plan(x.double(), tiles).name == 'torch'
    with backends.using(cpu_kernels=False):
        assert plan(x, tiles).name == 'torch'
