"""norm_act / residual_act with APA and AGLU, whose backward rebuilds the
input itself: gradients of the block inputs and of every parameter equal
the plain composition's (float64: torch rebuild; float32: fused kernel)."""
import copy
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

import mmact  # noqa: F401
from mmact.models.activations import AGLU, APA
from mmact.models.backbones.recompute import norm_act, residual_act
from mmact.models.layers import APASELayer
from mmact.ops.cpu_build import extension

C, CIN = 16, 8
LAMBDA_MIN = 1e-2

DTYPES = [torch.float64]
if extension() is not None:  # else the fused kernel is not built
    DTYPES.append(torch.float32)


def _act(cls, params, dtype):
    """An activation with shared / per-channel / mixed parameters; some
    lambdas below or at the clamp (zero gradient there)."""
    nk = C if params in ('channel', 'mixed') else 1
    nl = C if params == 'channel' else 1
    act = cls(num_parameters=max(nk, nl), lambda_min=LAMBDA_MIN)
    g = torch.Generator().manual_seed(1)
    act.kappa_param = nn.Parameter(torch.rand(nk, generator=g) + 0.5)
    lam = torch.rand(nl, generator=g) + 0.2
    if params == 'channel':
        lam[:3] = torch.tensor([LAMBDA_MIN / 2, LAMBDA_MIN, 0.0])
    elif params == 'clamped':
        lam[:] = LAMBDA_MIN / 2
    act.lambda_param = nn.Parameter(lam)
    return act.to(dtype)


def _bn(channels, train, dtype):
    bn = nn.BatchNorm2d(channels)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5), bn.bias.uniform_(-0.5, 0.5)
        bn.running_mean.uniform_(-0.5, 0.5), bn.running_var.uniform_(0.5, 2)
    return bn.to(dtype).train(train)


def _grads(fn, modules, inputs, go):
    inputs = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*inputs)
    out.backward(go)
    params = [p for m in modules for p in m.parameters()]
    return [out.detach()] + [t.grad for t in inputs] + [
        torch.zeros_like(p) if p.grad is None else p.grad for p in params
    ]


def _compare(got, want, dtype):
    for i, (a, b) in enumerate(zip(got, want)):
        if dtype == torch.float64:
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12, msg=i)
        else:  # kernel float32 (other summation order) vs torch float32
            torch.testing.assert_close(a, b, rtol=1e-4, atol=2e-5, msg=i)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('train', [True, False])
@pytest.mark.parametrize('params', ['shared', 'channel', 'mixed', 'clamped'])
@pytest.mark.parametrize('cls', [APA, AGLU])
def test_norm_act(cls, params, train, dtype):
    torch.manual_seed(0)
    act, bn = _act(cls, params, dtype), _bn(C, train, dtype)
    x = torch.randn(2, C, 16, 16, dtype=dtype)
    go = torch.randn_like(x)
    mods = (act, bn)
    fast = copy.deepcopy(mods)
    want = _grads(lambda t: act(bn(t)), mods, [x], go)
    got = _grads(lambda t: norm_act(fast[1], fast[0], t), fast, [x], go)
    _compare(got, want, dtype)
    if params == 'clamped':
        assert not got[-3].any()  # lambda's gradient is cut by the clamp


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('train', [True, False])
@pytest.mark.parametrize('downsample', [False, True])
@pytest.mark.parametrize('attention', [False, True])
@pytest.mark.parametrize('params', ['shared', 'channel', 'mixed'])
@pytest.mark.parametrize('cls', [APA, AGLU])
def test_residual_act(cls, params, attention, downsample, train, dtype):
    torch.manual_seed(0)
    act, norm = _act(cls, params, dtype), _bn(C, train, dtype)
    # no dropout: the two paths would draw different masks
    attn = APASELayer(C, dropout=0.0).to(dtype) if attention else None
    ds = None
    if downsample:
        conv = nn.Conv2d(CIN, C, 1, bias=False).to(dtype)
        ds = nn.Sequential(conv, _bn(C, train, dtype))
    conv_out = torch.randn(2, C, 16, 16, dtype=dtype)
    x = torch.randn(2, CIN if downsample else C, 16, 16, dtype=dtype)
    go = torch.randn_like(conv_out)
    mods = [m for m in (act, norm, attn, ds) if m is not None]

    def plain(c, s):
        u = norm(c)
        u = u if attn is None else attn(u)
        return act(u + (s if ds is None else ds(s)))

    fast = copy.deepcopy(mods)
    block = SimpleNamespace(
        attn=fast[2] if attention else None,
        downsample=fast[-1] if downsample else None)

    def recomputed(c, s):
        return residual_act(block, fast[0], fast[1], c, s)

    want = _grads(plain, mods, [conv_out, x], go)
    got = _grads(recomputed, fast, [conv_out, x], go)
    _compare(got, want, dtype)
    for a, b in zip(mods, fast):  # running statistics updated once
        for (name, s), t in zip(a.state_dict().items(),
                                b.state_dict().values()):
            torch.testing.assert_close(s, t, msg=name)


@pytest.mark.parametrize('dtype', DTYPES)
def test_frozen_parameter(dtype):
    """A frozen kappa gets no gradient; lambda's and the input's are those
    of the plain composition."""
    act, bn = _act(AGLU, 'channel', dtype), _bn(C, True, dtype)
    act.kappa_param.requires_grad_(False)
    x = torch.randn(2, C, 16, 16, dtype=dtype)
    go = torch.randn_like(x)
    fast = copy.deepcopy((act, bn))
    want = _grads(lambda t: act(bn(t)), (act, ), [x], go)
    got = _grads(lambda t: norm_act(fast[1], fast[0], t), fast[:1], [x], go)
    assert act.kappa_param.grad is None and fast[0].kappa_param.grad is None
    _compare(got, want, dtype)
