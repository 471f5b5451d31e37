"""projects/fles: the COCO RetinaNet and ImageNet configs train on toy data.

The RetinaNet test runs the real COCO config (not the toy variant), only
pointed at a generated COCO-format set with :func:`mmact.testing.adapt_config`
(which also drops the ImageNet checkpoint), so it checks what a user trains.
"""
import os.path as osp
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.runner import Runner, load_checkpoint

import mmact  # noqa: F401
from mmact.models.activations import FleS
from mmact.testing import adapt_config

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / 'projects' / 'fles' / 'configs'
RETINANET = CONFIGS / 'retinanet_poolformer-s12-fles_fpn_1x_coco.py'
RETINANET_GELU = CONFIGS / 'retinanet_poolformer-s12_fpn_1x_coco.py'
RETINANET_TOY = CONFIGS / 'retinanet_poolformer-s12-fles_fpn_toy-coco.py'
IMAGENET = CONFIGS / 'poolformer-s12_fles_8xb128_in1k.py'

# PoolFormer-S12 has 2 + 2 + 6 + 2 blocks, one token-MLP activation each.
NUM_FLES = 12
NO_DECAY = ('fc1_bias', 'fc2_bias')
DECAY = ('fc1_weight', 'fc2_weight')


class _KeepMetrics(Hook):
    """Remember the metrics of the last validation."""

    def __init__(self):
        self.metrics = None

    def after_val_epoch(self, runner, metrics=None):
        self.metrics = metrics


def _fles_modules(model):
    return [(name, m) for name, m in model.named_modules()
            if isinstance(m, FleS)]


def _check_optimizer(runner, weight_decay):
    """Every FleS parameter is optimised; biases without decay."""
    model = runner.model
    decay_of = {}
    for group in runner.optim_wrapper.optimizer.param_groups:
        for p in group['params']:
            decay_of[id(p)] = group['weight_decay']
    fles = _fles_modules(model)
    assert len(fles) == NUM_FLES
    for name, module in fles:
        assert module.channels is not None, name
        params = dict(module.named_parameters())
        assert set(params) == set(NO_DECAY + DECAY)
        for p_name, p in params.items():
            assert p.requires_grad
            assert id(p) in decay_of, f'{name}.{p_name} not optimised'
            expected = 0.0 if p_name in NO_DECAY else weight_decay
            assert decay_of[id(p)] == pytest.approx(expected), (
                f'{name}.{p_name}: weight decay {decay_of[id(p)]}')


def _fles_state(model):
    return {
        f'{name}.{p_name}': p.detach().clone()
        for name, m in _fles_modules(model)
        for p_name, p in m.named_parameters()
    }


def test_project_configs_parse():
    fles = Config.fromfile(RETINANET)
    gelu = Config.fromfile(RETINANET_GELU)
    toy = Config.fromfile(RETINANET_TOY)
    cls = Config.fromfile(IMAGENET)
    # COCO: windowed FleS from the FleS ImageNet checkpoint; GELU baseline
    # from mmpretrain's GELU weights; the same detector otherwise.
    backbone = fles.model.model.backbone
    assert backbone.act_cfg == dict(
        type='FleS', window_size=(9, 15), reduction=32)
    # stages 2-4 only: every backbone output reaches the FPN (DDP needs a
    # gradient for each parameter)
    assert backbone.out_indices == (2, 4, 6)
    assert backbone.init_cfg.prefix == 'backbone.'
    assert backbone.init_cfg.checkpoint == (
        f'work_dirs/{IMAGENET.stem}/epoch_{cls.train_cfg.max_epochs}.pth')
    assert gelu.model.backbone.act_cfg == dict(type='GELU')
    assert {
        k: v
        for k, v in gelu.model.backbone.items()
        if k not in ('act_cfg', 'init_cfg')
    } == {
        k: v
        for k, v in backbone.items() if k not in ('act_cfg', 'init_cfg')
    }
    assert gelu.optim_wrapper.optimizer == fles.optim_wrapper.optimizer
    assert fles.model.model.neck.in_channels == [128, 320, 512]
    assert fles.model.model.neck.start_level == 0
    # ImageNet: whole-map indicator
    assert cls.model.model.backbone.act_cfg.window_size is None
    assert cls.get('data_preprocessor') is None
    # toy: generated data, no checkpoint
    assert toy.model.model.backbone.init_cfg is None
    assert toy.model.model.bbox_head.num_classes == 8


@pytest.fixture(scope='module')
def coco_root(toy_data_root):
    return toy_data_root('coco', num_train=4, num_val=2)


@pytest.mark.slow
def test_retinanet_fles_trains_evaluates_and_reloads(coco_root, tmp_path):
    cfg = Config.fromfile(RETINANET)
    cfg = adapt_config(
        cfg,
        coco_root,
        num_classes=8,
        work_dir=str(tmp_path / 'work'),
        image_scale=(160, 128),
        max_iters=2,
        batch_size=2)
    assert cfg.model.model.backbone.init_cfg is None  # no ImageNet weights
    # score every box, so that two iterations give CocoMetric something
    cfg.model.model.test_cfg.score_thr = 0.0
    cfg.default_hooks.checkpoint = dict(
        type='CheckpointHook', interval=2, by_epoch=False)
    cfg.param_scheduler = [
        dict(type='ConstantLR', factor=1.0, by_epoch=False, begin=0, end=2)
    ]

    runner = Runner.from_cfg(cfg)
    keep = _KeepMetrics()
    runner.register_hook(keep, 'LOW')
    # materialised when built, windows as configured
    for _, module in _fles_modules(runner.model):
        assert module.channels is not None
        assert module.window_size == (9, 15)
    before = _fles_state(runner.model)

    runner.train()

    _check_optimizer(runner, weight_decay=0.05)

    assert keep.metrics is not None
    assert 0.0 <= keep.metrics['coco/bbox_mAP'] <= 1.0
    after = _fles_state(runner.model)
    assert any(not torch.equal(before[k], after[k]) for k in before)

    # the checkpoint loads strictly into a fresh, still lazy RetinaNet
    ckpt = tmp_path / 'work' / 'iter_2.pth'
    assert ckpt.exists()
    from mmdet.registry import MODELS
    from mmdet.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    fresh = MODELS.build(cfg.model.model)
    assert all(m.channels is None for _, m in _fles_modules(fresh))
    load_checkpoint(fresh, str(ckpt), map_location='cpu', strict=True)
    trained = runner.model.state_dict()
    reloaded = fresh.state_dict()
    assert set(trained) == set(reloaded)
    for key, value in trained.items():
        assert torch.equal(value, reloaded[key]), key


@pytest.mark.slow
def test_imagenet_fles_config_one_train_step(toy_data_root, tmp_path):
    data_root = toy_data_root('cls', num_val_per_class=1)
    assert osp.isfile(osp.join(data_root, 'meta', 'train.txt'))
    cfg = Config.fromfile(IMAGENET)
    cfg = adapt_config(
        cfg,
        data_root,
        num_classes=10,
        work_dir=str(tmp_path / 'work'),
        max_iters=1,
        batch_size=4)
    # Mixup / CutMix build from the (moved) data preprocessor's classes
    assert cfg.model.model.data_preprocessor.num_classes == 10

    runner = Runner.from_cfg(cfg)
    for _, module in _fles_modules(runner.model):
        assert module.channels is not None
        assert module.window_size is None
    before = _fles_state(runner.model)

    runner.train()

    _check_optimizer(runner, weight_decay=0.05)

    after = _fles_state(runner.model)
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed, 'one step left every FleS parameter unchanged'
