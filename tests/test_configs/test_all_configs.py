"""Every shipped config loads, trains two iterations and evaluates.

Each config under ``configs/`` (and ``projects/**/configs/``) is adapted by
:func:`mmact.testing.adapt_config` to a generated dataset of its format
(COCO, LVIS, V3Det, Objects365, ImageNet-style classification): same model,
losses, hooks, optimizer, dataset wrappers, transforms and metric type; toy
data root, class count, no pretrained weights, small images, two iterations.
New configs are picked up by the glob; ``_base_`` pieces are checked through
the configs that inherit them.

The fast tests check what the short runs cannot: the untouched settings
(custom_imports, the zero-decay constructor, paper hyper-parameters) and that
every detector's pretrained checkpoint is the file its ImageNet config writes.
They read config files only (``stack_independent``: once, on the default
stack).
"""
import functools
import math
import os.path as osp
import re
from glob import glob
from pathlib import Path

import pytest
from mmengine.config import Config
from mmengine.hooks import Hook

import mmact  # noqa: F401
from mmact.models import activations
from mmact.testing import adapt_config, config_data_kind
from mmact.utils.preflight import (check_pretrained_paths,
                                   missing_pretrained_paths)

REPO = Path(__file__).resolve().parents[2]


def _is_base(path: str) -> bool:
    return '_base_' in Path(path).parts


def collect_configs():
    """All runnable configs, repo-relative, sorted."""
    found = glob(str(REPO / 'configs' / '**' / '*.py'), recursive=True)
    found += glob(
        str(REPO / 'projects' / '**' / 'configs' / '**' / '*.py'),
        recursive=True)
    return sorted({
        osp.relpath(p, REPO)
        for p in found if not _is_base(osp.relpath(p, REPO))
    })


CONFIGS = collect_configs()
# The paper configs of configs/ (toy configs and projects have their own
# conventions; they are trained by the slow test all the same).
SHIPPED = [
    c for c in CONFIGS
    if c.startswith('configs/') and not c.startswith('configs/toy/')
]
IMAGENET = [c for c in CONFIGS if c.startswith('configs/imagenet/')]
DETECTION = [c for c in SHIPPED if c not in IMAGENET]

# Format -> number of classes. Tiny sets: 2 training iterations at batch
# 1-2 and 1-2 evaluation images each.
TOY_SETS = {'coco': 8, 'lvis': 10, 'v3det': 8, 'objects365': 8, 'cls': 10}


@functools.lru_cache(maxsize=None)
def _load(config: str) -> Config:
    """Load once per session; callers must not modify the result."""
    return Config.fromfile(str(REPO / config))


@pytest.fixture(scope='session')
def toy_roots(toy_data_root):
    """One generated dataset per format, shared by all config runs."""
    roots = {}
    for kind, num_classes in TOY_SETS.items():
        if kind == 'cls':
            out = toy_data_root(
                kind,
                num_classes=num_classes,
                imbalance=4,
                max_per_class=4,
                num_val_per_class=1,
                image_size=(64, 64))
        else:
            out = toy_data_root(
                kind,
                num_train=6 if kind == 'lvis' else 4,
                num_val=2,
                image_size=(128, 96),
                num_classes=num_classes)
        roots[kind] = (out, num_classes)
    return roots


class _MetricCapture(Hook):
    """Keep the metrics of the last validation run."""
    priority = 'LOWEST'

    def __init__(self):
        self.metrics = None

    def after_val_epoch(self, runner, metrics=None):
        self.metrics = dict(metrics or {})


def _activation_types():
    import torch.nn as nn
    return tuple(
        getattr(activations, name) for name in activations.__all__
        if isinstance(getattr(activations, name), type)
        and issubclass(getattr(activations, name), nn.Module))


def assert_activation_params_not_decayed(model, optimizer):
    """Every trainable activation parameter sits in a zero-decay group.

    Activation parameters are the scalars / vectors of mmact activation
    modules (APA/AGLU kappa and lambda, AReLU alpha/beta, IGLU sigma, FleS
    biases and indicator coefficients). Weight matrices (ndim >= 2, the two
    linear layers inside FleS) are ordinary linear weights and follow the
    optimizer's default decay (projects/fles/README.md, "Configs", its
    weight decay item).
    """
    group_of = {
        id(p): group
        for group in optimizer.param_groups for p in group['params']
    }
    types = _activation_types()
    checked = 0
    for mod_name, module in model.named_modules():
        if not isinstance(module, types):
            continue
        for p_name, param in module.named_parameters(recurse=False):
            if not param.requires_grad or param.ndim >= 2:
                continue  # frozen (no gradient) or a linear weight matrix
            group = group_of.get(id(param))
            assert group is not None, f'{mod_name}.{p_name} not optimised'
            assert group['weight_decay'] == 0, (
                f'{mod_name}.{p_name} has weight decay '
                f'{group["weight_decay"]}')
            checked += 1
    return checked


# Configs that resolve to the same dict (short-name aliases) share one run.
_RUNS = {}


def _dict_key(cfg: Config) -> str:
    return repr(sorted(cfg.to_dict().items(), key=lambda kv: kv[0]))


@pytest.mark.stack_independent
def test_every_config_is_collected():
    """The glob sees every config of the five datasets and the aliases."""
    assert len(SHIPPED) >= 27
    for folder in ('coco', 'lvis', 'v3det', 'objects365', 'imagenet'):
        assert any(c.startswith(f'configs/{folder}/') for c in SHIPPED)
    assert 'configs/lvis/apa_mrcnn_r50.py' in CONFIGS
    on_disk = {
        osp.relpath(p, REPO)
        for p in glob(str(REPO / 'configs' / '**' / '*.py'), recursive=True)
    }
    assert {p for p in on_disk if not _is_base(p)} <= set(CONFIGS)


@pytest.fixture
def plain_config_text(monkeypatch):
    """Skip yapf: the Runner formats each config 2-3 times (about 1 s each
    on 2 cores) only to log and dump it."""
    monkeypatch.setattr(Config, 'pretty_text',
                        property(lambda self: repr(self.to_dict())))


@pytest.mark.slow
@pytest.mark.parametrize('config', CONFIGS)
def test_config_trains_and_evaluates(config, toy_roots, tmp_path,
                                     plain_config_text):
    from mmengine.runner import Runner

    cfg = _load(config)
    key = _dict_key(cfg)
    if key in _RUNS:
        # Same resolved config as one already trained in this session.
        assert _RUNS[key] == 'passed', f'{config}: same config as a failure'
        return
    _RUNS[key] = 'failed'

    kind = config_data_kind(cfg)
    root, num_classes = toy_roots[kind]
    small = adapt_config(
        cfg,
        root,
        num_classes,
        work_dir=str(tmp_path),
        batch_size=2 if kind == 'cls' else 1)
    # The adaptation keeps what is under test.
    assert _metric_types(small.val_evaluator) == _metric_types(
        cfg.val_evaluator)
    assert small.optim_wrapper == cfg.optim_wrapper
    assert small.get('custom_hooks') == cfg.get('custom_hooks')

    runner = Runner.from_cfg(small)
    capture = _MetricCapture()
    runner.register_hook(capture)
    runner.train()

    assert runner.iter == 2
    metrics = capture.metrics
    assert metrics, f'{config}: evaluation produced no metrics'
    for metric in runner.val_evaluator.metrics:
        prefix = f'{metric.prefix}/'
        assert any(k.startswith(prefix) for k in metrics), (prefix, metrics)
    assert all(math.isfinite(v) for v in metrics.values()
               if isinstance(v, float))

    model = runner.model.module if hasattr(runner.model,
                                           'module') else runner.model
    checked = assert_activation_params_not_decayed(
        model, runner.optim_wrapper.optimizer)
    backbone = cfg.model.get('backbone', {})
    if backbone.get('act_cfg', {}).get('type') in ('AGLU', 'APA') or \
            backbone.get('attention_cfg', {}).get('type') == 'APASELayer':
        assert checked > 0
    _RUNS[key] = 'passed'


def _metric_types(evaluator):
    metrics = evaluator if isinstance(evaluator, (list, tuple)) else [
        evaluator
    ]
    return [m['type'] for m in metrics]


# ---------------------------------------------------------------------------
# fast checks of the untouched settings
def _network(backbone):
    """The backbone that is built: the inner one of an ActSwapBackbone."""
    return (backbone.backbone
            if backbone.type == 'ActSwapBackbone' else backbone)


@pytest.mark.stack_independent
@pytest.mark.parametrize('config', SHIPPED)
def test_config_settings(config):
    cfg = _load(config)
    assert cfg.custom_imports == dict(
        imports=['mmact'], allow_failed_imports=False)
    # zero weight decay on what the activations declare
    assert cfg.optim_wrapper.constructor == 'ActivationOptimWrapperConstructor'
    backbone = cfg.model.backbone
    name = Path(config).stem
    # the name says backbone / activation
    if backbone.type in ('ActResNet', 'ActResNeXt'):
        tag = {
            ('ReLU', 'SEAttention'): 'se-relu',
            ('AGLU', 'APASELayer'): 'apase-aglu',
            ('AGLU', None): 'aglu',
            ('ReLU', 'APASELayer'): 'apase-relu',
            ('ReLU', 'CBAMAttention'): 'cbam-relu',
            ('AGLU', 'APACBAMAttention'): 'apacbam-aglu',
        }[(backbone.act_cfg.type,
           (backbone.get('attention_cfg') or {}).get('type'))]
        letter = 'x' if backbone.type == 'ActResNeXt' else 'r'
        if config != 'configs/lvis/apa_mrcnn_r50.py':
            assert f'{tag}-{letter}{backbone.depth}' in name
    elif backbone.type == 'ActSwapBackbone':
        # a ReLU ResNet whose activations are fitted by the new ones
        assert backbone.match and backbone.backbone.type == 'ResNet'
        tag = f'{backbone.act_cfg.type.lower()}-match'
        assert f'{tag}-r{backbone.backbone.depth}' in name
    else:
        assert backbone.type == 'ResNet' and f'_r{backbone.depth}_' in name


@pytest.mark.stack_independent
@pytest.mark.parametrize('config', [c for c in SHIPPED
                                    if c.startswith('configs/lvis/')])
def test_lvis_settings(config):
    cfg = _load(config)
    head = cfg.model.roi_head
    assert head.bbox_head.loss_cls.type == 'GOLLoss'
    assert dict(type='GOLFrequencyHook') in cfg.custom_hooks
    # the authors' released LVIS models (kostas1515/AGLU,
    # mmdetection_v3.2/configs/activations/mask_rcnn_r{50,101}_fpn_*_lvis_2x)
    assert head.bbox_head.loss_cls.logit_range == (-10, 10)
    assert head.bbox_head.loss_cls.min_logit is None
    assert head.bbox_head.init_cfg == dict(
        type='Constant', val=0.001, bias=-2.0, override=dict(name='fc_cls'))
    if _network(cfg.model.backbone).depth == 50:
        assert head.mask_head.type == 'CARAFEMaskHead'
        assert head.mask_head.upsample_cfg == dict(
            type='carafe',
            scale_factor=2,
            up_kernel=5,
            up_group=1,
            encoder_kernel=3,
            encoder_dilation=1,
            compressed_channels=64)
        # Table XV: learnable normalised-mask scale
        assert head.mask_head.predictor_cfg == dict(
            type='LearnableNormedConv2d')
    elif 'se-relu' in config or 'apase-aglu' in config:
        assert head.mask_head.type == 'FCNMaskHead'
        assert head.mask_head.upsample_cfg == dict(
            type='deconv', scale_factor=2)
        assert head.mask_head.predictor_cfg == dict(
            type='NormedConv2d', tempearture=20)
    rcnn = cfg.model.test_cfg.rcnn
    assert rcnn.nms == dict(type='nms', iou_threshold=0.3)
    assert rcnn.mask_thr_binary == 0.4
    train = cfg.train_dataloader
    assert train.dataset.type == 'ClassBalancedDataset'
    assert train.dataset.oversample_thr == 1e-3
    resize = train.dataset.dataset.pipeline[2]
    assert resize.type == 'RandomChoiceResize'
    assert [s[1] for s in resize.scales] == [640, 672, 704, 736, 768, 800]
    assert cfg.train_cfg.max_epochs == 24
    assert cfg.param_scheduler[1].milestones == [16, 22]
    assert cfg.optim_wrapper.optimizer.lr == 0.02
    assert cfg.optim_wrapper.optimizer.weight_decay == 1e-4
    # Table XV: bias weight decay 0, norm weight decay 1e-4
    assert cfg.optim_wrapper.paramwise_cfg.bias_decay_mult == 0.0
    assert cfg.optim_wrapper.paramwise_cfg.norm_decay_mult == 1.0
    assert train.batch_size == 2  # x 8 GPUs = 16 images
    assert cfg.model.test_cfg.rcnn.score_thr == 1e-4
    assert cfg.model.test_cfg.rcnn.max_per_img == 300
    assert cfg.val_evaluator.type == 'LVISMetric'
    assert cfg.val_evaluator.metric == ['bbox', 'segm']


@pytest.mark.stack_independent
def test_mission_config_is_the_apa_r50_lvis_config():
    short = _load('configs/lvis/apa_mrcnn_r50.py')
    full = _load('configs/lvis/mask-rcnn_apase-aglu-r50_fpn_gol-normmask_'
                 '8xb2-rfs-ms-2x_lvis-v1.py')
    assert short.to_dict() == full.to_dict()
    assert short.model.backbone.depth == 50
    assert short.model.backbone.act_cfg.type == 'AGLU'
    assert short.model.backbone.attention_cfg.type == 'APASELayer'


@pytest.mark.stack_independent
@pytest.mark.parametrize('config', [c for c in SHIPPED
                                    if c.startswith('configs/v3det/')])
def test_v3det_settings(config):
    cfg = _load(config)
    heads = cfg.model.roi_head.bbox_head
    heads = heads if isinstance(heads, list) else [heads]
    assert all(h.num_classes == 13204 for h in heads)
    assert cfg.train_dataloader.dataset.type == 'ClassBalancedDataset'
    assert cfg.optim_wrapper.optimizer.type == 'AdamW'
    if 'se-relu' in config or 'apase-aglu' in config:
        # the authors' V3Det models (kostas1515/AGLU, mmdetection_v3.2/
        # configs/activations/se_*_v3det_2x_wc_{baseline,unirect}.py)
        assert len(heads) == (3 if 'cascade' in config else 1)
        for head in heads:
            assert head.cls_predictor_cfg == dict(
                type='WrappedCauchyLinear', s_trainable=False)
            assert head.loss_cls == dict(
                type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0)


@pytest.mark.stack_independent
@pytest.mark.parametrize('config', IMAGENET)
def test_imagenet_recipe(config):
    cfg = _load(config)
    optimizer = cfg.optim_wrapper.optimizer
    assert cfg.model.train_cfg.augments == dict(type='Mixup', alpha=0.2)
    assert any(t.type == 'AutoAugment'
               for t in cfg.train_dataloader.dataset.pipeline)
    assert cfg.train_dataloader.batch_size == 32  # x 8 GPUs = 256
    if config.endswith('in1k-lt.py'):  # Alexandridis et al. 2025, Table XV
        assert (optimizer.lr, optimizer.weight_decay) == (0.2, 1e-4)
        assert cfg.train_cfg.max_epochs == 200
        # PC-Softmax (Table XIX) around the cosine classifier
        head = cfg.model.head
        # the authors' ImageNet-LT classifier (kostas1515/AGLU,
        # classification/resnet_cifar.py, CosNorm_Classifier)
        assert head.type == 'PCSoftmaxCosNormClsHead'
        assert head.scale == 16.0
        assert cfg.optim_wrapper.paramwise_cfg.bias_decay_mult == 0.0
        train_ann = cfg.train_dataloader.dataset
        assert 'ImageNet_LT' in train_ann.ann_file
        # prior and Many/Medium/Few groups come from the training split
        assert head.train_ann_file == train_ann.data_root + train_ann.ann_file
        assert [m.type for m in cfg.val_evaluator] == ['Accuracy',
                                                      'ShotAccuracy']
        assert cfg.val_evaluator[1].train_ann_file == head.train_ann_file
    else:  # Alexandridis et al. 2025, Sec. VI-A, with the authors' public
        # command's weight decay, momentum and warm-up (the paper's 6e-6 is
        # a 10x typo)
        assert (optimizer.lr, optimizer.weight_decay,
                optimizer.momentum) == (0.256, 6.103515625e-05, 0.875)
        warmup, cosine = cfg.param_scheduler
        assert (warmup.type, warmup.start_factor, warmup.end) == ('LinearLR',
                                                                  0.01, 3)
        assert (cosine.type, cosine.begin, cosine.end) == (
            'CosineAnnealingLR', 3, 100)
        assert cfg.train_cfg.max_epochs == 100


# ---------------------------------------------------------------------------
# pretrained checkpoints
_WORK_DIR_CKPT = re.compile(r'^work_dirs/(?P<stem>[^/]+)/epoch_(?P<n>\d+)\.pth$')


def _arch(backbone) -> tuple:
    return (backbone.type, backbone.depth, backbone.act_cfg.type,
            (backbone.get('attention_cfg') or {}).get('type'))


@pytest.mark.stack_independent
@pytest.mark.parametrize('config', DETECTION)
def test_pretrained_checkpoint_is_what_the_imagenet_config_writes(config):
    cfg = _load(config)
    backbone = _network(cfg.model.backbone)
    init = backbone.init_cfg
    assert init.type == 'Pretrained'
    if backbone.type != 'ActResNet':  # plain ResNet: torchvision weights
        assert init.checkpoint == f'torchvision://resnet{backbone.depth}'
        return
    match = _WORK_DIR_CKPT.match(init.checkpoint)
    assert match, init.checkpoint
    assert init.prefix == 'backbone.'
    producer = f'configs/imagenet/{match["stem"]}.py'
    assert producer in IMAGENET, producer
    pre = _load(producer)
    # tools/train.py's default work dir is work_dirs/<config name>; the last
    # epoch is always saved there (CheckpointHook save_last).
    assert pre.get('work_dir') is None
    assert pre.train_cfg.max_epochs == int(match['n'])
    assert pre.default_hooks.checkpoint.get('save_last', True)
    # same network: state-dict keys line up under prefix 'backbone.'
    assert _arch(pre.model.backbone) == _arch(backbone)
    assert pre.model.backbone.get('deep_stem', False) == backbone.get(
        'deep_stem', False)


@pytest.mark.stack_independent
def test_check_pretrained_paths(tmp_path, monkeypatch):
    cfg = _load('configs/lvis/apa_mrcnn_r50.py')
    path = cfg.model.backbone.init_cfg.checkpoint
    monkeypatch.chdir(tmp_path)  # no work_dirs/ here
    with pytest.raises(FileNotFoundError) as error:
        check_pretrained_paths(cfg)
    message = str(error.value)
    assert path in message
    assert 'model.backbone.init_cfg.checkpoint' in message
    assert 'configs/imagenet/apase-aglu-r50_8xb32-coslr-100e_in1k.py' \
        in message
    assert 'tools/dist_train.sh' in message

    (tmp_path / path).parent.mkdir(parents=True)
    (tmp_path / path).write_bytes(b'')
    check_pretrained_paths(cfg)  # present: no error


@pytest.mark.stack_independent
def test_check_pretrained_paths_lists_or_skips():
    cfg = Config(
        dict(
            model=dict(
                backbone=dict(
                    init_cfg=dict(
                        type='Pretrained',
                        checkpoint='torchvision://resnet50')),
                neck=dict(init_cfg=[
                    dict(type='Xavier', layer='Conv2d'),
                    dict(type='Pretrained', checkpoint='/nowhere/neck.pth')
                ]))))
    assert missing_pretrained_paths(cfg) == [
        '/nowhere/neck.pth (model.neck.init_cfg[1].checkpoint)'
    ]
    with pytest.raises(FileNotFoundError, match='init_cfg=None'):
        check_pretrained_paths(cfg)
    check_pretrained_paths(Config(dict(model=dict(type='X'))))


@pytest.mark.slow
def test_imagenet_checkpoint_initialises_the_detector_backbone(
        tmp_path, monkeypatch):
    """What the ImageNet config saves loads into the LVIS detector."""
    import torch
    from mmdet.registry import MODELS as DET_MODELS
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS as CLS_MODELS

    det_cfg = _load('configs/lvis/apa_mrcnn_r50.py')
    path = det_cfg.model.backbone.init_cfg.checkpoint
    stem = _WORK_DIR_CKPT.match(path)['stem']
    cls_cfg = _load(f'configs/imagenet/{stem}.py')

    init_default_scope('mmpretrain')
    classifier = CLS_MODELS.build(cls_cfg.model)
    classifier.init_weights()
    with torch.no_grad():  # make the activation parameters recognisable
        for name, param in classifier.named_parameters():
            if name.endswith(('kappa_param', 'lambda_param')):
                param.fill_(0.5 + 0.001 * len(name))
    monkeypatch.chdir(tmp_path)
    Path(path).parent.mkdir(parents=True)
    # the layout mmengine's CheckpointHook writes
    torch.save({'meta': {}, 'state_dict': classifier.state_dict()}, path)

    init_default_scope('mmdet')
    backbone = DET_MODELS.build(det_cfg.model.backbone)
    backbone.init_weights()
    expected = {
        k[len('backbone.'):]: v
        for k, v in classifier.state_dict().items()
        if k.startswith('backbone.')
    }
    loaded = backbone.state_dict()
    assert set(loaded) == set(expected)
    for key, value in expected.items():
        assert torch.equal(loaded[key], value), key


@pytest.mark.stack_independent
@pytest.mark.parametrize('config', SHIPPED)
def test_missing_data_is_named(config, tmp_path, monkeypatch):
    """tools/train.py's data check sees every dataset of every config."""
    from mmact.utils.preflight import check_data_paths, missing_data_paths

    cfg = _load(config)
    monkeypatch.chdir(tmp_path)  # no data/ here
    missing = missing_data_paths(cfg, ('train', 'val', 'test'))
    for split in ('train', 'val', 'test'):
        assert any(f'{split}_dataloader.' in m and '.ann_file' in m
                   for m in missing), (split, missing)
    # a generated set: its command; a real one: its publisher's download
    fill = 'generate_toy_data.py' if config.startswith('configs/toy/') \
        else 'from https://'
    with pytest.raises(FileNotFoundError, match=fill):
        check_data_paths(cfg, ('train', 'val'))


@pytest.mark.slow
def test_train_tool_stops_on_missing_pretrained_checkpoint(
        toy_roots, tmp_path):
    """The mission command's config with its data present but no ImageNet
    checkpoint: tools/train.py names the file and the command making it,
    before a work dir is created."""
    from mmact.testing.tool_fork import run_python

    (tmp_path / 'data').mkdir()
    (tmp_path / 'data' / 'lvis_v1').symlink_to(toy_roots['lvis'][0])
    result = run_python([
        REPO / 'tools' / 'train.py', REPO / 'configs' / 'lvis' /
        'apa_mrcnn_r50.py'
    ],
                        cwd=tmp_path,
                        timeout=300)
    assert result.returncode == 1
    # one refusal line (mmact/utils/refusal.py), no traceback
    refusal = result.stderr.strip().splitlines()[-1]
    assert refusal.startswith('mmact: Pretrained checkpoints'), result.stderr
    assert 'Traceback' not in result.stderr
    assert 'work_dirs/apase-aglu-r50_8xb32-coslr-100e_in1k/epoch_100.pth' \
        in refusal
    assert 'Dataset paths' not in result.stderr
    assert not (tmp_path / 'work_dirs').exists()
