"""The AGLU-only and APA*-only ResNet-50 pieces of configs/_base_/models
replace the backbone of a stock mmdet detector and load the checkpoint their
ImageNet config writes."""
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

import mmact  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
PIECES = [('aglu_resnet.py', 'aglu_r50'),
          ('apase-relu_resnet.py', 'apase_relu_r50')]


@pytest.mark.parametrize('piece,prefix', PIECES)
def test_det_variant_matches_its_imagenet_config(piece, prefix):
    base = Config.fromfile(str(REPO / 'configs/_base_/models' / piece))
    det, cls = base[f'{prefix}_det'], base[f'{prefix}_cls']
    checkpoint = det.init_cfg.checkpoint
    stem = Path(checkpoint).parent.name
    assert checkpoint == f'work_dirs/{stem}/epoch_100.pth'
    producer = Config.fromfile(str(REPO / 'configs/imagenet' / f'{stem}.py'))
    assert producer.train_cfg.max_epochs == 100
    trained = producer.model.backbone
    for key in ('type', 'depth'):
        assert trained[key] == cls[key] == det[key], key
    # the same activation; only its initial kappa range may differ (the
    # authors' classification and detection code draw it differently)
    assert trained.act_cfg == cls.act_cfg
    assert trained.act_cfg.type == det.act_cfg.type
    assert (trained.attention_cfg or {}).get('type') == \
        (det.attention_cfg or {}).get('type')
    assert det.out_indices == (0, 1, 2, 3) and det.frozen_stages == 1


@pytest.mark.parametrize('piece,prefix', PIECES)
def test_det_variant_in_stock_mask_rcnn(piece, prefix, tmp_path, monkeypatch):
    """Swapped into mmdet's own Mask R-CNN config, the backbone builds,
    runs, and loads an ImageNet classifier checkpoint of the same network."""
    from mmdet.registry import MODELS as DET_MODELS
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS as CLS_MODELS

    base = Config.fromfile(str(REPO / 'configs/_base_/models' / piece))
    init_default_scope('mmpretrain')
    classifier = CLS_MODELS.build(
        dict(
            type='ImageClassifier',
            backbone=base[f'{prefix}_cls'],
            neck=dict(type='GlobalAveragePooling'),
            head=dict(type='LinearClsHead', num_classes=10, in_channels=2048)))
    monkeypatch.chdir(tmp_path)
    path = Path(base[f'{prefix}_det'].init_cfg.checkpoint)
    path.parent.mkdir(parents=True)
    torch.save({'meta': {}, 'state_dict': classifier.state_dict()}, path)

    stock = tmp_path / 'stock.py'
    stock.write_text(
        "_base_ = 'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'\n")
    cfg = Config.fromfile(str(stock))
    cfg.model.backbone = base[f'{prefix}_det']
    init_default_scope('mmdet')
    detector = DET_MODELS.build(cfg.model)
    detector.init_weights()
    expected = classifier.backbone.state_dict()
    loaded = detector.backbone.state_dict()
    assert set(loaded) == set(expected)
    assert all(torch.equal(loaded[k], v) for k, v in expected.items())
    detector.eval()
    with torch.no_grad():
        feats = detector.extract_feat(torch.rand(1, 3, 64, 64))
    assert [f.shape[1] for f in feats] == [256] * 5  # FPN levels
