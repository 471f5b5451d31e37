"""CBAMAttention / APACBAMAttention: math, switches, registry, backbones."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_plugin_layer
from mmengine.registry import MODELS

import mmact  # noqa: F401
from mmact.models.activations import APA
from mmact.models.layers import APACBAMAttention, CBAMAttention


def test_cbam_matches_formula():
    torch.manual_seed(0)
    layer = CBAMAttention(32, ratio=4).eval()  # eval: BN running stats
    with torch.no_grad():
        layer.spatial_norm.running_mean.fill_(0.3)
        layer.spatial_norm.running_var.fill_(2.0)
    x = torch.randn(2, 32, 5, 6)
    fc1, fc2 = layer.channel_mlp[0], layer.channel_mlp[2]

    def mlp(v):
        return fc2(torch.relu(fc1(v)))

    a_c = torch.sigmoid(mlp(x.mean((2, 3))) + mlp(x.amax((2, 3))))
    x1 = x * a_c[:, :, None, None]
    maps = torch.stack([x1.amax(1), x1.mean(1)], dim=1)
    s = F.conv2d(maps, layer.spatial_conv.weight, padding=3)
    s = (s - 0.3) / torch.sqrt(torch.tensor(2.0 + 1e-5))
    torch.testing.assert_close(layer(x), x1 * torch.sigmoid(s))
    assert layer.channel_mlp[0].out_features == 8
    assert len(layer.channel_mlp) == 3  # no dropout by default


def test_apa_form_and_switches():
    layer = APACBAMAttention(64)
    assert isinstance(layer.channel_gate, APA)
    assert isinstance(layer.spatial_gate, APA)
    assert isinstance(layer.channel_mlp[-1], nn.Dropout)
    assert layer.channel_mlp[-1].p == 0.1
    keys = set(layer.state_dict())
    assert {'channel_gate.kappa_param', 'spatial_gate.lambda_param'} <= keys
    x = torch.randn(2, 64, 4, 4, requires_grad=True)
    layer(x).sum().backward()
    assert layer.spatial_gate.kappa_param.grad is not None
    assert layer.channel_gate.kappa_param.grad is not None

    spatial = CBAMAttention(64, use_channel=False, norm_cfg=None)
    assert spatial.channel_mlp is None and spatial.spatial_norm is None
    assert set(spatial.state_dict()) == {'spatial_conv.weight'}
    x = torch.randn(1, 64, 3, 3)
    a_s = torch.sigmoid(
        spatial.spatial_conv(torch.stack([x.amax(1), x.mean(1)], dim=1)))
    torch.testing.assert_close(spatial(x), x * a_s)
    channel = CBAMAttention(64, use_spatial=False)
    assert channel.spatial_conv is None
    assert channel(x).shape == x.shape


def test_registry_plugin_and_actresnet():
    assert isinstance(
        MODELS.build(dict(type='CBAMAttention', in_channels=16, ratio=4)),
        CBAMAttention)
    name, plugin = build_plugin_layer(
        dict(type='APACBAMAttention'), in_channels=128)
    assert name == 'apa_cbam' and plugin.in_channels == 128

    from mmact.models.backbones import ActResNet
    backbone = ActResNet(
        50,
        act_cfg=dict(type='AGLU'),
        attention_cfg=dict(type='APACBAMAttention'),
        out_indices=(0, 1, 2, 3))
    assert isinstance(backbone.layer3[0].attn, APACBAMAttention)
    assert backbone.layer4[2].attn.in_channels == 2048
    outs = backbone(torch.rand(1, 3, 64, 64))
    assert [o.shape[1] for o in outs] == [256, 512, 1024, 2048]
    # same parameter count as CBAM's ResNet-50 (channel MLP with biases,
    # 7x7 spatial conv, BN) plus two scalar APA parameters per gate
    plain = ActResNet(50, attention_cfg=dict(type='CBAMAttention'))
    n_apa = sum(p.numel() for p in backbone.parameters()) - sum(
        p.numel() for p in plain.parameters())
    # 16 blocks x 2 gates x (kappa, lambda) + 49 AGLU x (kappa, lambda)
    assert n_apa == 16 * 2 * 2 + 49 * 2


def test_authors_layer_norm_before_the_shared_mlp():
    """classification/cbam.py of kostas1515/AGLU: LayerNorm on each pooled
    vector, then the shared MLP (with dropout), summed, then the gate."""
    torch.manual_seed(0)
    layer = APACBAMAttention(
        32, ratio=4, use_spatial=False, use_norm=True).eval()
    with torch.no_grad():
        layer.channel_norm.weight.uniform_(0.5, 1.5)
        layer.channel_norm.bias.uniform_(-0.2, 0.2)
    x = torch.randn(2, 32, 5, 6)

    def branch(v):
        return layer.channel_mlp(F.layer_norm(v, (32, ),
                                              layer.channel_norm.weight,
                                              layer.channel_norm.bias))

    a_c = layer.channel_gate(branch(x.mean((2, 3))) + branch(x.amax((2, 3))))
    torch.testing.assert_close(layer(x), x * a_c[:, :, None, None])
    assert isinstance(CBAMAttention(32, ratio=4).channel_norm, nn.Identity)
    # off by default: earlier checkpoints of the layer have no such keys
    assert 'channel_norm.weight' not in APACBAMAttention(32).state_dict()


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match='use_channel and use_spatial'):
        CBAMAttention(16, use_channel=False, use_spatial=False)
    with pytest.raises(ValueError, match='kernel_size'):
        CBAMAttention(16, kernel_size=4)
    with pytest.raises(ValueError, match=r'squeeze_channels=0.*in_channels=8'):
        CBAMAttention(8)
    with pytest.raises(ValueError, match='dropout'):
        APACBAMAttention(16, ratio=4, dropout=1.0)
    with pytest.raises(ValueError, match=r'\(N, 16, H, W\)'):
        CBAMAttention(16, ratio=4)(torch.randn(1, 8, 3, 3))
