"""ActResNet / ActResNeXt: shapes, parity with upstream, per-position
activations, attention placement, freezing, registries and pretrained init."""
import os

import pytest
import torch
import torch.nn as nn
from mmengine.registry import MODELS

import mmact  # noqa: F401
from mmact.models.backbones import ActResNet, ActResNeXt

HAS_APA = MODELS.get('APA') is not None and MODELS.get('AGLU') is not None
# PReLU: a registered activation with a parameter, available before AGLU.
LEARNABLE = dict(type='PReLU')
APA_SE_SIGMOID = dict(type='APASELayer', gate_cfg=dict(type='Sigmoid'))
SMALL = torch.rand(1, 3, 64, 64)


def n_params(model):
    return sum(p.numel() for p in model.parameters())


@MODELS.register_module(name='ZeroAttentionForTest', force=True)
class ZeroAttention(nn.Module):
    """Attention that removes the residual branch: output = act(identity)."""

    def __init__(self, in_channels):
        super().__init__()
        self.in_channels = in_channels

    def forward(self, x):
        return torch.zeros_like(x)


@pytest.mark.parametrize('depth,expansion', [(18, 1), (34, 1), (50, 4),
                                             (101, 4), (152, 4)])
def test_output_shapes_per_depth(depth, expansion):
    model = ActResNet(depth, out_indices=(0, 1, 2, 3)).eval()
    with torch.no_grad():
        outs = model(SMALL)
    assert [tuple(o.shape) for o in outs] == [(1, 64 * expansion, 16, 16),
                                              (1, 128 * expansion, 8, 8),
                                              (1, 256 * expansion, 4, 4),
                                              (1, 512 * expansion, 2, 2)]


def test_out_indices_and_resnext():
    model = ActResNet(18, out_indices=(1, 3)).eval()
    outs = model(SMALL)
    assert [o.shape[1] for o in outs] == [128, 512]
    x = ActResNeXt(
        50, attention_cfg=dict(type='SEAttention'), out_indices=(0, 3)).eval()
    assert [o.shape[1] for o in x(SMALL)] == [256, 2048]
    assert x.layer1[0].conv2.groups == 32
    assert x.layer1[0].attn.in_channels == 256


@pytest.mark.parametrize('depth', [18, 50])
def test_keys_and_params_equal_upstream_resnet(depth):
    from mmdet.models.backbones import ResNet as DetResNet
    from mmpretrain.models.backbones import ResNet
    ours = ActResNet(depth)
    # Parameter-free ReLU positions add no keys: stock checkpoints
    # (mmpretrain, mmdet, torchvision layouts) load as they are.
    assert set(ours.state_dict()) == set(ResNet(depth).state_dict())
    assert set(ours.state_dict()) == set(DetResNet(depth).state_dict())
    assert n_params(ours) == n_params(ResNet(depth))


def test_params_equal_upstream_se_resnet_and_resnext():
    from mmpretrain.models.backbones import ResNeXt, SEResNet
    se = ActResNet(50, attention_cfg=dict(type='SEAttention'))
    assert n_params(se) == n_params(SEResNet(50))
    assert n_params(ActResNeXt(50)) == n_params(ResNeXt(50))


def test_every_activation_position_owns_its_module():
    model = ActResNet(50, act_cfg=LEARNABLE, attention_cfg=APA_SE_SIGMOID)
    prelus = [m for m in model.modules() if isinstance(m, nn.PReLU)]
    # stem + 3 per block (16 blocks); the attention keeps its ReLU
    assert len(prelus) == 1 + 3 * 16
    assert len({id(m) for m in prelus}) == len(prelus)
    keys = model.state_dict()
    for key in ('relu.weight', 'layer1.0.act1.weight', 'layer1.0.act2.weight',
                'layer1.0.act3.weight', 'layer4.2.attn.norm.weight',
                'layer4.2.attn.fc1.weight', 'layer4.2.attn.fc2.weight'):
        assert key in keys, key
    assert not any('.relu' in k for k in keys)  # shared upstream relu gone
    basic = ActResNet(18, act_cfg=LEARNABLE)
    assert sum(isinstance(m, nn.PReLU) for m in basic.modules()) == 1 + 2 * 8
    stem = ActResNet(18, act_cfg=LEARNABLE, deep_stem=True)
    assert all(isinstance(m.activate, nn.PReLU) for m in stem.stem)


@pytest.mark.parametrize('depth', [18, 50])
def test_attention_sits_before_the_residual_add(depth):
    model = ActResNet(depth, attention_cfg=dict(type='ZeroAttentionForTest'))
    block = model.layer1[1]  # identity shortcut
    x = torch.randn(1, block.in_channels, 8, 8)
    # residual branch zeroed by the attention: output = act(x)
    torch.testing.assert_close(block(x), torch.relu(x))


def test_checkpointed_blocks_match():
    torch.manual_seed(0)
    plain = ActResNet(50, act_cfg=LEARNABLE, attention_cfg=APA_SE_SIGMOID)
    cp = ActResNet(
        50, act_cfg=LEARNABLE, attention_cfg=APA_SE_SIGMOID, with_cp=True)
    cp.load_state_dict(plain.state_dict())
    plain.eval(), cp.eval()
    x = torch.rand(1, 3, 64, 64, requires_grad=True)
    torch.testing.assert_close(plain(x)[0], cp(x)[0])


def test_frozen_stages_freeze_activations_and_attention():
    torch.manual_seed(0)
    model = ActResNet(
        50,
        act_cfg=LEARNABLE,
        attention_cfg=dict(type='APASELayer', gate_cfg=LEARNABLE),
        frozen_stages=2,
        out_indices=(3, ))
    model.train()
    frozen_prefixes = ('conv1.', 'bn1.', 'relu.', 'layer1.', 'layer2.')
    frozen = {
        k: p.detach().clone()
        for k, p in model.named_parameters() if k.startswith(frozen_prefixes)
    }
    assert 'relu.weight' in frozen and 'layer2.3.attn.gate.weight' in frozen
    assert all(not p.requires_grad for k, p in model.named_parameters()
               if k in frozen)
    assert all(p.requires_grad for k, p in model.named_parameters()
               if k not in frozen)
    assert not model.bn1.training and not model.layer2[0].bn1.training
    assert not model.layer1[0].attn.drop.training
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad],
                          lr=0.1,
                          momentum=0.9)
    model(torch.rand(2, 3, 64, 64))[0].square().mean().backward()
    opt.step()
    for key, param in model.named_parameters():
        if key in frozen:
            assert torch.equal(param, frozen[key]), key
    assert not torch.equal(model.layer3[0].act1.weight,
                           torch.full_like(model.layer3[0].act1.weight, .25))


def test_norm_eval():
    model = ActResNet(18, norm_eval=True)
    model.train()
    assert all(not m.training for m in model.modules()
               if isinstance(m, nn.BatchNorm2d))


def test_bad_arguments_name_values():
    with pytest.raises(ValueError, match=r'unsupported depth 20.*18, 34, 50'):
        ActResNet(20)
    with pytest.raises(ValueError, match=r'unsupported depth 18'):
        ActResNeXt(18)
    with pytest.raises(KeyError, match="'NoSuchAttention'"):
        ActResNet(18, attention_cfg=dict(type='NoSuchAttention'))
    with pytest.raises(KeyError, match="act_cfg.*'NoSuchAct'"):
        ActResNet(18, act_cfg=dict(type='NoSuchAct'))
    with pytest.raises(ValueError, match=r'frozen_stages=5.*\[-1, 4\]'):
        ActResNet(18, frozen_stages=5)
    with pytest.raises(ValueError, match=r'frozen_stages=-2'):
        ActResNet(18, frozen_stages=-2)
    with pytest.raises(ValueError, match=r'out_indices \(0, 4\)'):
        ActResNet(18, out_indices=(0, 4))
    with pytest.raises(ValueError, match=r'in_channels=128.*64 channels'):
        ActResNet(18, attention_cfg=dict(type='SEAttention', in_channels=128))


def test_registered_in_mmdet_and_mmpretrain():
    from mmdet.registry import MODELS as DET
    from mmpretrain.registry import MODELS as CLS

    from mmact.models.backbones import (ActResNetV1d, DetActResNet,
                                        DetActResNetV1d, DetActResNeXt)

    # each registry's name holds the face with that registry's contract
    assert CLS.get('ActResNet') is ActResNet
    assert CLS.get('ActResNetV1d') is ActResNetV1d
    assert CLS.get('ActResNeXt') is ActResNeXt
    assert DET.get('ActResNet') is DetActResNet
    assert DET.get('ActResNetV1d') is DetActResNetV1d
    assert DET.get('ActResNeXt') is DetActResNeXt
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope('mmdet'):
        model = DET.build(
            dict(
                type='ActResNet',
                depth=18,
                attention_cfg=dict(type='SEAttention')))
    assert isinstance(model.layer1[0].attn, mmact.models.layers.SEAttention)


def test_pretrained_init_rejects_reference_layout(tmp_path):
    model = ActResNet(18)
    raw = tmp_path / 'raw.pth'
    torch.save({'model': model.state_dict(), 'epoch': 3}, raw)
    bad = ActResNet(18, init_cfg=dict(type='Pretrained', checkpoint=str(raw)))
    with pytest.raises(ValueError, match="under 'model'.*apa_to_mmact"):
        bad.init_weights()
    prefixed = ActResNet(
        18,
        init_cfg=dict(
            type='Pretrained', checkpoint=str(raw), prefix='backbone.'))
    with pytest.raises(ValueError, match="under 'model'"):
        prefixed.init_weights()
    other = tmp_path / 'other.pth'
    torch.save({'state_dict': {
        'backbone.patch_embed.weight': torch.zeros(1)
    }}, other)
    wrong = ActResNet(
        18,
        init_cfg=dict(
            type='Pretrained', checkpoint=str(other), prefix='backbone.'))
    with pytest.raises(ValueError, match='none of the 1 keys'):
        wrong.init_weights()


def mmdet_config(name):
    """Path of a config shipped in the mmdet wheel (``mmdet::`` only works
    inside a config's ``_base_``)."""
    import mmdet
    return os.path.join(
        os.path.dirname(mmdet.__file__), '.mim', 'configs', name)


def _randomise(model):
    torch.manual_seed(0)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if tensor.is_floating_point():
                tensor.copy_(torch.rand_like(tensor) + 0.5)


def test_mmpretrain_checkpoint_loads_into_mmdet_mask_rcnn(tmp_path):
    from mmengine.config import Config
    from mmengine.registry import DefaultScope
    from mmdet.registry import MODELS as DET
    from mmpretrain.registry import MODELS as CLS
    backbone = dict(
        type='ActResNet',
        depth=18,
        act_cfg=dict(type='AGLU') if HAS_APA else LEARNABLE,
        attention_cfg=dict(type='APASELayer') if HAS_APA else APA_SE_SIGMOID)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        classifier = CLS.build(
            dict(
                type='ImageClassifier',
                backbone=dict(backbone, out_indices=(3, )),
                neck=dict(type='GlobalAveragePooling'),
                head=dict(
                    type='LinearClsHead', num_classes=10, in_channels=512)))
    _randomise(classifier)
    ckpt = tmp_path / 'cls.pth'
    torch.save({'state_dict': classifier.state_dict(), 'meta': {}}, ckpt)

    cfg = Config.fromfile(
        mmdet_config('mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'))
    cfg.model.backbone = dict(
        backbone,
        frozen_stages=1,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(
            type='Pretrained', checkpoint=str(ckpt), prefix='backbone.'))
    cfg.model.neck.in_channels = [64, 128, 256, 512]
    with DefaultScope.overwrite_default_scope('mmdet'):
        detector = DET.build(cfg.model)
    detector.init_weights()
    expected = {
        k[len('backbone.'):]: v
        for k, v in classifier.state_dict().items()
        if k.startswith('backbone.')
    }
    loaded = detector.backbone.state_dict()
    assert set(loaded) == set(expected)  # same keys both ways: strict
    for key, value in expected.items():
        assert torch.equal(loaded[key], value), key
    detector.backbone.load_state_dict(expected, strict=True)
