"""tools/model_converters/apa_to_mmact.py: reference APA checkpoints."""
import re
import sys
from pathlib import Path

import pytest
import torch
from mmengine.registry import DefaultScope

import mmact  # noqa: F401
from mmact.models.backbones import ActResNet

sys.path.insert(
    0, str(Path(__file__).resolve().parents[2] / 'tools' / 'model_converters'))
try:
    import apa_to_mmact
    from apa_to_mmact import (convert_apa_backbone, convert_apa_checkpoint,
                              infer_backbone_config)
finally:
    sys.path.pop(0)

# Written independently of the converter's rules: mmact name -> reference.
TO_REFERENCE = [
    (r'\.act([123])\.', r'.unirect\1.'),
    (r'\.attn\.norm\.', '.se.norm.'),
    (r'\.attn\.fc1\.', '.se.excitation.0.'),
    (r'\.attn\.fc2\.', '.se.excitation.2.'),
    (r'\.attn\.gate\.', '.se.uniact.'),
]


def reference_layout(model, scalar_act_params=False):
    """A state dict of ``model`` renamed to the reference code's names,
    with random values so a wrong mapping cannot pass by accident."""
    torch.manual_seed(0)
    out = {}
    for key, value in model.state_dict().items():
        for pattern, repl in TO_REFERENCE:
            key = re.sub(pattern, repl, key)
        if value.is_floating_point():
            value = torch.rand_like(value)
        if scalar_act_params and key.endswith('_param'):
            value = value.reshape(())  # some implementations store 0-d
        out[key] = value
    return out


APA_STAR = dict(
    type='APASELayer',
    ratio=16,
    bias=False,
    use_norm=True,
    dropout=0.1,
    gate_cfg=dict(type='APA'))


def test_classification_round_trip_loads_strictly():
    model = ActResNet(50, act_cfg=dict(type='AGLU'), attention_cfg=APA_STAR)
    ref = reference_layout(model, scalar_act_params=True)
    assert 'layer1.0.unirect3.kappa_param' in ref
    assert 'layer4.2.se.excitation.2.weight' in ref
    ref['fc.weight'] = torch.rand(10, 2048)
    ref['fc.bias'] = torch.rand(10)
    ckpt = {'model': ref, 'optimizer': {}, 'epoch': 7, 'args': None}
    converted, report = convert_apa_checkpoint(ckpt)
    assert report['layout'] == 'classification'
    assert report['backbone_cfg'] == dict(
        type='ActResNet',
        depth=50,
        act_cfg=dict(type='AGLU'),
        attention_cfg=APA_STAR)
    assert sorted(report['dropped']) == [
        '<top-level> args', '<top-level> epoch', '<top-level> optimizer'
    ]
    from mmpretrain.registry import MODELS as CLS
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        classifier = CLS.build(
            dict(
                type='ImageClassifier',
                backbone=report['backbone_cfg'],
                neck=dict(type='GlobalAveragePooling'),
                head=dict(
                    type='LinearClsHead', num_classes=10, in_channels=2048)))
    classifier.load_state_dict(converted['state_dict'], strict=True)
    sd = classifier.state_dict()
    assert torch.equal(sd['backbone.layer2.1.act2.lambda_param'].flatten(),
                       ref['layer2.1.unirect2.lambda_param'].flatten())
    assert torch.equal(sd['backbone.layer3.0.attn.fc1.weight'],
                       ref['layer3.0.se.excitation.0.weight'])
    assert torch.equal(sd['backbone.relu.kappa_param'].flatten(),
                       ref['relu.kappa_param'].flatten())
    assert torch.equal(sd['head.fc.weight'], ref['fc.weight'])


def test_detector_layout_and_cli(tmp_path):
    model = ActResNet(50, act_cfg=dict(type='AGLU'), attention_cfg=APA_STAR)
    ref = {f'backbone.{k}': v for k, v in reference_layout(model).items()}
    ref['neck.lateral_convs.0.conv.weight'] = torch.rand(256, 256, 1, 1)
    ref['rpn_head.rpn_conv.weight'] = torch.rand(256, 256, 3, 3)
    src = tmp_path / 'ref_det.pth'
    torch.save({'state_dict': ref, 'meta': {'epoch': 24}}, src)
    dst = tmp_path / 'mmact_det.pth'
    apa_to_mmact.main([str(src), str(dst)])
    out = torch.load(dst, weights_only=True)
    assert out['state_dict']['neck.lateral_convs.0.conv.weight'].shape == (256,
                                                                           256,
                                                                           1,
                                                                           1)
    assert 'backbone.layer1.0.attn.gate.kappa_param' in out['state_dict']
    # the converted file initialises a backbone via init_cfg with a prefix
    backbone = ActResNet(
        50,
        act_cfg=dict(type='AGLU'),
        attention_cfg=APA_STAR,
        init_cfg=dict(
            type='Pretrained', checkpoint=str(dst), prefix='backbone.'))
    backbone.init_weights()
    assert torch.equal(backbone.layer4[2].act3.kappa_param,
                       ref['backbone.layer4.2.unirect3.kappa_param'])
    # the unconverted one is rejected with the converter's name
    raw = ActResNet(
        50,
        act_cfg=dict(type='AGLU'),
        attention_cfg=APA_STAR,
        init_cfg=dict(
            type='Pretrained', checkpoint=str(src), prefix='backbone.'))
    with pytest.raises(ValueError, match='reference APA key names.*apa_to'):
        raw.init_weights()
    dropped, report = convert_apa_checkpoint(
        torch.load(src), backbone_only=True)
    assert all(k.startswith('backbone.') for k in dropped['state_dict'])
    assert 'rpn_head.rpn_conv.weight' in report['dropped']


def test_plain_se_reference_with_ddp_prefix():
    # SE baseline of the reference code: sigmoid gate, no LN, biased FCs.
    model = ActResNet(18, attention_cfg=dict(type='SEAttention'))
    ref = {
        f'module.{k}': v
        for k, v in reference_layout(model).items()
        if not k.endswith('num_batches_tracked')
    }  # old torch: absent
    converted, report = convert_apa_checkpoint({'model': ref})
    assert report['backbone_cfg'] == dict(
        type='ActResNet',
        depth=18,
        attention_cfg=dict(type='SEAttention', ratio=16))
    target = ActResNet(18, attention_cfg=dict(type='SEAttention'))
    state = {
        k[len('backbone.'):]: v
        for k, v in converted['state_dict'].items()
    }
    target.load_state_dict(state, strict=True)


def test_resnext_inference():
    from mmact.models.backbones import ActResNeXt
    model = ActResNeXt(50, groups=32, width_per_group=4)
    cfg = infer_backbone_config(reference_layout(model))
    assert cfg == dict(
        type='ActResNeXt', depth=50, groups=32, width_per_group=4)


def test_rejects_other_architectures_and_bad_keys():
    vit = {
        'patch_embed.proj.weight': torch.zeros(1),
        'blocks.0.attn.qkv.weight': torch.zeros(1)
    }
    with pytest.raises(ValueError, match="not a reference.*patch_embed"):
        convert_apa_checkpoint({'model': vit})
    ref = reference_layout(ActResNet(18))
    extra = dict(ref, **{'layer1.0.cbam.fc.weight': torch.zeros(1)})
    with pytest.raises(ValueError, match=r'match no conversion rule.*cbam'):
        convert_apa_backbone(extra)
    missing = {k: v for k, v in ref.items() if k != 'layer1.0.bn2.weight'}
    with pytest.raises(ValueError, match=r'missing layer1\.0\.bn2\.weight'):
        convert_apa_backbone(missing)
    short = {k: v for k, v in ref.items() if not k.startswith('layer4.1.')}
    with pytest.raises(ValueError, match=r'\(2, 2, 2, 1\).*no supported'):
        convert_apa_backbone(short)
    with pytest.raises(ValueError, match="no 'model' or 'state_dict'"):
        convert_apa_checkpoint({'epoch': 3, 'net': {}})
