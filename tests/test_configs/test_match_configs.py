"""The function-preserving swap configs: COCO / LVIS Mask R-CNN from mmdet's
ReLU ResNet-50 checkpoint with every ReLU fitted by an AGLU, and their toy
versions trained from a ReLU checkpoint."""
import copy
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.registry import MODELS, DefaultScope
from mmengine.runner import Runner, save_checkpoint

import mmact  # noqa: F401
from mmact.models.utils import swap_activations
from mmact.testing.config_adapt import adapt_config

REPO = Path(__file__).resolve().parents[2]

PAIRS = {
    'configs/coco/mask-rcnn_aglu-match-r50_fpn_8xb2-2x_coco.py':
    'mmdet::mask_rcnn/mask-rcnn_r50_fpn_2x_coco.py',
    'configs/lvis/mask-rcnn_aglu-match-r50_fpn_gol-normmask_8xb2-rfs-ms-2x_'
    'lvis-v1.py':
    'configs/lvis/mask-rcnn_r50_fpn_gol-normmask_8xb2-rfs-ms-2x_lvis-v1.py',
}


def _load(path: str) -> Config:
    if path.startswith('mmdet::'):
        import mmdet
        return Config.fromfile(
            str(
                Path(mmdet.__file__).parent / '.mim' / 'configs' /
                path[len('mmdet::'):]))
    return Config.fromfile(str(REPO / path))


def _unscoped(node):
    """``node`` without the ``_scope_`` keys mmdet:: inheritance adds."""
    if isinstance(node, dict):
        return {k: _unscoped(v) for k, v in node.items() if k != '_scope_'}
    if isinstance(node, (list, tuple)):
        return type(node)(_unscoped(v) for v in node)
    return node


@pytest.mark.parametrize('config,relu_config', PAIRS.items())
def test_matched_config_is_the_relu_recipe_with_a_fitted_swap(
        config, relu_config):
    cfg, relu = _load(config), _load(relu_config)
    backbone = cfg.model.backbone
    assert backbone.type == 'ActSwapBackbone'
    assert backbone.act_cfg == dict(type='AGLU')
    assert backbone.match is True and backbone.untie is True
    # the inner backbone is mmdet's ReLU ResNet-50 from torchvision's
    # weights, exactly as in the ReLU recipe
    assert _unscoped(backbone.backbone) == _unscoped(relu.model.backbone)
    assert backbone.backbone.init_cfg == dict(
        type='Pretrained', checkpoint='torchvision://resnet50')
    model, expected = _unscoped(cfg.model), _unscoped(relu.model)
    model.pop('backbone'), expected.pop('backbone')
    assert model == expected
    for key in ('train_dataloader', 'test_evaluator', 'train_cfg',
                'param_scheduler'):
        assert _unscoped(cfg[key]) == _unscoped(relu[key]), key
    assert cfg.optim_wrapper.constructor == 'ActivationOptimWrapperConstructor'


@pytest.mark.slow
@pytest.mark.parametrize('fmt,num_classes,config', [
    ('coco', 8, 'configs/toy/mask-rcnn_aglu-match-r50_fpn_toy-coco.py'),
    ('lvis', 10, 'configs/toy/mask-rcnn_aglu-match-r50_fpn_toy-lvis.py'),
])
def test_toy_config_trains_from_a_relu_checkpoint_and_tests(
        fmt, num_classes, config, toy_data_root, tmp_path):
    root = toy_data_root(
        fmt, num_train=6, num_val=2, image_size=(128, 96),
        num_classes=num_classes)
    cfg = adapt_config(
        _load(config), root, num_classes, work_dir=str(tmp_path / 'run'),
        batch_size=1)
    # A "pretrained" ReLU detector: the plain toy model with BN affines
    # that are not the init's.
    relu_cfg = copy.deepcopy(cfg.model)
    relu_cfg.backbone = relu_cfg.backbone.backbone
    with DefaultScope.overwrite_default_scope('mmdet'):
        relu_model = MODELS.build(relu_cfg)
    torch.manual_seed(0)
    for m in relu_model.backbone.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.weight.data.uniform_(0.3, 1.2)
            m.bias.data.normal_(0, 0.3)
    path = str(tmp_path / 'relu.pth')
    save_checkpoint(dict(state_dict=relu_model.state_dict()), path)
    cfg.load_from = path

    runner = Runner.from_cfg(cfg)
    runner.train()
    assert runner.iter == 2
    model = runner.model
    acts = [
        m for n, m in model.backbone.named_modules()
        if type(m).__name__ == 'AGLU'
    ]
    assert len(acts) == 49

    expected = copy.deepcopy(relu_model.backbone)
    expected.eval()
    swap_activations(expected, dict(type='AGLU'), untie=True, match=True,
                     example_input=(4, 3, 96, 128))
    fitted = dict(expected.named_modules())
    for name, act in model.backbone.named_modules():
        if type(act).__name__ == 'AGLU':
            # two SGD steps move the fitted values only slightly; the init
            # range U(1, 1.3) is far from them (kappa ~ 12 / spread)
            assert torch.allclose(
                act.kappa_param, fitted[name].kappa_param, rtol=0.1), name
            assert float(act.kappa_param) > 2.0, name

    metrics = runner.test()
    assert metrics and all(torch.isfinite(torch.tensor(v))
                           for v in metrics.values()
                           if isinstance(v, float))
