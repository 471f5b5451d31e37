"""LearnableNormedConv2d: cosine logits times a learned scale t ** 2."""
import pytest
import torch
import torch.nn.functional as F
from mmengine.registry import MODELS

import mmact  # noqa: F401
from mmact.models.layers import LearnableNormedConv2d


def test_initial_scale_is_4_5_squared():
    conv = LearnableNormedConv2d(8, 3, 1)
    assert conv.scale_root.shape == (1, )
    assert conv.scale.item() == pytest.approx(20.25)
    assert LearnableNormedConv2d(8, 3, 1, scale_root_init=-2).scale.item() \
        == pytest.approx(4.0)


def test_1x1_output_is_scaled_cosine_similarity():
    torch.manual_seed(0)
    conv = LearnableNormedConv2d(16, 5, 1, scale_root_init=3.0, eps=0.0001)
    with torch.no_grad():
        conv.bias.uniform_(-1, 1)
    x = torch.randn(2, 16, 4, 6)
    pixels = x.permute(0, 2, 3, 1).reshape(-1, 16)
    cos = F.cosine_similarity(
        pixels[:, None, :], conv.weight.reshape(1, 5, 16), dim=-1, eps=0)
    expected = (9.0 * cos + conv.bias).reshape(2, 4, 6, 5).permute(0, 3, 1, 2)
    # eps enters both norms; 1e-4 against norms of order 1-4
    torch.testing.assert_close(conv(x), expected, rtol=1e-3, atol=1e-3)
    # scaling the input or a filter does not change the logits
    torch.testing.assert_close(conv(7.0 * x), conv(x), rtol=1e-4, atol=1e-4)


def test_scale_learns_and_gradcheck():
    torch.manual_seed(0)
    conv = LearnableNormedConv2d(4, 2, 3, padding=1).double()
    x = torch.randn(1, 4, 5, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(conv, (x, ))
    conv(x).sum().backward()
    assert conv.scale_root.grad is not None
    assert conv.scale_root.grad.abs().item() > 0
    # d out / d t = 2 t * cosine logits
    conv.zero_grad()
    out = conv(x.detach())
    out.sum().backward()
    cosine = (out - conv.bias.view(1, -1, 1, 1)) / conv.scale
    torch.testing.assert_close(conv.scale_root.grad,
                               (2 * conv.scale_root * cosine.sum()).reshape(1))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match='scale_root_init'):
        LearnableNormedConv2d(4, 2, 1, scale_root_init=0)
    with pytest.raises(ValueError, match='scale_root_init'):
        LearnableNormedConv2d(4, 2, 1, scale_root_init=float('nan'))
    with pytest.raises(ValueError, match='eps'):
        LearnableNormedConv2d(4, 2, 1, eps=0)


def test_mmdet_mask_head_builds_it_and_keeps_the_scale():
    """FCNMaskHead builds predictor_cfg through mmcv's build_conv_layer under
    the mmdet scope; its init_weights re-initialises the conv but not t."""
    pytest.importorskip('mmdet')
    from mmdet.registry import MODELS as DET_MODELS
    from mmengine.registry import DefaultScope

    with DefaultScope.overwrite_default_scope('mmdet'):
        head = DET_MODELS.build(
            dict(
                type='FCNMaskHead',
                num_convs=1,
                in_channels=8,
                conv_out_channels=8,
                num_classes=3,
                predictor_cfg=dict(type='LearnableNormedConv2d')))
    head.init_weights()
    assert isinstance(head.conv_logits, LearnableNormedConv2d)
    assert head.conv_logits.scale.item() == pytest.approx(20.25)
    assert MODELS.get('LearnableNormedConv2d') is LearnableNormedConv2d
    logits = head(torch.randn(2, 8, 7, 7))
    assert logits.shape == (2, 3, 14, 14)
    # |cosine| <= 1, so every logit is bounded by the scale (bias is 0)
    assert logits.abs().max().item() <= 20.25 + 1e-4
