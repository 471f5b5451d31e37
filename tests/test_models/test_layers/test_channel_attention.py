"""SEAttention / APASELayer: math, switches, registry and mmcv plugin use."""
import pytest
import torch
import torch.nn as nn
from mmcv.cnn import build_plugin_layer
from mmengine.registry import MODELS

import mmact  # noqa: F401
from mmact.models.layers import APASELayer, SEAttention

HAS_APA = MODELS.get('APA') is not None
SIGMOID = dict(type='Sigmoid')


def test_apa_se_matches_formula():
    torch.manual_seed(0)
    layer = APASELayer(64, gate_cfg=SIGMOID).eval()  # eval: dropout off
    x = torch.randn(2, 64, 8, 8)
    s = nn.functional.layer_norm(
        x.mean((2, 3)), (64, ), layer.norm.weight, layer.norm.bias)
    a = torch.sigmoid(layer.fc2.weight @ torch.relu(layer.fc1.weight @ s.T))
    torch.testing.assert_close(layer(x), x * a.T[:, :, None, None])
    assert layer.fc1.weight.shape == (4, 64) and layer.fc1.bias is None


def test_defaults_and_switches():
    layer = APASELayer(64, gate_cfg=SIGMOID)
    assert isinstance(layer.norm, nn.LayerNorm)
    assert isinstance(layer.drop, nn.Dropout) and layer.drop.p == 0.1
    plain = APASELayer(
        64,
        ratio=8,
        use_norm=False,
        dropout=0.0,
        bias=True,
        act_cfg=dict(type='GELU'),
        gate_cfg=dict(type='Tanh'))
    assert plain.norm is None and plain.drop is None
    assert plain.fc1.out_features == 8 and plain.fc1.bias is not None
    assert isinstance(plain.act, nn.GELU) and isinstance(plain.gate, nn.Tanh)
    assert set(plain.state_dict()) == {
        'fc1.weight', 'fc1.bias', 'fc2.weight', 'fc2.bias'
    }
    se = SEAttention(64)
    assert se.norm is None and se.drop is None
    assert isinstance(se.gate, nn.Sigmoid) and se.fc1.bias is not None
    # any registered activation with parameters can be the gate
    prelu = APASELayer(64, gate_cfg=dict(type='PReLU'))
    assert 'gate.weight' in prelu.state_dict()


def test_se_param_count_matches_mmpretrain_selayer():
    from mmpretrain.models.utils import SELayer
    for channels in (256, 512, 1024, 2048):
        ours = sum(p.numel() for p in SEAttention(channels).parameters())
        theirs = sum(p.numel() for p in SELayer(channels).parameters())
        assert ours == theirs


def test_token_and_3d_inputs_and_dropout_train_mode():
    layer = APASELayer(16, ratio=4, gate_cfg=SIGMOID)
    assert layer(torch.randn(2, 16, 3, 4, 5)).shape == (2, 16, 3, 4, 5)
    assert layer(torch.randn(2, 16, 7)).shape == (2, 16, 7)
    layer.train()
    x = torch.randn(2, 16, 4, 4)
    torch.manual_seed(1)
    y1 = layer(x)
    torch.manual_seed(2)
    assert not torch.equal(y1, layer(x))  # dropout active in training


def test_registry_and_plugin_builder():
    layer = MODELS.build(
        dict(type='APASELayer', in_channels=32, ratio=4, gate_cfg=SIGMOID))
    assert isinstance(layer, APASELayer)
    name, plugin = build_plugin_layer(
        dict(type='APASELayer', gate_cfg=SIGMOID), in_channels=128)
    assert name == 'apa_se' and plugin.in_channels == 128
    name, plugin = build_plugin_layer(
        dict(type='SEAttention'), postfix=2, in_channels=64)
    assert name == 'se2' and isinstance(plugin, SEAttention)


def test_plugin_in_stock_mmdet_resnet():
    from mmdet.models.backbones import ResNet
    backbone = ResNet(
        depth=50,
        out_indices=(0, 1, 2, 3),
        plugins=[
            dict(
                cfg=dict(type='APASELayer', gate_cfg=SIGMOID),
                position='after_conv3',
                stages=(False, True, True, True))
        ])
    assert not hasattr(backbone.layer1[0], 'apa_se')
    assert backbone.layer2[0].apa_se.in_channels == 512
    assert backbone.layer4[2].apa_se.in_channels == 2048
    outs = backbone(torch.rand(1, 3, 64, 64))
    assert [o.shape[1] for o in outs] == [256, 512, 1024, 2048]


def test_bad_inputs_name_values():
    layer = APASELayer(256, gate_cfg=SIGMOID)
    with pytest.raises(ValueError, match=r'in_channels=256.*512'):
        layer(torch.randn(1, 512, 4, 4))
    with pytest.raises(ValueError, match=r'squeeze_channels=0.*in_channels=8'):
        APASELayer(8, ratio=16, gate_cfg=SIGMOID)
    with pytest.raises(ValueError, match='dropout'):
        APASELayer(64, dropout=1.5, gate_cfg=SIGMOID)
    with pytest.raises(KeyError, match='NoSuchGate'):
        APASELayer(64, gate_cfg=dict(type='NoSuchGate'))


@pytest.mark.skipif(not HAS_APA, reason='APA activation not available yet')
def test_default_gate_is_apa():
    layer = APASELayer(64)
    assert type(layer.gate).__name__ == 'APA'
    assert {'gate.kappa_param', 'gate.lambda_param'} <= set(layer.state_dict())
    x = torch.randn(2, 64, 4, 4, requires_grad=True)
    layer(x).sum().backward()
    assert layer.gate.kappa_param.grad is not None
