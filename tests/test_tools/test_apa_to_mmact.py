"""tools/model_converters/apa_to_mmact.py: reference APA checkpoints."""
import re
import sys
from pathlib import Path

import pytest
import torch
from mmengine.registry import DefaultScope

import mmact  # noqa: F401
from mmact.checkpoint import load_safetensors, load_safetensors_metadata
from mmact.models.backbones import ActResNet
from mmact.ops.carafe import carafe_torch

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
    assert report['config'] is None  # 10 classes: no shipped config
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


REPO = Path(__file__).resolve().parents[2]
LVIS_R50 = ('configs/lvis/mask-rcnn_apase-aglu-r50_fpn_gol-normmask_8xb2-rfs-'
            'ms-2x_lvis-v1.py')


def detector(config=LVIS_R50):
    from mmdet.registry import MODELS

    from mmact.utils.preflight import load_config
    cfg = load_config(str(REPO / config))
    cfg.model.backbone.init_cfg = None
    with DefaultScope.overwrite_default_scope('mmdet'):
        return MODELS.build(cfg.model)


def authors_detector_layout(model):
    """The authors' LVIS Mask R-CNN state dict (their key names: backbone
    as their SE_ResNet, mmdet's names elsewhere, the learned mask scale as
    the 0-d ``conv_logits.tempearture``), random values."""
    ref = {}
    for key, value in reference_layout(model).items():
        if key.endswith('conv_logits.scale_root'):
            key, value = key.replace('scale_root', 'tempearture'), \
                value.reshape(()) + 4.0
        ref[key] = value
    return ref


def test_lvis_detector_converts_loads_strictly_and_computes_theirs(tmp_path):
    model = detector()
    ref = authors_detector_layout(model)
    src = tmp_path / 'ref_det.pth'
    torch.save({'state_dict': ref, 'meta': {'epoch': 24}}, src)
    dst = tmp_path / 'mmact_det.safetensors'
    apa_to_mmact.main([str(src), str(dst)])
    model.load_state_dict(load_safetensors(dst), strict=True)
    converted, report = convert_apa_checkpoint({'state_dict': ref})
    assert report['config'] == LVIS_R50
    # LVIS v1's names, in the .pth meta and as JSON in the safetensors file
    from mmdet.datasets import LVISV1Dataset
    names = list(LVISV1Dataset.METAINFO['classes'])
    assert list(converted['meta']['dataset_meta']['classes']) == names
    assert report['classes'] == \
        'class names: 1203 from LVISV1Dataset.METAINFO'
    metadata = load_safetensors_metadata(dst)
    assert metadata['dataset_meta']['classes'] == names
    assert metadata['source'] == str(src)
    assert metadata['backbone_cfg'] == converted['meta']['backbone_cfg']
    head = model.roi_head.mask_head
    # learned-scale predictor: tempearture ** 2 * cos(w, x) + b (theirs)
    t = ref['roi_head.mask_head.conv_logits.tempearture']
    w = ref['roi_head.mask_head.conv_logits.weight'][:, :, 0, 0]
    b = ref['roi_head.mask_head.conv_logits.bias']
    x = torch.randn(2, 256, 3, 3)
    cos = torch.einsum('nchw,kc->nkhw', x / x.norm(dim=1, keepdim=True),
                       w / w.norm(dim=1, keepdim=True))
    torch.testing.assert_close(
        head.conv_logits(x),
        t**2 * cos + b[:, None, None],
        rtol=1e-4,
        atol=1e-4)
    # CARAFE: their compressor / encoder weights, kernels normalised per
    # output pixel, reassembled by the exact sum
    compressed = torch.nn.functional.conv2d(
        x, ref['roi_head.mask_head.upsample.channel_compressor.weight'],
        ref['roi_head.mask_head.upsample.channel_compressor.bias'])
    kernels = torch.nn.functional.conv2d(
        compressed,
        ref['roi_head.mask_head.upsample.content_encoder.weight'],
        ref['roi_head.mask_head.upsample.content_encoder.bias'],
        padding=1)
    kernels = torch.nn.functional.pixel_shuffle(kernels, 2).softmax(1)
    torch.testing.assert_close(
        head.upsample(x), carafe_torch(x, kernels, 5, 1, 2))
    # the backbone's APA gate kept its values
    assert torch.equal(model.backbone.layer4[2].attn.gate.kappa_param,
                       ref['backbone.layer4.2.se.uniact.kappa_param'])


@pytest.mark.slow
def test_v3det_cascade_converts_with_its_wrapped_cauchy_classifiers(
        tmp_path, monkeypatch):
    config = ('configs/v3det/cascade-rcnn_apase-aglu-r50_fpn_8xb4-rfs-ms-2x_'
              'v3det.py')
    model = detector(config)
    ref = {
        key.replace('fc_cls.concentration_logit', 'fc_cls.g'): value
        for key, value in reference_layout(model).items()
    }
    converted, report = convert_apa_checkpoint({'state_dict': ref})
    assert report['config'] == config
    model.load_state_dict(converted['state_dict'], strict=True)
    # their WCLinear: s * (1 - g^2) / (2 * 3.14 * (1 + g^2 - 2 g cos))
    fc_cls = model.roi_head.bbox_head[2].fc_cls
    w = ref['roi_head.bbox_head.2.fc_cls.weight'][:5]
    b = ref['roi_head.bbox_head.2.fc_cls.bias'][:5]
    g = torch.sigmoid(ref['roi_head.bbox_head.2.fc_cls.g'][:5])
    x = torch.randn(2, 1024)
    cos = torch.nn.functional.normalize(x) @ \
        torch.nn.functional.normalize(w).T + b
    torch.testing.assert_close(
        fc_cls(x)[:, :5],
        300 * (1 - g**2) / (2 * 3.14 * (1 + g**2 - 2 * g * cos)),
        rtol=1e-4,
        atol=1e-4)
    # V3Det's names come from its label file, absent here
    assert 'dataset_meta' not in converted['meta']
    assert report['classes'].startswith(
        'class names: none written (data/V3Det/annotations/category_name_'
        '13204_v3det_2023_v1.txt (test_dataloader.dataset.label_file, one '
        'class name a line) does not exist)')
    faster = config.replace('cascade', 'faster')
    names = [f'v3det_category_{i}' for i in range(13204)]
    labels = tmp_path / 'data/V3Det/annotations/' \
        'category_name_13204_v3det_2023_v1.txt'
    labels.parent.mkdir(parents=True)
    labels.write_text('\n'.join(names) + '\n')
    monkeypatch.chdir(tmp_path)
    converted, report = convert_apa_checkpoint({
        'state_dict': {
            key.replace('fc_cls.concentration_logit', 'fc_cls.g'): value
            for key, value in reference_layout(detector(faster)).items()
        }
    })
    assert report['config'] == faster
    assert list(converted['meta']['dataset_meta']['classes']) == names


@pytest.mark.parametrize('config,device', [
    (LVIS_R50, 'meta'),
    ('configs/imagenet/se-relu-r50_8xb32-coslr-100e_in1k.py', 'cpu'),
])
def test_the_strict_check_names_misshaped_and_missing_keys(
        config, device, monkeypatch):
    """check_loads_strictly builds a detector on the meta device (no
    weights to initialise; a classifier of mmpretrain reads a value while
    it is built: the CPU) and refuses what strict=True refuses, naming the
    keys."""
    from mmengine.registry import MODELS
    built = []
    build = MODELS.build
    monkeypatch.setattr(MODELS, 'build',
                        lambda cfg: built.append(build(cfg)) or built[-1])
    check = apa_to_mmact.check_loads_strictly
    with pytest.raises(ValueError, match='does not fit'):
        check({}, config)  # every key missing
    model = built[-1]
    assert {p.device.type for p in model.parameters()} == {device}
    state = {
        k: torch.zeros(v.shape, dtype=v.dtype)
        for k, v in model.state_dict().items()
    }
    check(dict(state), config)  # the model's own keys and shapes load
    [wide, *_] = [k for k, v in state.items() if v.dim() == 4]
    [dropped, *_] = [k for k in state if k.endswith('running_var')]
    state[wide] = torch.zeros(1, *state[wide].shape[1:])
    del state[dropped]
    with pytest.raises(ValueError, match='does not fit') as refused:
        check(state, config)
    assert wide in str(refused.value) and dropped in str(refused.value)


def test_r101_detector_is_matched_to_its_own_config():
    config = LVIS_R50.replace('r50', 'r101')
    ref = authors_detector_layout(detector(config))
    assert not any(k.endswith('tempearture') for k in ref)  # fixed scale
    _, report = convert_apa_checkpoint({'state_dict': ref})
    assert report['config'] == config


def test_backbone_only_detector_file_initialises_a_backbone(tmp_path):
    model = ActResNet(50, act_cfg=dict(type='AGLU'), attention_cfg=APA_STAR)
    ref = {f'backbone.{k}': v for k, v in reference_layout(model).items()}
    ref['rpn_head.rpn_conv.weight'] = torch.rand(256, 256, 3, 3)
    src = tmp_path / 'ref_det.pth'
    torch.save({'state_dict': ref, 'meta': {'epoch': 24}}, src)
    dst = tmp_path / 'mmact_backbone.pth'
    apa_to_mmact.main([str(src), str(dst), '--backbone-only'])
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


def test_detector_of_another_layout_is_refused_naming_keys():
    model = ActResNet(50, act_cfg=dict(type='AGLU'), attention_cfg=APA_STAR)
    ref = {f'backbone.{k}': v for k, v in reference_layout(model).items()}
    ref['roi_head.semantic_head.conv_logits.weight'] = torch.ones(3)
    ref['neck.lateral_convs.0.conv.weight'] = torch.rand(256, 256, 1, 1)
    with pytest.raises(
            ValueError,
            match=r'1 detector keys match no conversion rule.*'
            r'roi_head\.semantic_head\.conv_logits\.weight'):
        convert_apa_checkpoint({'state_dict': ref})
    del ref['roi_head.semantic_head.conv_logits.weight']
    with pytest.raises(ValueError, match='no mmact config has this detector'):
        convert_apa_checkpoint({'state_dict': ref})


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


def test_classifier_lambda_below_the_default_floor_sets_lambda_min():
    """Their classification AGLU floors lambda at relu(l) + 1e-8: a lambda
    below mmact's default 1e-4 floor needs lambda_min=1e-8."""
    model = ActResNet(18, act_cfg=dict(type='AGLU'))
    ref = reference_layout(model)
    ref['layer2.1.unirect1.lambda_param'] = torch.tensor([-0.5])
    converted, report = convert_apa_checkpoint({'model': ref})
    act_cfg = report['backbone_cfg']['act_cfg']
    assert act_cfg == dict(type='AGLU', lambda_min=1e-8)
    target = ActResNet(18, act_cfg=act_cfg)
    target.load_state_dict(
        {
            k[len('backbone.'):]: v
            for k, v in converted['state_dict'].items()
        },
        strict=True)
    act = target.layer2[1].act1
    kappa = ref['layer2.1.unirect1.kappa_param']
    x = torch.linspace(-3, 3, 7, dtype=torch.float64)
    lam = torch.relu(torch.tensor(-0.5, dtype=torch.float64)) + 1e-8
    theirs = x * (1 + lam * torch.exp(-kappa.double() * x))**(-1 / lam)
    torch.testing.assert_close(act.double()(x), theirs, rtol=1e-6, atol=1e-8)
    _, plain = convert_apa_checkpoint({'model': reference_layout(model)})
    assert plain['backbone_cfg']['act_cfg'] == dict(type='AGLU')


def test_imagenet_classifier_is_matched_to_its_config(tmp_path, capsys):
    model = ActResNet(101, act_cfg=dict(type='AGLU'), attention_cfg=APA_STAR)
    ref = reference_layout(model)
    ref['fc.weight'] = torch.rand(1000, 2048)
    ref['fc.bias'] = torch.rand(1000)
    ref['layer1.0.unirect1.lambda_param'] = torch.tensor([1e-6])
    src, dst = tmp_path / 'se_r101.pth', tmp_path / 'out.pth'
    torch.save({'model': ref, 'epoch': 99}, src)
    apa_to_mmact.main([str(src), str(dst)])  # checks the strict load
    printed = capsys.readouterr().out
    config = 'configs/imagenet/apase-aglu-r101_8xb32-coslr-100e_in1k.py'
    assert f'loads with strict=True into {config}' in printed
    assert 'class names: 1000 from ImageNet.METAINFO' in printed
    from mmpretrain.datasets import ImageNet
    meta = torch.load(dst, weights_only=True)['meta']
    assert meta['dataset_meta']['classes'] == ImageNet.METAINFO['classes']
    assert '--cfg-options model.backbone.act_cfg.lambda_min=1e-08' in printed


CBAM_TO_REFERENCE = [
    (r'\.attn\.channel_norm\.', '.cbam.ChannelGate.norm.'),
    (r'\.attn\.channel_mlp\.0\.', '.cbam.ChannelGate.mlp.1.'),
    (r'\.attn\.channel_mlp\.2\.', '.cbam.ChannelGate.mlp.3.'),
    (r'\.attn\.channel_gate\.', '.cbam.ChannelGate.uniact.'),
    (r'\.attn\.spatial_conv\.', '.cbam.SpatialGate.spatial.conv.'),
    (r'\.attn\.spatial_norm\.', '.cbam.SpatialGate.spatial.bn.'),
    (r'\.attn\.spatial_gate\.', '.cbam.SpatialGate.uniact.'),
]


def test_cbam_classifier_converts_into_the_apacbam_config(tmp_path, capsys):
    """Their CBAM-R50 (classification/cbam.py: LayerNorm on the pooled
    vectors, APA gates) -> configs/imagenet/apacbam-aglu-r50."""
    from mmact.models.layers import APACBAMAttention
    model = ActResNet(
        50,
        act_cfg=dict(type='AGLU'),
        attention_cfg=dict(type='APACBAMAttention', use_norm=True))
    ref = {}
    for key, value in reference_layout(model).items():
        for pattern, repl in CBAM_TO_REFERENCE:
            key = re.sub(pattern, repl, key)
        ref[key] = value
    ref['fc.weight'], ref['fc.bias'] = torch.rand(1000, 2048), torch.rand(1000)
    converted, report = convert_apa_checkpoint({'model': ref})
    assert report['config'] == \
        'configs/imagenet/apacbam-aglu-r50_8xb32-coslr-100e_in1k.py'
    assert report['backbone_cfg']['attention_cfg']['use_norm'] is True
    state = {
        k[len('backbone.'):]: v
        for k, v in converted['state_dict'].items()
        if k.startswith('backbone.')
    }
    model.load_state_dict(state, strict=True)
    attn = model.layer2[1].attn
    assert isinstance(attn, APACBAMAttention)
    assert torch.equal(attn.channel_norm.weight,
                       ref['layer2.1.cbam.ChannelGate.norm.weight'])
    assert torch.equal(attn.spatial_gate.kappa_param,
                       ref['layer2.1.cbam.SpatialGate.uniact.kappa_param'])


def test_imagenet_lt_resnext_matches_its_long_tailed_config():
    """Their ImageNet-LT SE-X50: cosine-normalised classifier, fc.weight
    only -> configs/imagenet/apase-aglu-x50_cos-cls_..._in1k-lt.py."""
    from mmact.models.backbones import ActResNeXt
    model = ActResNeXt(
        50,
        groups=32,
        width_per_group=4,
        act_cfg=dict(type='AGLU'),
        attention_cfg=APA_STAR)
    ref = reference_layout(model)
    ref['fc.weight'] = torch.rand(1000, 2048)
    converted, report = convert_apa_checkpoint({'model': ref})  # strict
    assert report['config'] == ('configs/imagenet/apase-aglu-x50_cos-cls_'
                                '8xb32-coslr-200e_in1k-lt.py')
    assert torch.equal(converted['state_dict']['head.fc.weight'],
                       ref['fc.weight'])


def _reference_release(model: torch.nn.Module) -> dict:
    """Everything the reference classification script saves beside the
    weights (their classification/train.py, torchvision's recipe): the
    optimizer, the warm-up + cosine schedule, the epoch, its
    ``argparse.Namespace``, the AMP scaler and the EMA model."""
    import argparse

    from torch.optim.lr_scheduler import (CosineAnnealingLR, LinearLR,
                                          SequentialLR)
    from torch.optim.swa_utils import AveragedModel
    fc = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(fc.parameters(), lr=0.1, momentum=0.9)
    fc(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    schedule = SequentialLR(
        optimizer, [LinearLR(optimizer),
                    CosineAnnealingLR(optimizer, 10)],
        milestones=[5])
    return {
        'model':
        reference_layout(model),
        'optimizer':
        optimizer.state_dict(),
        'lr_scheduler':
        schedule.state_dict(),
        'epoch':
        99,
        'args':
        argparse.Namespace(
            model='resnet50', lr=0.5, weights=None, output_dir='.', amp=True),
        'scaler': {
            'scale': 65536.0,
            'growth_factor': 2.0,
            'backoff_factor': 0.5,
            'growth_interval': 2000,
            '_growth_tracker': 0
        },
        'model_ema':
        AveragedModel(fc).state_dict(),
    }


@pytest.mark.parametrize('legacy', [False, True], ids=['zip', 'legacy'])
def test_reference_release_converts_through_the_allow_list_to_safetensors(
        tmp_path, legacy):
    """A release file of the reference script, in either torch format,
    converts without trusting it, and its safetensors output initialises
    the backbone strictly through mmengine's loader."""
    from mmengine.runner import load_checkpoint

    from mmact.checkpoint import load_safetensors, safe_checkpoint_loading
    model = ActResNet(50, act_cfg=dict(type='AGLU'), attention_cfg=APA_STAR)
    src, dst = tmp_path / 'release.pth', tmp_path / 'r50.safetensors'
    torch.save(
        _reference_release(model),
        src,
        _use_new_zipfile_serialization=not legacy)
    apa_to_mmact.main([str(src), str(dst), '--backbone-only'])
    weights = load_safetensors(dst)
    assert all(key.startswith('backbone.') for key in weights)
    fresh = ActResNet(50, act_cfg=dict(type='AGLU'), attention_cfg=APA_STAR)
    with safe_checkpoint_loading():
        load_checkpoint(
            fresh, str(dst), strict=True, revise_keys=[(r'^backbone\.', '')])
    expected = convert_apa_checkpoint(
        torch.load(src, weights_only=False),
        backbone_only=True)[0]['state_dict']
    for key, value in fresh.state_dict().items():
        assert torch.equal(value, expected[f'backbone.{key}']), key
