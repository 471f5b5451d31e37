"""float32_for_mmcv_ops: under CPU bfloat16 autocast, a dense head's boxes
reach mmcv's float32-only nms as float32, and mmcv's RoIAlign runs on
float32 and gives back the features' dtype."""
import pytest
import torch

import mmact  # noqa: F401
from mmact.engine.optimizers.float32_ops import float32_for_mmcv_ops

ops = pytest.importorskip('mmcv.ops', reason="needs mmcv's compiled ops")


def rpn_head():
    from mmdet.registry import MODELS
    from mmengine.config import ConfigDict
    from mmengine.registry import DefaultScope
    head = ConfigDict(
        type='RPNHead',
        in_channels=4,
        feat_channels=4,
        anchor_generator=dict(
            type='AnchorGenerator',
            scales=[8],
            ratios=[0.5, 1.0, 2.0],
            strides=[4]),
        bbox_coder=dict(
            type='DeltaXYWHBBoxCoder',
            target_means=[0.0] * 4,
            target_stds=[1.0] * 4),
        test_cfg=dict(
            nms_pre=100,
            max_per_img=10,
            nms=dict(type='nms', iou_threshold=0.7),
            min_bbox_size=0))
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('mmdet'):
        return MODELS.build(head)


def propose(head, features):
    from mmdet.structures import DetDataSample
    sample = DetDataSample(metainfo=dict(img_shape=(32, 32)))
    with torch.autocast('cpu', dtype=torch.bfloat16):
        return head.predict([features], [sample])[0]


def test_dense_head_boxes_reach_nms_as_float32():
    head, features = rpn_head(), torch.randn(1, 4, 8, 8)
    with pytest.raises(RuntimeError, match='BFloat16'):
        propose(head, features)  # mmcv's CPU nms: float32 only
    with float32_for_mmcv_ops(head):
        proposals = propose(head, features)
    assert proposals.bboxes.dtype == torch.float32
    assert 0 < len(proposals) <= 10
    assert not head._forward_hooks  # removed on leaving


def test_roi_align_runs_in_float32_and_keeps_the_features_dtype():
    layer = ops.RoIAlign(output_size=3, spatial_scale=1.0, sampling_ratio=2)
    features = torch.randn(1, 4, 16, 16).bfloat16()
    rois = torch.tensor([[0.0, 1.0, 2.0, 9.0, 12.0]])
    with pytest.raises(RuntimeError, match='BFloat16'):
        layer(features, rois)
    with float32_for_mmcv_ops(torch.nn.Sequential(layer)), torch.autocast(
            'cpu', dtype=torch.bfloat16):
        pooled = layer(features, rois)
    assert pooled.dtype == torch.bfloat16
    torch.testing.assert_close(pooled,
                               layer(features.float(), rois).bfloat16())
    assert not layer._forward_pre_hooks and not layer._forward_hooks


def test_cpu_amp_wrapper_opens_it():
    from mmengine.registry import OPTIM_WRAPPERS
    head = rpn_head()
    wrapper = OPTIM_WRAPPERS.build(
        dict(
            type='CPUAmpOptimWrapper',
            optimizer=torch.optim.SGD(head.parameters(), lr=0.1)))
    with wrapper.optim_context(head):
        scores, deltas = head((torch.randn(1, 4, 8, 8), ))
    assert scores[0].dtype == deltas[0].dtype == torch.float32
