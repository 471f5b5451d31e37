import json

import numpy as np
import pytest
import torch
from mmengine.evaluator import Evaluator
from mmengine.registry import METRICS, DefaultScope

import mmact  # noqa: F401
from mmact.evaluation import ShotAccuracy


def samples(pairs):
    return [
        dict(
            pred_label=torch.tensor([p]),
            gt_label=torch.tensor([g]),
            pred_score=torch.zeros(4)) for p, g in pairs
    ]


def test_metric_hand_computed():
    # classes 0: many, 1: medium, 2 and 3: few
    metric = ShotAccuracy(class_counts=[150, 50, 10, 1])
    metric.process(None, samples([(0, 0), (1, 0), (1, 1), (2, 2), (0, 3)]))
    metric.process(None, samples([(3, 3), (0, 2), (2, 2)]))
    out = metric.evaluate(8)
    # many 1/2, medium 1/1, few 3/5, overall 5/8
    assert out == {
        'shot/top1': pytest.approx(62.5),
        'shot/many': pytest.approx(50.0),
        'shot/medium': pytest.approx(100.0),
        'shot/few': pytest.approx(60.0)
    }


def test_metric_omits_empty_groups_and_checks_labels():
    metric = ShotAccuracy(class_counts=[150, 10])
    metric.process(None, samples([(0, 0)]))
    assert set(metric.evaluate(1)) == {'shot/top1', 'shot/many'}
    metric = ShotAccuracy(class_counts=[150, 10])
    metric.process(None, samples([(0, 5)]))
    with pytest.raises(ValueError, match='label 5 has no training count'):
        metric.evaluate(1)
    with pytest.raises(ValueError, match='exactly one'):
        ShotAccuracy()


def test_metric_in_an_mmpretrain_evaluator(tmp_path):
    from mmpretrain.registry import METRICS as CLS_METRICS
    from mmpretrain.structures import DataSample
    ann = tmp_path / 'train.txt'
    ann.write_text(''.join(f'img{i}.jpg {c}\n'
                           for i, c in enumerate([0] * 120 + [1] * 30 + [2])))
    assert METRICS.get('ShotAccuracy') is CLS_METRICS.get('ShotAccuracy')
    import mmpretrain.evaluation  # noqa: F401  (registers Accuracy)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        evaluator = Evaluator([
            dict(type='Accuracy', topk=(1, )),
            dict(type='ShotAccuracy', train_ann_file=str(ann))
        ])
    predictions = []
    for pred, gt in ((0, 0), (1, 1), (0, 1), (2, 2)):
        s = DataSample().set_gt_label(gt).set_pred_score(
            torch.eye(3)[pred]).set_pred_label(pred)
        predictions.append(s)
    evaluator.process(predictions)
    out = evaluator.evaluate(4)
    assert out['accuracy/top1'] == pytest.approx(75.0)
    assert out['shot/top1'] == pytest.approx(75.0)
    assert out['shot/many'] == 100.0 and out['shot/medium'] == 50.0 \
        and out['shot/few'] == 100.0
