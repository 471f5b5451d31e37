"""FleS's fused float32 CPU kernels against the float64 composite: the whole
op as the torch operator ``mmact::fles`` (plan ``operator``) and the pixel
passes around the torch MLP (plan ``passes``), for the host's build here
and for every ISA's build in a subprocess of its own."""
import importlib.util
import os
import os.path as osp
import subprocess
import sys

import pytest
import torch

from mmact.ops import backends
from mmact.ops.cpu_build import (ISAS, default_cache_dir, host_isa,
                                 supported_isas)
from mmact.ops.fles import (cpu, fles_fused, fles_mlp_scales, fles_reference,
                            fles_shared_mlp_scales, window_geometry)
from mmact.ops.fles.cpu import KERNEL_GATES, LOOP_MACS, operator_entry
from mmact.ops.fles.dispatch import implementation

pytestmark = pytest.mark.skipif(
    operator_entry() is None,
    reason='no C++ compiler or ninja: the CPU extension is not built')

GEOMS = [
    # tiles with cut border tiles, exact tiles, global; whole-row tiles
    # (one window per row: the kernels' contiguous-run path) with a cut band
    (11, 17, (3, 5)),
    (6, 10, (3, 5)),
    (7, 9, None),
    (10, 6, (4, 6)),
]


def _per_head(ind, *params):
    """:func:`fles_mlp_scales` under another name: a scale function the
    operator does not evaluate, so the ``passes`` plan runs."""
    return fles_mlp_scales(ind, *params)


def _shared(ind, *params):
    """:func:`fles_shared_mlp_scales` under another name (``passes``)."""
    return fles_shared_mlp_scales(ind, *params)


LAYOUTS = {'per_head': fles_mlp_scales, 'shared': fles_shared_mlp_scales}
PASSES_LAYOUTS = {'per_head': _per_head, 'shared': _shared}
#: The pass operators, in the order a training step calls them.
PASSES = [
    f'mmact::fles_{name}'
    for name in ('stats', 'apply', 'gate_backward', 'indicator_backward')
]
OPERATOR = ['mmact::fles', 'mmact::fles_backward']


@pytest.fixture(params=['operator', 'passes'])
def path(request):
    """Run a test through the C++ operator and through the C passes."""
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


def _grads(x, params, geom, gate, mode, go, fn, scale_fn):
    x = x.detach().clone().requires_grad_()
    params = [p.detach().clone().requires_grad_() for p in params]
    y = fn(x, geom, params, gate=gate, mode=mode, scale_fn=scale_fn)
    grads = torch.autograd.grad(y, [x] + params, go.to(y.dtype))
    return [y.detach()] + list(grads)


def _check(mmact_ops,
           h,
           w,
           window,
           gate,
           mode,
           seed=0,
           path='operator',
           layout='per_head'):
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
    scale_fn = (LAYOUTS if path == 'operator' else PASSES_LAYOUTS)[layout]
    with mmact_ops() as ran:
        got = _grads(x, params, geom, gate, mode, go, fles_fused, scale_fn)
    # the operator runs alone; the passes run each once, all in C
    assert ran == (OPERATOR if path == 'operator' else PASSES)
    want = _grads(x.double(), [p.double() for p in params], geom, gate, mode,
                  go.double(), fles_reference, LAYOUTS[layout])
    names = ['out', 'grad_x', 'fc1_w', 'fc1_b', 'fc2_w', 'fc2_b']
    for a, b, name in zip(got, want, names):
        assert a.dtype == torch.float32
        # float32 sums over the map: errors scale with the largest value
        # (1e-5 of it seen in the MLP's weight gradients, which sum
        # products with inputs of up to 100 over every window)
        atol = 1e-5 + 2e-5 * float(b.abs().max())
        torch.testing.assert_close(
            a,
            b.float(),
            rtol=1e-4,
            atol=atol,
            msg=f'{path} {gate} {mode} {name}')


@pytest.mark.parametrize('h,w,window', GEOMS)
@pytest.mark.parametrize('gate', KERNEL_GATES)
@pytest.mark.parametrize('mode', ['positive', 'mean'])
@pytest.mark.parametrize('layout', ['per_head', 'shared'])
def test_kernel_matches_float64(h, w, window, gate, mode, layout, path,
                                mmact_ops):
    _check(mmact_ops, h, w, window, gate, mode, path=path, layout=layout)


def _isa_checks(isa: str, cache_dir: str) -> None:
    """Every FleS check of one ISA's build, in a process whose extension is
    that build (``MMACT_CPU_ISA``, ``MMACT_CACHE_DIR``): another ISA's
    build cannot be loaded beside the host's (its torch operators would be
    registered twice)."""
    from mmact.ops.cpu_build import extension
    module = extension()
    assert module is not None
    assert osp.dirname(module.__file__).startswith(
        osp.join(cache_dir, f'mmact_cpu_{isa}_')), module.__file__
    # the recorder of tests/test_ops/conftest.py (no fixtures here)
    spec = importlib.util.spec_from_file_location(
        'test_ops_conftest',
        osp.join(osp.dirname(__file__), '..', 'conftest.py'))
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    record = conftest.recording
    for path in ('operator', 'passes'):
        for gate in KERNEL_GATES:
            _check(record, 11, 17, (3, 5), gate, 'positive', 1, path)
            _check(record, 7, 9, None, gate, 'positive', 1, path)
        _check(record, 10, 6, (4, 6), 'erf', 'mean', 1, path, 'shared')
    print(f'{isa}: checked')


_ISA_RUN = '''
import importlib.util
import sys
spec = importlib.util.spec_from_file_location('fles_isa_checks', sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module._isa_checks(sys.argv[2], sys.argv[3])
'''


@pytest.mark.parametrize('isa', [
    isa if isa == host_isa() else pytest.param(isa, marks=pytest.mark.slow)
    for isa in ISAS
])
def test_every_isa_build_matches_float64(isa):
    """Each ISA's build against float64, through the operator and the
    passes: the host's in this process, every other in a subprocess of its
    own, built into the cache in force (shared with the APA ISA test)."""
    if isa not in supported_isas():
        pytest.skip(f'this CPU cannot run {isa} code (no such hardware)')
    if isa == host_isa():
        _isa_checks(isa, default_cache_dir())
        return
    env = dict(os.environ, MMACT_CPU_ISA=isa)
    env.pop('MMACT_DISABLE_CPU_KERNEL', None)
    args = [
        sys.executable, '-c', _ISA_RUN, __file__, isa,
        default_cache_dir()
    ]
    run = subprocess.run(
        args, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert run.stdout.splitlines()[-1] == f'{isa}: checked'


@pytest.mark.parametrize('mode', ['softplus', 'quasi_linear'])
def test_other_indicators_mix_torch_and_kernel(mode, mmact_ops):
    """Indicators the kernels lack run in torch; the gate still in C."""
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

    with mmact_ops() as ran:
        got = run(x, params, gamma, beta, fles_fused)
    assert ran == ['mmact::fles_apply', 'mmact::fles_gate_backward']
    want = run(x.double(), [p.double() for p in params], gamma.double(),
               beta.double(), fles_reference)
    for a, b in zip(got, want):
        if b is None:
            assert a is None
            continue
        torch.testing.assert_close(a, b.float(), rtol=1e-4, atol=1e-5)


class _Subclass(torch.Tensor):
    """A tensor subclass: neither the operator nor the passes take it."""


def test_dispatch():
    x = torch.randn(2, 3, 8, 8)
    tiles = window_geometry(8, 8, (3, 3))
    params = _params(3, 2, 0)

    def plan(x,
             geom,
             gate='sigmoid',
             mode='positive',
             scale_fn=None,
             params=params):
        return implementation(x, geom, gate, mode, scale_fn or fles_mlp_scales,
                              params)

    def parts(p):
        return p.name, p.c_stats, p.c_gate

    whole = plan(x, tiles)
    assert whole.name == 'operator' and whole.operator is operator_entry()
    assert plan(x, window_geometry(8, 8)).name == 'operator'
    assert plan(x, tiles, scale_fn=fles_shared_mlp_scales).name == 'operator'
    assert plan(
        x, tiles,
        params=[torch.nn.Parameter(p) for p in params]).name == 'operator'
    # the operator's loops take n * grid * C * hidden * 2 multiply-adds up
    # to LOOP_MACS (here 2 * 9 * 3 * hidden * 2); a larger MLP: the passes
    hidden = LOOP_MACS // (2 * 9 * 3 * 2)
    assert plan(x, tiles, params=_params(3, hidden, 0)).name == 'operator'
    assert cpu.loop_sized(x, tiles, hidden)
    assert not cpu.loop_sized(x, tiles, hidden + 1)
    assert parts(plan(x, tiles, params=_params(3, hidden + 1,
                                               0))) == ('passes', True, True)
    # what the operator lacks: the pixel passes in C, the rest in torch
    assert parts(plan(x, tiles,
                      scale_fn=lambda *a: a)) == ('passes', True, True)
    assert parts(plan(x, tiles,
                      params=[p.double()
                              for p in params])) == ('passes', True, True)
    assert parts(plan(x, tiles, 'sigmoid',
                      'softplus')) == ('passes', False, True)
    assert parts(plan(x, tiles, 'erf',
                      'quasi_linear')) == ('passes', False, True)
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        assert plan(x, tiles).name == 'composite'
    with backends.using(composite=True):
        assert plan(x, tiles).name == 'composite'
    # no C kernel at all
    assert plan(x, window_geometry(8, 8, (3, 3), (2, 2))).name == 'torch'
    assert plan(x.double(), tiles).name == 'torch'
    assert plan(x.transpose(2, 3), tiles).name == 'torch'
    assert plan(x.as_subclass(_Subclass), tiles).name == 'torch'
    with backends.using(cpu_kernels=False):
        assert plan(x, tiles).name == 'torch'
