"""recompute_act: same outputs, gradients and BN statistics as the plain
path (float64), less memory saved for backward, fallbacks."""
from collections import Counter

import pytest
import torch
import torch.nn as nn
from mmengine.registry import MODELS

import mmact  # noqa: F401
from mmact.models.activations import AGLU
from mmact.models.backbones import ActResNet
from mmact.models.backbones.recompute import (bn_with_affine,
                                              default_recompute)
from mmact.ops.cpu_build import extension

ACT = dict(type='AGLU') if MODELS.get('AGLU') else dict(type='PReLU')


def _pair(depth, **kw):
    kw = dict(
        act_cfg=ACT, out_indices=(0, 1, 2, 3), zero_init_residual=False, **kw)
    torch.manual_seed(0)
    plain = ActResNet(depth, recompute_act=False, **kw).double()
    fast = ActResNet(depth, recompute_act=True, **kw).double()
    fast.load_state_dict(plain.state_dict())
    for m in list(plain.modules()) + list(fast.modules()):
        if isinstance(m, nn.Dropout):
            m.p = 0.0  # same random mask is not guaranteed across paths
    return plain.train(), fast.train()


@pytest.mark.parametrize('depth,attention',
                         [(50, dict(type='APASELayer')), (50, None),
                          (18, dict(type='SEAttention')),
                          (18, dict(type='ZeroAttentionForTest2'))])
def test_matches_plain_path(depth, attention):
    if attention and attention['type'] == 'ZeroAttentionForTest2':
        # an attention without `weights`: falls back to the plain tail

        @MODELS.register_module(name='ZeroAttentionForTest2', force=True)
        class Half(nn.Module):

            def __init__(self, in_channels):
                super().__init__()

            def forward(self, x):
                return 0.5 * x

    plain, fast = _pair(depth, attention_cfg=attention)
    x = torch.randn(2, 3, 64, 64, dtype=torch.double)
    outs_p, outs_f = plain(x), fast(x)
    for a, b in zip(outs_p, outs_f):
        torch.testing.assert_close(a, b)
    sum(o.square().mean() for o in outs_p).backward()
    sum(o.square().mean() for o in outs_f).backward()
    for (name, p), q in zip(plain.named_parameters(), fast.parameters()):
        torch.testing.assert_close(
            p.grad, q.grad, rtol=1e-9, atol=1e-12, msg=name)
    for (name, a), b in zip(plain.state_dict().items(),
                            fast.state_dict().values()):
        # running stats updated once (to rounding: the fast path adds the
        # attention product and the shortcut in one addcmul)
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-15, msg=name)


def _saved_bytes(model, x):
    seen = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(n for k, n in seen.items() if k not in params), out


def test_saves_less_and_eval_mode_is_untouched():
    plain, fast = _pair(50, attention_cfg=dict(type='APASELayer'))
    plain.float(), fast.float()
    x = torch.randn(1, 3, 64, 64)
    saved_plain, _ = _saved_bytes(plain, x)
    saved_fast, _ = _saved_bytes(fast, x)
    assert saved_fast < 0.8 * saved_plain
    fast.eval()
    with torch.no_grad():
        out = fast(x)
    assert out[-1].shape == (1, 2048, 2, 2)


def test_bn_with_affine_and_fallbacks():
    bn = nn.BatchNorm2d(8).double()
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5), bn.bias.uniform_(-1, 1)
    x = torch.randn(4, 8, 5, 5, dtype=torch.double)
    for mode in (True, False):
        bn.train(mode)
        out, (scale, shift) = bn_with_affine(bn, x)
        torch.testing.assert_close(out, x * scale + shift)
    gn = nn.GroupNorm(2, 8)
    out, affine = bn_with_affine(gn, x.float())
    assert affine is None and out.shape == x.shape
    # GroupNorm backbone: still correct, just no memory saving at act1/act2
    model = ActResNet(
        18, recompute_act=True, norm_cfg=dict(type='GN', num_groups=8))
    model(torch.rand(1, 3, 64, 64))[0].sum().backward()


def test_refuses_one_value_per_channel_as_f_batch_norm_does():
    """A train-mode BN over one value per channel: F.batch_norm raises,
    ``torch.native_batch_norm`` would return a near-constant output."""
    bn = nn.BatchNorm2d(8).train()
    for shape in ((1, 8, 1, 1), (1, 8)):
        x = torch.randn(shape)
        with pytest.raises(ValueError) as expected:
            nn.functional.batch_norm(x, None, None, training=True)
        with pytest.raises(ValueError) as got:
            bn_with_affine(bn, x)
        assert str(got.value) == str(expected.value)
    # the same through a backbone's memory-lean path (a 32 px image is one
    # value per channel in stage 4), as in the plain path
    for recompute in (True, False):
        model = ActResNet(
            50, act_cfg=ACT, recompute_act=recompute).train()
        with pytest.raises(ValueError, match='more than 1 value per channel'):
            model(torch.rand(1, 3, 32, 32))
    bn.eval()  # running statistics: nothing to refuse
    assert bn_with_affine(bn, torch.randn(1, 8, 1, 1))[1] is not None


def test_default_is_memory_lean_unless_in_place():
    assert default_recompute(AGLU())
    # learnable activations never run in place: the flag changes nothing
    assert default_recompute(AGLU(inplace=True))
    assert default_recompute(nn.ReLU())
    assert not default_recompute(nn.ReLU(inplace=True))
    assert ActResNet(18, act_cfg=dict(type='AGLU')).recompute_act
    assert ActResNet(18, act_cfg=dict(type='AGLU', inplace=True)).recompute_act
    assert not ActResNet(18).recompute_act  # in-place ReLU
    assert not ActResNet(
        18, act_cfg=dict(type='AGLU'), recompute_act=False).recompute_act


@pytest.mark.skipif(
    extension() is None,
    reason='no C++ compiler or ninja: no fused CPU kernel')
def test_float32_kernel_path_rebuilds_inside_backward():
    """Recomputed AGLUs run no second forward: their backward is the kernel
    that rebuilds the input itself; gradients equal the plain path's."""
    from torch.profiler import ProfilerActivity, profile
    torch.manual_seed(0)
    kw = dict(act_cfg=dict(type='AGLU'), out_indices=(3, ))
    plain = ActResNet(18, recompute_act=False, **kw).train()
    fast = ActResNet(18, recompute_act=True, **kw).train()
    fast.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 64, 64)
    plain(x)[0].square().mean().backward()
    # the operators' calls, each recorded by the dispatcher (the kernels
    # run inside them): the forward, the backward node, the rebuilt
    # backward
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fast(x)[0].square().mean().backward()
    calls = Counter(e.name for e in prof.events())
    forwards = calls['mmact::aglu']
    plain_bwd = calls['mmact::aglu_backward']
    rebuilt = calls['mmact::aglu_backward_rebuilt']
    # 8 blocks x 2 activations recomputed; the stem keeps its input
    assert (rebuilt, plain_bwd, forwards) == (16, 1, 17)
    for (name, p), q in zip(plain.named_parameters(), fast.parameters()):
        torch.testing.assert_close(
            p.grad, q.grad, rtol=1e-3, atol=1e-5, msg=name)


def test_backward_asks_the_activation_protocol():
    """recompute knows no activation class: a learnable activation's own
    backward_from_sources runs; the protocol's default re-records."""
    from mmact.models.activations.base import (LearnableActivation,
                                               recorded_backward)
    from mmact.models.backbones.recompute import recompute_act

    class Scaled(LearnableActivation, nn.Module):

        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.tensor(2.0, dtype=torch.float64))
            self.calls = 0

        def forward(self, x):
            return x * self.scale

        def backward_from_sources(self, grad_out, params, sources):
            self.calls += 1
            return recorded_backward(self, grad_out, params, sources)

    act = Scaled()
    src = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    scale = torch.rand(1, 3, 1, dtype=torch.float64)
    z = src * scale
    y = recompute_act(act, z, src.detach(), scale)
    y.sum().backward()
    assert act.calls == 1
    assert torch.allclose(src.grad, 2.0 * scale.expand_as(src))
    assert torch.allclose(act.scale.grad, z.detach().sum())


def test_second_derivative_raises():
    """The rebuilt backward records no graph: under create_graph the first
    derivatives are the plain path's and a second derivative raises (in a
    backbone, and through recompute_act alone)."""
    from mmact.models.backbones.recompute import recompute_act
    plain, fast = _pair(18)
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64, requires_grad=True)
    want = torch.autograd.grad(plain(x)[-1].sum(), x)[0]
    got = torch.autograd.grad(fast(x)[-1].sum(), x, create_graph=True)[0]
    torch.testing.assert_close(got, want)
    with pytest.raises(RuntimeError, match='differentiated? twice'):
        got.square().sum().backward()

    act = AGLU().double()
    src = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    scale = torch.rand(1, 3, 1, dtype=torch.float64)
    y = recompute_act(act, src * scale, src.detach(), scale)
    grad = torch.autograd.grad(y.sum(), src, create_graph=True)[0]
    with pytest.raises(
            RuntimeError,
            match='the memory-lean backward cannot '
            'be differentiated twice'):
        grad.square().sum().backward()


def test_forward_mode_ad_takes_the_plain_path():
    """Under forward-mode AD the memory-lean path (a Function without a
    jvp) steps aside: the tangents equal the plain path's."""
    import torch.autograd.forward_ad as fwAD
    plain, fast = _pair(18)
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    tangent = torch.randn_like(x)
    tangents = []
    for model in (plain, fast):
        with fwAD.dual_level():
            out = model(fwAD.make_dual(x, tangent))[-1]
            tangents.append(fwAD.unpack_dual(out).tangent)
    assert tangents[0].abs().sum() > 0
    torch.testing.assert_close(tangents[1], tangents[0])
