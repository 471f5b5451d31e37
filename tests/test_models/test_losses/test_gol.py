"""GOLLoss: Gumbel BCE values and stability, drop-loss rule, class
frequencies (argument, file, hook), mmdet protocol, Mask R-CNN integration."""
import json
import math
import os
from types import SimpleNamespace
from unittest import mock

import mmdet
import pytest
import torch
import torch.nn as nn

import mmact  # noqa: F401
from mmact.models.losses import (GOLLoss, gumbel_activation,
                                 gumbel_binary_cross_entropy)


def naive_gumbel_bce(s, t):
    """Textbook BCE of p = exp(-exp(-s)), float64 (fine for small |s|)."""
    p = torch.exp(-torch.exp(-s.double()))
    return -(t * torch.log(p) + (1 - t) * torch.log(1 - p))


def mp_reference(s, target, min_logit):
    """-log p or -log(1 - p) of p = exp(-exp(-s)) with 50 mpmath digits."""
    import mpmath
    with mpmath.workdps(50):
        x = mpmath.mpf(s)
        if target == 1.0:
            if x < min_logit:  # the documented linear continuation
                m = mpmath.mpf(min_logit)
                return float(mpmath.exp(-m) * (1 + m - x))
            return float(mpmath.exp(-x))
        return float(-mpmath.log(-mpmath.expm1(-mpmath.exp(-x))))


def one_hot(labels, c):
    """(N, C) targets, background label C gives an all-zero row."""
    return nn.functional.one_hot(labels, c + 1)[:, :c].double()


# ---------------------------------------------------------------- values
def test_elementwise_matches_naive_formula():
    g = torch.Generator().manual_seed(0)
    s = torch.rand(64, 7, generator=g, dtype=torch.float64) * 9.5 - 3.5
    t = (torch.rand(64, 7, generator=g) < 0.3).double()
    out = gumbel_binary_cross_entropy(s, t)
    assert out.dtype == torch.float64
    torch.testing.assert_close(
        out, naive_gumbel_bce(s, t), rtol=1e-10, atol=1e-12)


def test_loss_without_drop_is_mean_over_rois_of_class_sum():
    g = torch.Generator().manual_seed(1)
    s = torch.randn(10, 4, generator=g, dtype=torch.float64)
    labels = torch.tensor([0, 1, 2, 3, 4, 4, 0, 4, 2, 4])
    loss = GOLLoss(use_drop_loss=False)
    expected = naive_gumbel_bce(s, one_hot(labels, 4)).sum() / 10
    torch.testing.assert_close(loss(s, labels), expected)
    # mmdet passes label weights and avg_factor = #RoIs with weight > 0
    w = torch.tensor([1., 1, 1, 1, 1, 0, 1, 1, 1, 0])
    per_roi = naive_gumbel_bce(s, one_hot(labels, 4)).sum(1)
    torch.testing.assert_close(
        loss(s, labels, w, avg_factor=8.), (per_roi * w).sum() / 8)
    torch.testing.assert_close(
        loss(s, labels, reduction_override='none'), per_roi)
    torch.testing.assert_close(
        GOLLoss(use_drop_loss=False,
                loss_weight=0.5)(s, labels, reduction_override='sum'),
        per_roi.sum() * 0.5)


def test_logit_range_clamps_as_the_authors_drop_loss():
    """logit_range=(-10, 10): the loss of the clamped logits, no gradient
    outside; at large |logits| it differs from the linear continuation."""
    s = torch.tensor([[-30.0, -10.5, -5.0, 3.0, 10.5, 40.0]],
                     dtype=torch.float64).repeat(2, 1).requires_grad_()
    labels = torch.tensor([0, 6])  # one positive (class 0), one background
    loss = GOLLoss(use_drop_loss=False, min_logit=None, logit_range=(-10, 10))
    value = loss(s, labels, reduction_override='none')
    clamped = s.detach().clamp(-10, 10)
    p = torch.exp(-torch.exp(-clamped))  # -log p = exp(-s) exactly
    want = torch.stack([
        torch.exp(-clamped[0, 0]) - torch.log1p(-p[0, 1:]).sum(),
        -torch.log1p(-p[1]).sum()
    ])
    torch.testing.assert_close(value, want, rtol=1e-12, atol=0)
    value.sum().backward()
    outside = (s.detach() < -10) | (s.detach() > 10)
    assert (s.grad[outside] == 0).all() and (s.grad[~outside] != 0).all()
    linear = GOLLoss(use_drop_loss=False)(s, labels, reduction_override='none')
    assert not torch.allclose(linear, value)
    with pytest.raises(ValueError, match='set min_logit=None'):
        GOLLoss(logit_range=(-10, 10))
    with pytest.raises(ValueError, match='low < high'):
        GOLLoss(min_logit=None, logit_range=(10, -10))


def test_positive_term_continues_linearly_below_min_logit():
    s = torch.tensor([-10.0, -4.0, -2.0],
                     dtype=torch.float64,
                     requires_grad=True)
    out = gumbel_binary_cross_entropy(s, torch.ones(3), min_logit=-4.0)
    e4 = math.exp(4.0)
    torch.testing.assert_close(
        out.detach(),
        torch.tensor([e4 * 7, e4, math.exp(2.0)], dtype=torch.float64))
    out.sum().backward()
    # slope -e^4 below -4 (never 0 as with a plain clamp), -e^{-s} above
    torch.testing.assert_close(
        s.grad, torch.tensor([-e4, -e4, -math.exp(2.0)], dtype=torch.float64))
    exact = gumbel_binary_cross_entropy(
        torch.tensor([-10.0], dtype=torch.float64),
        torch.ones(1),
        min_logit=None)
    torch.testing.assert_close(
        exact, torch.tensor([math.exp(10.0)], dtype=torch.float64))


@pytest.mark.parametrize('dtype',
                         [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize('min_logit', [-4.0, -60.0])
def test_finite_and_accurate_for_logits_in_pm50(dtype, min_logit):
    s64 = torch.linspace(-50, 50, 2001, dtype=torch.float64)
    s = s64.to(dtype).requires_grad_(True)
    for target in (0.0, 1.0):
        t = torch.full_like(s64, target)
        out = gumbel_binary_cross_entropy(s, t, min_logit=min_logit)
        assert out.dtype == torch.float32
        grad, = torch.autograd.grad(out.sum(), s)
        assert torch.isfinite(out).all()
        if dtype == torch.float16 and min_logit < -11 and target == 1.0:
            # the exact slope -exp(-s) cannot fit a float16 gradient for
            # s < -11: what the default linear continuation is for
            assert not torch.isfinite(grad).all()
        else:
            assert torch.isfinite(grad).all()
        # 50-digit reference on the rounded inputs
        ref = torch.tensor([
            mp_reference(v, target, min_logit)
            for v in s.detach().double().tolist()
        ],
                           dtype=torch.float64)
        # atol: negligible losses (s < -4: 1e-24 .. 0) whose float32 value
        # is limited by the rounding of exp(-s) or underflows
        torch.testing.assert_close(out.double(), ref, rtol=2e-6, atol=1e-20)
    # where p rounds to 1 the negative term still grows (slope 1) and a
    # wrong positive still gets pushed up: no vanishing gradient at the ends
    s = torch.tensor([50.0, -50.0], requires_grad=True)
    out = gumbel_binary_cross_entropy(s, torch.tensor([0.0, 1.0]))
    out.sum().backward()
    assert out[0].item() == pytest.approx(50.0)
    assert s.grad[0].item() == pytest.approx(1.0)
    assert s.grad[1].item() == pytest.approx(-math.exp(4.0), rel=1e-6)


def test_gradcheck_across_branches():
    s = torch.tensor([-6.0, -3.7, -0.3, 0.8, 11.5, 12.5, 30.0],
                     dtype=torch.float64,
                     requires_grad=True)
    for target in (0.0, 1.0):
        t = torch.full_like(s, target)
        assert torch.autograd.gradcheck(
            lambda x: gumbel_binary_cross_entropy(x, t), (s, ))


# -------------------------------------------------------------- drop rule
def _freq_loss(**kwargs):
    """Classes 0, 1 rare (1 image of 10000), 2, 3 frequent."""
    loss = GOLLoss(num_classes=4, **kwargs)
    loss.set_class_image_counts([1, 5, 500, 4000], 10000)
    return loss


def test_rare_classes_follow_threshold():
    assert _freq_loss().rare_classes().tolist() == [True, True, False, False]
    assert _freq_loss(rare_threshold=1e-4).rare_classes().tolist() == [
        False, False, False, False
    ]


def test_foreground_rois_drop_rare_negatives_only():
    labels = torch.tensor([2, 0, 3, 1])
    w = _freq_loss().drop_weights(labels, 4)
    assert w.tolist() == [
        [0, 0, 1, 1],  # frequent positive: both rare negatives dropped
        [1, 0, 1, 1],  # rare positive kept, other rare negative dropped
        [0, 0, 1, 1],
        [0, 1, 1, 1],
    ]


def test_background_rois_r0_drops_all_rare_negatives_r1_none():
    bg = torch.full((200, ), 4)
    # r = 0: every foreground RoI is frequent -> drop with probability 1
    w = _freq_loss().drop_weights(torch.cat([torch.tensor([2, 3]), bg]), 4)
    assert (w[2:, :2] == 0).all() and (w[2:, 2:] == 1).all()
    # r = 1: every foreground RoI is rare -> never drop on background
    w = _freq_loss().drop_weights(torch.cat([torch.tensor([0, 1]), bg]), 4)
    assert (w[2:] == 1).all()
    assert w[:2].tolist() == [[1, 0, 1, 1], [0, 1, 1, 1]]
    # no foreground RoI: r undefined, background negatives kept
    assert (_freq_loss().drop_weights(bg, 4) == 1).all()


def test_background_drop_probability_and_seeding():
    labels = torch.cat([torch.tensor([0, 2, 3, 2]),
                        torch.full((4000, ), 4)])  # r = 1/4
    runs = []
    for _ in range(2):
        loss = _freq_loss(generator=torch.Generator().manual_seed(7))
        runs.append(loss.drop_weights(labels, 4))
    assert torch.equal(runs[0], runs[1])
    rare_bg = runs[0][4:, :2]
    dropped = 1 - rare_bg.mean().item()
    assert dropped == pytest.approx(0.75, abs=0.02)
    assert (runs[0][4:, 2:] == 1).all()
    other = _freq_loss(generator=torch.Generator().manual_seed(8))
    assert not torch.equal(other.drop_weights(labels, 4), runs[0])


def test_label_weight_zero_rois_do_not_count_for_r():
    # the only rare foreground RoI is ignored -> r = 0 -> bg drops all
    labels = torch.tensor([0, 2, 4, 4])
    w = _freq_loss().drop_weights(
        labels, 4, valid=torch.tensor([False, True, True, True]))
    assert (w[2:, :2] == 0).all()


def test_loss_value_applies_drop_weights():
    g = torch.Generator().manual_seed(3)
    s = torch.randn(6, 4, generator=g, dtype=torch.float64)
    labels = torch.tensor([2, 3, 4, 4, 4, 4])  # r = 0: deterministic
    expected_w = torch.ones(6, 4, dtype=torch.float64)
    expected_w[:, :2] = 0
    elem = naive_gumbel_bce(s, one_hot(labels, 4))
    loss = _freq_loss()(s, labels)
    torch.testing.assert_close(loss, (elem * expected_w).sum() / 6)
    plain = GOLLoss(use_drop_loss=False)(s, labels)
    assert plain.item() > loss.item()


# ------------------------------------------------------------ frequencies
def test_error_without_frequency_info_and_no_cuda_needed(monkeypatch):

    def no_cuda(*args, **kwargs):
        raise AssertionError('GOLLoss touched CUDA')

    monkeypatch.setattr(torch.cuda, '_lazy_init', no_cuda)
    loss = GOLLoss()
    assert not loss.has_frequency_source
    s, labels = torch.randn(3, 5), torch.tensor([0, 5, 2])
    with pytest.raises(RuntimeError, match='GOLFrequencyHook'):
        loss(s, labels)
    # plain Gumbel BCE needs no frequencies
    assert torch.isfinite(GOLLoss(use_drop_loss=False)(s, labels))
    with pytest.raises(ValueError, match='num_images'):
        GOLLoss(class_image_counts=[1, 2])
    with pytest.raises(ValueError, match='3 class frequencies'):
        GOLLoss(num_classes=4).set_class_frequencies([0.1, 0.2, 0.3])


def test_class_image_counts_option_and_length_check():
    loss = GOLLoss(
        class_image_counts=[1, 10, 100], num_images=1000, rare_threshold=0.005)
    torch.testing.assert_close(loss.class_freq,
                               torch.tensor([0.001, 0.01, 0.1]))
    assert loss.rare_classes().tolist() == [True, False, False]
    assert 'class_freq' not in loss.state_dict()
    with pytest.raises(ValueError, match='3 class frequencies'):
        loss(torch.randn(2, 4), torch.tensor([0, 4]))


@pytest.fixture(scope='module')
def toy_lvis(toy_data_root):
    root = toy_data_root(
        'lvis', num_train=24, num_val=4, image_size=(64, 64), num_classes=20)
    ann = os.path.join(root, 'annotations', 'lvis_v1_train.json')
    with open(ann) as f:
        data = json.load(f)
    return root, ann, data


def _lvis_dataset(root, ann):
    from mmdet.datasets import LVISV1Dataset
    return LVISV1Dataset(
        data_root=root, ann_file=ann, data_prefix=dict(img=''), pipeline=[])


def test_freq_file_is_read_when_the_loss_is_built(toy_lvis):
    _, ann, data = toy_lvis
    loss = GOLLoss(freq_file=ann, rare_threshold=0.2)
    assert loss.has_frequency_source
    expected = torch.tensor(
        [c['image_count'] / 24 for c in data['categories']])
    torch.testing.assert_close(loss.class_freq, expected)
    # the forward reads no file: a loss built from the file keeps working
    # when the file is gone
    with mock.patch(
            'mmact.datasets.class_counts.load',
            side_effect=AssertionError('file read in forward')):
        out = loss(torch.randn(4, 20), torch.tensor([0, 3, 20, 20]))
    assert torch.isfinite(out)
    # explicit counts win over the file, as before
    explicit = GOLLoss(
        freq_file=ann, class_image_counts=[1] * 20, num_images=2)
    torch.testing.assert_close(explicit.class_freq, torch.full((20, ), 0.5))


def test_hook_sets_frequencies_from_train_dataset(toy_lvis):
    from mmengine.logging import MMLogger

    from mmact.engine.hooks import GOLFrequencyHook
    root, ann, data = toy_lvis
    rare_max = data['info']['frequency_thresholds']['rare_max']
    # threshold between rare_max and rare_max + 1 images of 24
    thr = (rare_max + 0.5) / 24
    head_a = GOLLoss(rare_threshold=thr)
    head_b = GOLLoss(rare_threshold=thr)
    explicit = GOLLoss(class_image_counts=[1] * 20, num_images=2)
    model = nn.ModuleDict(dict(a=head_a, b=nn.Sequential(head_b), c=explicit))
    from mmengine.dataset import ClassBalancedDataset
    runner = SimpleNamespace(
        model=model,
        train_dataloader=SimpleNamespace(
            dataset=ClassBalancedDataset(
                _lvis_dataset(root, ann), oversample_thr=1e-3)),
        logger=MMLogger.get_instance('test_gol'))
    GOLFrequencyHook().before_train(runner)
    by_id = {c['id']: c for c in data['categories']}
    cat_ids = [c['id'] for c in data['categories']]
    expected_rare = [by_id[i]['frequency'] == 'r' for i in cat_ids]
    assert any(expected_rare) and not all(expected_rare)
    for loss in (head_a, head_b):
        assert loss.rare_classes().tolist() == expected_rare
    # an explicit config wins unless overwrite=True
    torch.testing.assert_close(explicit.class_freq, torch.full((20, ), 0.5))
    GOLFrequencyHook(overwrite=True).before_train(runner)
    torch.testing.assert_close(explicit.class_freq, head_a.class_freq)


# ------------------------------------------------------- mmdet protocol
def test_activation_and_accuracy_protocol():
    loss = GOLLoss(num_classes=3)
    s = torch.tensor([[0.0, 2.0, -100.0], [100.0, -1.0, 1.0]])
    scores = loss.get_activation(s)
    assert scores.shape == (2, 4)
    torch.testing.assert_close(scores[:, :3], torch.exp(-torch.exp(-s)))
    assert scores[0, 0].item() == pytest.approx(math.exp(-1.0))
    assert (scores[:, 3] == 0).all()
    assert torch.isfinite(scores).all()
    torch.testing.assert_close(gumbel_activation(s), scores[:, :3])
    acc = loss.get_accuracy(s, torch.tensor([1, 3]))  # 2nd is background
    assert acc['acc_classes'].item() == pytest.approx(100.0)
    acc = loss.get_accuracy(s, torch.tensor([2, 0]))
    assert acc['acc_classes'].item() == pytest.approx(50.0)
    assert loss.get_accuracy(s, torch.tensor([3, 3]))['acc_classes'] == 0
    assert loss.get_cls_channels(3) == 3
    with pytest.raises(ValueError, match='num_classes'):
        loss.get_cls_channels(4)


def test_registered_and_sizes_the_bbox_head():
    from mmdet.registry import MODELS
    from mmengine.registry import DefaultScope

    # an earlier test's Runner may have left another default scope current
    with DefaultScope.overwrite_default_scope('mmdet'):
        head = MODELS.build(
            dict(
                type='Shared2FCBBoxHead',
                in_channels=8,
                fc_out_channels=16,
                roi_feat_size=2,
                num_classes=5,
                loss_cls=dict(type='GOLLoss', rare_threshold=0.01)))
    assert isinstance(head.loss_cls, GOLLoss)
    assert head.fc_cls.out_features == 5  # no background logit
    assert head.loss_cls.num_classes == 5


def _mask_rcnn_cfg(num_classes):
    from mmengine.config import Config
    cfg = Config.fromfile(
        os.path.join(
            os.path.dirname(mmdet.__file__), '.mim', 'configs', 'mask_rcnn',
            'mask-rcnn_r50_fpn_1x_coco.py'))
    model = cfg.model
    model.backbone.update(depth=18, init_cfg=None, frozen_stages=-1)
    model.neck.in_channels = [64, 128, 256, 512]
    model.roi_head.bbox_head.num_classes = num_classes
    model.roi_head.mask_head.num_classes = num_classes
    model.roi_head.bbox_head.loss_cls = dict(
        type='GOLLoss', rare_threshold=0.05)
    model.train_cfg.rpn.sampler.num = 32
    model.train_cfg.rpn_proposal.update(nms_pre=100, max_per_img=30)
    model.train_cfg.rcnn.sampler.num = 16
    model.test_cfg.rpn.update(nms_pre=100, max_per_img=30)
    model.test_cfg.rcnn.update(score_thr=0.0, max_per_img=10)
    return cfg


def test_mask_rcnn_with_gol_trains_a_step_and_predicts():
    from mmdet.registry import MODELS
    from mmdet.testing import demo_mm_inputs
    from mmdet.utils import register_all_modules
    register_all_modules()
    torch.manual_seed(0)
    num_classes = 5
    cfg = _mask_rcnn_cfg(num_classes)
    model = MODELS.build(cfg.model)
    gol = model.roi_head.bbox_head.loss_cls
    assert isinstance(gol, GOLLoss)
    assert model.roi_head.bbox_head.fc_cls.out_features == num_classes
    # classes 0, 1 rare at the 0.05 threshold
    gol.set_class_image_counts([1, 2, 50, 60, 80], 100)

    packed = demo_mm_inputs(
        batch_size=2,
        image_shapes=(3, 64, 64),
        num_items=[3, 2],
        num_classes=num_classes,
        with_mask=True)
    data = model.data_preprocessor(packed, True)
    model.train()
    with mock.patch.object(gol, 'drop_weights', wraps=gol.drop_weights) as spy:
        losses = model.loss(data['inputs'], data['data_samples'])
    assert spy.called
    assert {'loss_cls', 'acc_classes', 'loss_bbox', 'loss_mask'} <= set(losses)
    total, _ = model.parse_losses(losses)
    assert torch.isfinite(total)
    total.backward()
    grad = model.roi_head.bbox_head.fc_cls.weight.grad
    assert grad is not None and torch.isfinite(grad).all()
    assert grad.abs().sum() > 0

    model.eval()
    data = model.data_preprocessor(packed, False)
    with torch.no_grad(), mock.patch.object(
            gol, 'get_activation', wraps=gol.get_activation) as spy:
        results = model.predict(data['inputs'], data['data_samples'])
    assert spy.called
    assert len(results) == 2
    for res in results:
        inst = res.pred_instances
        assert len(inst) > 0
        assert ((inst.scores >= 0) & (inst.scores <= 1)).all()
        assert (inst.labels < num_classes).all()
        assert inst.masks.shape[0] == len(inst)


@pytest.mark.slow
def test_runner_trains_mask_rcnn_gol_on_toy_lvis_with_hook(tmp_path, toy_lvis):
    from mmengine.runner import Runner

    from mmact.testing import toy_classes
    root, ann, data = toy_lvis
    cfg = _mask_rcnn_cfg(20)
    rare_max = data['info']['frequency_thresholds']['rare_max']
    cfg.model.roi_head.bbox_head.loss_cls.rare_threshold = \
        (rare_max + 0.5) / 24
    cfg.custom_imports = dict(imports=['mmact'], allow_failed_imports=False)
    cfg.custom_hooks = [dict(type='GOLFrequencyHook')]
    cfg.work_dir = str(tmp_path / 'work')
    train = cfg.train_dataloader
    train.update(batch_size=2, num_workers=0, persistent_workers=False)
    train.dataset = dict(
        type='ClassBalancedDataset',
        oversample_thr=1e-3,
        dataset=dict(
            type='LVISV1Dataset',
            data_root=root,
            ann_file='annotations/lvis_v1_train.json',
            data_prefix=dict(img=''),
            metainfo=dict(classes=toy_classes('lvis', 20)),
            pipeline=[
                dict(type='LoadImageFromFile'),
                dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
                dict(type='Resize', scale=(64, 64), keep_ratio=True),
                dict(type='PackDetInputs')
            ]))
    for key in ('val_dataloader', 'test_dataloader', 'val_evaluator',
                'test_evaluator', 'val_cfg', 'test_cfg'):
        cfg[key] = None
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=2)
    cfg.param_scheduler = []
    cfg.optim_wrapper.optimizer.lr = 0.002
    cfg.default_hooks.checkpoint = None
    cfg.log_level = 'WARNING'
    runner = Runner.from_cfg(cfg)
    runner.train()
    gol = runner.model.roi_head.bbox_head.loss_cls
    by_id = {c['id']: c for c in data['categories']}
    expected = [by_id[c['id']]['frequency'] == 'r' for c in data['categories']]
    assert gol.rare_classes().tolist() == expected
    assert runner.message_hub.get_scalar('train/loss_cls') is not None
    loss_cls = runner.message_hub.get_scalar('train/loss_cls').current()
    assert math.isfinite(loss_cls)
