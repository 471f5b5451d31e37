"""mmact.testing.narrow_fpn_detector: a shipped detector at a few channels
keeps its types and builds with consistent widths."""
from pathlib import Path

import pytest
import torch

from mmact.testing import narrow_fpn_detector

REPO = Path(__file__).resolve().parents[2]
APA_LVIS = REPO / 'configs/lvis/apa_mrcnn_r50.py'


@pytest.mark.parametrize('depth,block', [(18, 'BasicBlock'),
                                         (50, 'Bottleneck')])
def test_narrowed_detector_builds_and_runs_its_backbone_and_neck(
        depth, block):
    from mmdet.registry import MODELS
    from mmengine.registry import init_default_scope

    from mmact.utils.preflight import load_config
    cfg = load_config(str(APA_LVIS))
    wide = cfg.model.copy()
    narrow_fpn_detector(cfg.model, width=16, depth=depth)
    model = cfg.model
    assert model.backbone.type == wide.backbone.type
    assert model.backbone.act_cfg == wide.backbone.act_cfg
    assert model.roi_head.bbox_head.num_classes == 1203
    expansion = 4 if block == 'Bottleneck' else 1
    assert model.neck.in_channels == [16 * expansion * 2**i for i in range(4)]
    init_default_scope('mmdet')
    model.backbone.init_cfg = []
    detector = MODELS.build(model)
    assert type(detector.backbone.layer1[0]).__name__.endswith(block)
    x = torch.randn(1, 3, 64, 64)
    feats = detector.neck(detector.backbone(x))
    assert [f.shape[1] for f in feats] == [16] * len(feats)


def test_unknown_depth_is_named():
    from mmact.utils.preflight import load_config
    cfg = load_config(str(APA_LVIS))
    with pytest.raises(ValueError, match=r'depth must be one of .*got 26'):
        narrow_fpn_detector(cfg.model, depth=26)


def test_narrowing_options_make_the_same_model_from_the_file():
    """The options a launcher passes to tools/train.py give the model
    narrow_fpn_detector makes, and leave the config they came from alone."""
    import argparse

    from mmengine.config import DictAction

    from mmact.testing import narrowing_options
    from mmact.utils.preflight import load_config
    cfg = load_config(str(APA_LVIS))
    wide = cfg.model.copy()
    options = narrowing_options(cfg.model, width=16, depth=50)
    assert cfg.model == wide
    assert 'model.neck.in_channels=[64,128,256,512]' in options
    parser = argparse.ArgumentParser()
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    cfg.merge_from_dict(
        parser.parse_args(['--cfg-options', *options]).cfg_options)
    assert cfg.model == narrow_fpn_detector(wide, width=16, depth=50)


def test_narrowing_options_name_a_list_of_heads():
    from mmengine.config import ConfigDict

    from mmact.testing import narrowing_options
    from mmact.utils.preflight import load_config
    model = load_config(str(APA_LVIS)).model
    model.roi_head.bbox_head = [ConfigDict(model.roi_head.bbox_head)] * 3
    with pytest.raises(ValueError, match=r'model\.roi_head\.bbox_head: '):
        narrowing_options(model)
