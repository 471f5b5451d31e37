"""mmdet's face: an installed mmdet config with DCN or a plugin trains with
learnable activations once its backbone type is ``ActResNet``."""
import os

import pytest
import torch
import torch.nn as nn
from mmcv.ops import DeformConv2dPack
from mmengine.config import Config
from mmengine.registry import DefaultScope

import mmact  # noqa: F401
from mmact.models.activations.base import LearnableActivation


def _mmdet_config(name):
    import mmdet
    return os.path.join(
        os.path.dirname(mmdet.__file__), '.mim', 'configs', name)


def _has_gc_block(block):
    from mmcv.cnn import ContextBlock
    return any(isinstance(m, ContextBlock) for m in block.children())


@pytest.mark.slow
@pytest.mark.parametrize(
    'config,check',
    [('dcn/faster-rcnn_r50-dconv-c3-c5_fpn_1x_coco.py', 'dcn'),
     ('gcnet/mask-rcnn_r50-gcb-r4-c3-c5_fpn_1x_coco.py', 'plugin')])
def test_mmdet_config_trains_a_step_with_aglu(config, check):
    from mmdet.registry import MODELS
    from mmdet.testing import demo_mm_inputs
    cfg = Config.fromfile(_mmdet_config(config))
    cfg.model.backbone.update(
        type='ActResNet',
        act_cfg=dict(type='AGLU'),
        init_cfg=None,
        # a zero last norm passes no gradient into its branch: the one step
        # would not reach the activations, DCN offsets and plugins inside
        zero_init_residual=False)
    with DefaultScope.overwrite_default_scope('mmdet'):
        model = MODELS.build(cfg.model)
    model.init_weights()
    backbone = model.backbone
    # mmdet's places: DCN in conv2 of stages 2-4, the GC block after conv3
    # of stages 2-4; an AGLU at every activation position
    if check == 'dcn':
        assert not isinstance(backbone.layer1[0].conv2, DeformConv2dPack)
        assert all(
            isinstance(block.conv2, DeformConv2dPack)
            for layer in (backbone.layer2, backbone.layer3, backbone.layer4)
            for block in layer)
    else:
        assert not _has_gc_block(backbone.layer1[0])
        assert all(
            _has_gc_block(block)
            for layer in (backbone.layer2, backbone.layer3, backbone.layer4)
            for block in layer)
    activations = [
        m for m in backbone.modules() if isinstance(m, LearnableActivation)
    ]
    assert len(activations) == 1 + 3 * 16
    assert not any(isinstance(m, nn.ReLU) for m in backbone.modules()
                   if not _inside_plugin(backbone, m))

    torch.manual_seed(0)
    data = demo_mm_inputs(
        2, [[3, 128, 128], [3, 128, 160]],
        num_items=[3, 2],
        num_classes=80,
        with_mask=check == 'plugin')
    model.train()
    data = model.data_preprocessor(data, True)
    loss, _ = model.parse_losses(model(**data, mode='loss'))
    assert torch.isfinite(loss)
    loss.backward()
    grads = {n: p.grad for n, p in backbone.named_parameters()}
    # frozen_stages=1: no gradient for the stem and stage 1, activations too
    frozen = {n for n in grads if n.startswith(('conv1', 'bn1', 'relu.',
                                                'layer1.'))}
    assert frozen and all(grads[n] is None for n in frozen)
    # every activation of the trained stages learns, at every position
    # (the memory-lean path's rebuilt backward included)
    acts = [n for n in grads if '.act' in n and n not in frozen]
    assert len(acts) == 2 * 3 * 13  # kappa, lambda; 13 blocks in stages 2-4
    assert all(grads[n] is not None and torch.isfinite(grads[n]).all()
               and grads[n].abs().sum() > 0 for n in acts)
    # and so do the DCN offsets / the GC block (its last conv starts at 0)
    extra = ('conv2.conv_offset.weight' if check == 'dcn' else
             'context_block.channel_add_conv.3.weight')
    assert grads[f'layer3.0.{extra}'].abs().sum() > 0
    before = {n: p.detach().clone() for n, p in backbone.named_parameters()}
    torch.optim.SGD([p for p in model.parameters() if p.requires_grad],
                    lr=0.01).step()
    assert not torch.equal(before['layer4.2.conv3.weight'],
                           backbone.layer4[2].conv3.weight)


def _inside_plugin(backbone, module):
    """The GC block keeps its own ReLU (a plugin's, not a position's)."""
    from mmcv.cnn import ContextBlock
    return any(module in list(m.modules()) for m in backbone.modules()
               if isinstance(m, ContextBlock))
