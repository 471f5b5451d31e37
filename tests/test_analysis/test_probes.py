import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from scipy import integrate

from mmact.analysis.probes import (AttentionRecorder, FleSRecorder,
                                   activation_curve, activation_parameters,
                                   expected_output, find_modules)
from mmact.models.activations import AGLU, APA, IGLU, AReLU, FleS
from mmact.models.layers import APASELayer, SEAttention


def normal_expectation(f):
    density = lambda z: math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)  # noqa
    return integrate.quad(lambda z: f(z) * density(z), -12, 12,
                          points=[0.0], limit=200)[0]


def test_find_modules_in_registration_order():
    model = nn.Sequential(AGLU(), nn.Conv2d(2, 2, 1), APA(), AReLU(),
                          nn.ReLU(), IGLU())
    names = [name for name, _ in find_modules(model)]
    assert names == ['0', '2', '3', '5']
    assert [n for n, _ in find_modules(model, (APA, ))] == ['2']
    model.append(FleS(channels=2, reduction=1))
    assert [n for n, _ in find_modules(model, pointwise=False)] == ['6']
    assert [n for n, _ in find_modules(model, pointwise=True)] == names


def test_activation_parameters_as_used_by_forward():
    aglu = AGLU(num_parameters=3, kappa_init=1.5, lambda_init=0.4)
    with torch.no_grad():
        aglu.lambda_param[0] = -1.0  # clamped to lambda_min in forward
    p = activation_parameters(aglu)
    np.testing.assert_allclose(p['kappa'], [1.5] * 3)
    np.testing.assert_allclose(p['lambda'], [1e-4, 0.4, 0.4], rtol=1e-6)
    arelu = AReLU(alpha=1.5, beta=0.3)
    p = activation_parameters(arelu)
    np.testing.assert_allclose(p['alpha'], [0.99])
    np.testing.assert_allclose(p['beta'], [0.3], rtol=1e-6)
    learned = IGLU(sigma=2.0, learnable_sigma=True)
    assert activation_parameters(learned)['sigma'] == [2.0]
    assert activation_parameters(IGLU(sigma=2.0)) == {}  # fixed: not learned
    assert activation_parameters(FleS(channels=8, reduction=4)) == {}
    with pytest.raises(TypeError, match='not a learnable activation'):
        activation_parameters(nn.ReLU())


def test_activation_curve_matches_formula():
    z = torch.linspace(-4, 4, 81)
    silu = AGLU(kappa_init=1.0, lambda_init=1.0)
    torch.testing.assert_close(activation_curve(silu, z), F.silu(z)[None])
    per_channel = AGLU(num_parameters=3, kappa_init=(0.5, 2.0))
    curves = activation_curve(per_channel, z)
    assert curves.shape == (3, 81)
    kappa = per_channel.kappa_param.detach()
    lam = per_channel.lambda_param.detach()
    # float64 reference: in float32 the power -1 / lambda amplifies the
    # base's rounding, 5e-5 relative for about 1 random init in 150
    k64, l64, z64 = kappa.double()[:, None], lam.double()[:, None], z.double()
    expected = z64 * (l64 * torch.exp(-k64 * z64) + 1)**(-1 / l64)
    torch.testing.assert_close(
        curves.double(), expected, rtol=1e-5, atol=1e-6)
    tokens = AGLU(num_parameters=3, channel_dim='NLC')
    with torch.no_grad():
        tokens.kappa_param.copy_(kappa)
        tokens.lambda_param.copy_(lam)
    torch.testing.assert_close(activation_curve(tokens, z), curves)
    with pytest.raises(TypeError, match='not pointwise'):
        activation_curve(FleS(channels=8, reduction=4), z)
    with pytest.raises(TypeError, match='not a learnable activation'):
        activation_curve(nn.SiLU(), z)


def test_expected_output_against_quadrature():
    silu = AGLU(kappa_init=1.0, lambda_init=1.0)
    reference = normal_expectation(lambda z: z / (1 + math.exp(-z)))
    assert expected_output(silu)[0] == pytest.approx(reference, abs=1e-6)
    assert reference == pytest.approx(0.2066, abs=1e-4)
    # AReLU: E = (1 + sigmoid(beta) - C(alpha)) / sqrt(2 pi)
    arelu = AReLU(alpha=0.3, beta=0.5)
    exact = (1 + 1 / (1 + math.exp(-0.5)) - 0.3) / math.sqrt(2 * math.pi)
    assert expected_output(arelu)[0] == pytest.approx(exact, abs=1e-5)
    # a very sharp IGLU is ReLU: E = 1 / sqrt(2 pi)
    assert expected_output(IGLU(sigma=1e4))[0] == pytest.approx(
        1 / math.sqrt(2 * math.pi), abs=1e-4)
    # APA gate with kappa = lambda = 1 is the sigmoid: E = 1/2 by symmetry
    # (float32 curve from the C kernel: relative error 2e-7 per value)
    assert expected_output(APA(kappa_init=1.0, lambda_init=1.0))[0] == \
        pytest.approx(0.5, abs=1e-7)


class TwoAttention(nn.Module):

    def __init__(self):
        super().__init__()
        self.se = SEAttention(16, ratio=4)
        self.apa = APASELayer(16, ratio=4)

    def forward(self, x):
        return self.apa(self.se(x))


def test_attention_recorder_records_gate_outputs_and_cleans_up():
    torch.manual_seed(0)
    model = TwoAttention().eval()
    x = torch.randn(3, 16, 5, 5)
    with AttentionRecorder(model) as recorder:
        model(x)
        model(x[:2])
    weights = recorder.weights()
    assert list(weights) == ['se', 'apa']
    assert weights['se'].shape == (5, 16)
    expected = model.se.weights(x).reshape(3, 16)
    np.testing.assert_allclose(weights['se'][:3], expected.detach().numpy(),
                               rtol=1e-6)
    assert ((weights['apa'] > 0) & (weights['apa'] <= 1)).all()
    assert not model.se.gate._forward_hooks
    assert not model.apa.gate._forward_hooks


def test_attention_recorder_reads_mmpretrain_se_layer():
    from mmpretrain.models.utils import SELayer
    layer = SELayer(16, ratio=4).eval()
    x = torch.randn(2, 16, 4, 4)
    with AttentionRecorder(nn.Sequential(layer)) as recorder:
        out = layer(x)
    a = recorder.weights()['0']
    np.testing.assert_allclose(
        a[:, :, None, None] * x.numpy(), out.detach().numpy(), rtol=1e-5)


def test_attention_recorder_needs_attention():
    with pytest.raises(ValueError, match='no channel-attention layer'):
        AttentionRecorder(nn.Sequential(nn.ReLU()))


def test_fles_scales_reproduce_forward():
    torch.manual_seed(0)
    layer = FleS(channels=8, reduction=2, window_size=(3, 4), stride=2)
    with torch.no_grad():  # leave the identity-like init
        layer.fc2_weight.normal_(0, 0.5)
    x = torch.randn(2, 8, 7, 9)
    k_ve, k_ho, rho = layer.scales(x)
    assert k_ve.shape == k_ho.shape == rho.shape == x.shape
    torch.testing.assert_close(k_ve * rho * x, layer(x), rtol=1e-5,
                               atol=1e-6)
    assert k_ve.std() > 0 and k_ho.std() > 0
    tokens = FleS(channels=8, reduction=2)
    k_ve, _, _ = tokens.scales(torch.randn(2, 5, 8))  # (B, L, C)
    assert k_ve.shape == (2, 8, 5, 1)


def test_fles_recorder_at_init():
    torch.manual_seed(0)
    model = nn.Sequential(FleS(channels=8, reduction=2), nn.Identity(),
                          FleS(channels=8, reduction=2))
    x = torch.randn(4, 8, 6, 6) * 3
    with FleSRecorder(model, max_values=50) as recorder:
        model(x)
    s = F.softplus(torch.tensor(0.6)).item()  # every scale at init
    summary = recorder.summary()
    assert list(summary) == ['0', '2']
    first = summary['0']
    assert first['k_ve_mean'] == pytest.approx(s)
    assert first['k_ho_mean'] == pytest.approx(s)
    assert first['k_ve_top10_mean'] == pytest.approx(s)
    expected = (torch.sigmoid(s * x) > 0.9).float().mean().item()
    assert first['saturation'] == pytest.approx(expected)
    assert 0 < expected < 1
    values = recorder.values('k_ve')
    assert values['0'].shape == (50, )
    np.testing.assert_allclose(values['0'], s, rtol=1e-6)
    assert not model[0]._forward_pre_hooks
    with pytest.raises(ValueError, match='no FleS layer'):
        FleSRecorder(nn.Sequential(AGLU()))
