import copy
import pickle

import pytest
import torch
import torch.nn.functional as F
from mmengine.registry import DefaultScope

import mmact  # noqa: F401


@pytest.fixture
def ann_file(tmp_path):
    path = tmp_path / 'train.txt'
    # counts 6, 3, 1 -> prior 0.6, 0.3, 0.1
    labels = [0] * 6 + [1] * 3 + [2]
    path.write_text(''.join(f'img_{i}.jpg {c}\n'
                            for i, c in enumerate(labels)))
    return str(path)


def build(cfg):
    from mmpretrain.registry import MODELS
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(cfg)


HEAD = dict(type='LinearClsHead', num_classes=3, in_channels=4)
LOG_PRIOR = torch.log(torch.tensor([0.6, 0.3, 0.1]))


def test_predictions_are_compensated_and_training_is_not(ann_file):
    from mmpretrain.models.heads import LinearClsHead
    from mmpretrain.structures import DataSample
    torch.manual_seed(0)
    head = build(
        dict(HEAD, type='PCSoftmaxLinearClsHead', train_ann_file=ann_file))
    plain = build(HEAD)
    plain.load_state_dict(head.state_dict())  # same keys, same weights
    assert isinstance(head, LinearClsHead)
    feats = (torch.randn(5, 4), )
    z = plain(feats)
    expected = F.softmax(z - LOG_PRIOR, 1)
    scores = torch.stack([s.pred_score for s in head.predict(feats)])
    torch.testing.assert_close(scores, expected)
    plain_scores = torch.stack([s.pred_score for s in plain.predict(feats)])
    torch.testing.assert_close(plain_scores, F.softmax(z, 1))
    # the loss (training) uses the raw logits
    samples = [DataSample().set_gt_label(i % 3) for i in range(5)]
    torch.testing.assert_close(
        head.loss(feats, samples)['loss'],
        plain.loss(feats, samples)['loss'])


def test_cosine_head_is_compensated(ann_file):
    cosine = dict(
        type='ArcFaceClsHead',
        num_classes=3,
        in_channels=4,
        scale=16.0,
        margins=0.0)
    torch.manual_seed(0)
    head = build(
        dict(cosine, type='PCSoftmaxArcFaceClsHead', train_ann_file=ann_file))
    plain = build(cosine)
    plain.load_state_dict(head.state_dict())
    feats = (torch.randn(5, 4), )
    scores = torch.stack([s.pred_score for s in head.predict(feats)])
    torch.testing.assert_close(scores, F.softmax(plain(feats) - LOG_PRIOR, 1))


def test_checkpoint_keys_copies_and_pickle(ann_file):
    head = build(
        dict(HEAD, type='PCSoftmaxLinearClsHead', train_ann_file=ann_file))
    assert set(head.state_dict()) == set(build(HEAD).state_dict())
    twin = copy.deepcopy(head)
    assert type(twin) is type(head)
    torch.testing.assert_close(twin.log_prior, head.log_prior)
    restored = pickle.loads(pickle.dumps(head))
    assert type(restored) is type(head)
    torch.testing.assert_close(restored.log_prior, LOG_PRIOR)


def test_bad_input(ann_file, tmp_path):
    pc_head = dict(HEAD, type='PCSoftmaxLinearClsHead')
    with pytest.raises(ValueError, match=r'classes \[3\] have no sample'):
        build(dict(pc_head, train_ann_file=ann_file, num_classes=4))
    with pytest.raises(ValueError, match='labels up to 2, the head 2'):
        build(dict(pc_head, train_ann_file=ann_file, num_classes=2))
    with pytest.raises(FileNotFoundError, match='not found'):
        build(dict(pc_head, train_ann_file=str(tmp_path / 'nope.txt')))
    with pytest.raises(TypeError, match='train_ann_file'):
        build(pc_head)
