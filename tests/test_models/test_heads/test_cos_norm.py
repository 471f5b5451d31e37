"""CosNormClsHead: the cosine-normalised classifier of Liu et al. 2019, as
the APA authors' ImageNet-LT models use it."""
import pytest
import torch
from mmengine.registry import DefaultScope

import mmact  # noqa: F401


def build(cfg):
    from mmpretrain.registry import MODELS
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(cfg)


HEAD = dict(type='CosNormClsHead', num_classes=3, in_channels=4)


def test_logits_are_scaled_cosines_of_the_squashed_feature():
    torch.manual_seed(0)
    head = build(HEAD).double()
    x = torch.randn(5, 4, dtype=torch.float64) * 3
    norm = x.norm(dim=1, keepdim=True)
    squashed = norm / (1 + norm) * x / norm  # Liu et al. 2019, Eq. 5
    w = head.fc.weight
    want = 16 * squashed @ (w / w.norm(dim=1, keepdim=True)).T
    torch.testing.assert_close(head((x, )), want)
    assert list(head.state_dict()) == ['fc.weight']  # no bias, as theirs
    zero = head((torch.zeros(2, 4, dtype=torch.float64), ))
    assert torch.equal(zero, torch.zeros_like(zero))  # theirs: NaN


def test_trains_and_compensates_predictions(tmp_path):
    from mmpretrain.structures import DataSample
    ann_file = tmp_path / 'train.txt'
    ann_file.write_text(''.join(f'{i}.jpg {c}\n'
                                for i, c in enumerate([0] * 6 + [1] * 3 +
                                                      [2])))
    head = build(
        dict(
            HEAD,
            type='PCSoftmaxCosNormClsHead',
            train_ann_file=str(ann_file),
            scale=8.0))
    x = torch.randn(4, 4, requires_grad=True)
    samples = [DataSample().set_gt_label(i % 3) for i in range(4)]
    head.loss((x, ), samples)['loss'].backward()
    assert head.fc.weight.grad.abs().sum() > 0
    logits = head((x.detach(), ))
    prior = torch.log(torch.tensor([0.6, 0.3, 0.1]))
    scores = head.predict((x.detach(), ))[0].pred_score
    torch.testing.assert_close(scores, (logits[0] - prior).softmax(0))


def test_bad_scale_is_named():
    with pytest.raises(ValueError, match='scale must be > 0, got 0'):
        build(dict(HEAD, scale=0))
