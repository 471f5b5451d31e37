"""CARAFEMaskHead: FCNMaskHead's CARAFE configs and checkpoints, any
device."""
import pytest
import torch
from mmdet.registry import MODELS
from mmengine.registry import DefaultScope

from mmact.models.layers.carafe import CARAFEUpsample

CARAFE = dict(
    type='carafe',
    scale_factor=2,
    up_kernel=5,
    up_group=1,
    encoder_kernel=3,
    encoder_dilation=1,
    compressed_channels=64)


def build(type_, **kwargs):
    with DefaultScope.overwrite_default_scope('mmdet'):
        return MODELS.build(
            dict(type=type_, num_classes=3, upsample_cfg=dict(CARAFE),
                 **kwargs))


def test_loads_fcn_mask_head_carafe_checkpoints_strictly():
    stock = build('FCNMaskHead')
    ours = build('CARAFEMaskHead')
    assert type(ours.upsample) is CARAFEUpsample
    assert ours.state_dict().keys() == stock.state_dict().keys()
    ours.load_state_dict(stock.state_dict(), strict=True)
    assert ours.upsample.compressed_channels == 64
    assert ours.upsample.channels == 256 and ours.upsample.up_kernel == 5


def test_trains_on_the_cpu():
    head = build(
        'CARAFEMaskHead', predictor_cfg=dict(type='LearnableNormedConv2d'))
    rois = torch.randn(4, 256, 14, 14)
    logits = head(rois)
    assert logits.shape == (4, 3, 28, 28)
    logits.sum().backward()
    assert head.upsample.content_encoder.weight.grad.abs().sum() > 0
    assert head.convs[0].conv.weight.grad.abs().sum() > 0


def test_other_upsampling_is_refused():
    with pytest.raises(ValueError, match="upsample_cfg.type must be 'carafe'"
                       ", got 'deconv'"):
        with DefaultScope.overwrite_default_scope('mmdet'):
            MODELS.build(
                dict(
                    type='CARAFEMaskHead',
                    upsample_cfg=dict(type='deconv', scale_factor=2)))
