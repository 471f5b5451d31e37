"""Mask R-CNN with ActResNet (APA* + AGLU) trains and evaluates on toy COCO."""
import os

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import MODELS

import mmact  # noqa: F401

HAS_APA = MODELS.get('APA') is not None and MODELS.get('AGLU') is not None


def _mmdet_config(name):
    import mmdet
    return os.path.join(
        os.path.dirname(mmdet.__file__), '.mim', 'configs', name)


@pytest.mark.slow
def test_mask_rcnn_act_resnet_trains_and_evaluates(toy_data_root, tmp_path):
    from mmengine.runner import Runner

    from mmact.testing import toy_classes
    data_root = toy_data_root(
        'coco',
        num_train=4,
        num_val=2,
        image_size=(96, 64),
        num_classes=4) + '/'
    cfg = Config.fromfile(
        _mmdet_config('mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'))
    cfg.custom_imports = dict(imports=['mmact'], allow_failed_imports=False)
    cfg.work_dir = str(tmp_path / 'work')
    cfg.model.backbone = dict(
        type='ActResNet',
        depth=18,
        act_cfg=dict(type='AGLU') if HAS_APA else dict(type='PReLU'),
        attention_cfg=dict(type='APASELayer') if HAS_APA else dict(
            type='APASELayer', gate_cfg=dict(type='Sigmoid')),
        frozen_stages=1,
        out_indices=(0, 1, 2, 3),
        norm_eval=True,
        init_cfg=None)
    cfg.model.neck.in_channels = [64, 128, 256, 512]
    # Only the generated classes: labels must map to CocoMetric's cat_ids.
    classes = toy_classes('coco', 4)
    cfg.model.roi_head.bbox_head.num_classes = len(classes)
    cfg.model.roi_head.mask_head.num_classes = len(classes)
    cfg.model.train_cfg.rpn.sampler.num = 64
    cfg.model.train_cfg.rpn_proposal.update(nms_pre=200, max_per_img=50)
    cfg.model.train_cfg.rcnn.sampler.num = 32
    cfg.model.test_cfg.rpn.update(nms_pre=200, max_per_img=50)
    cfg.model.test_cfg.rcnn.max_per_img = 20
    # 2 iterations leave scores near 1/81: keep every box so COCO eval runs
    cfg.model.test_cfg.rcnn.score_thr = 0.0
    scale = (96, 64)
    for pipeline in (cfg.train_dataloader.dataset.pipeline,
                     cfg.val_dataloader.dataset.pipeline):
        for step in pipeline:
            if step['type'] == 'Resize':
                step['scale'] = scale
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        cfg[loader].update(num_workers=0, persistent_workers=False)
        cfg[loader].dataset.data_root = data_root
        cfg[loader].dataset.metainfo = dict(classes=classes)
    cfg.train_dataloader.batch_size = 2
    cfg.val_evaluator.ann_file = data_root + \
        'annotations/instances_val2017.json'
    cfg.test_evaluator = cfg.val_evaluator
    cfg.train_cfg = dict(
        type='IterBasedTrainLoop', max_iters=2, val_interval=2)
    cfg.param_scheduler = []
    cfg.optim_wrapper.optimizer.lr = 0.002
    cfg.default_hooks.logger.interval = 1
    cfg.default_hooks.checkpoint = dict(
        type='CheckpointHook', interval=2, by_epoch=False)
    cfg.log_level = 'WARNING'

    runner = Runner.from_cfg(cfg)
    backbone = runner.model.backbone
    stem_act = {k: v.clone() for k, v in backbone.relu.state_dict().items()}
    layer4 = {k: v.clone() for k, v in backbone.layer4.state_dict().items()}
    runner.train()
    metrics = runner.val_loop.run()
    assert 'coco/bbox_mAP' in metrics and 'coco/segm_mAP' in metrics
    # the frozen stem activation did not move, a later stage did train
    for key, value in backbone.relu.state_dict().items():
        assert torch.equal(value, stem_act[key])
    moved = [
        k for k, v in backbone.layer4.state_dict().items()
        if not torch.equal(v, layer4[k])
    ]
    assert any('act' in k for k in moved) and any('attn' in k for k in moved)
    assert os.path.exists(os.path.join(cfg.work_dir, 'iter_2.pth'))
