"""LVISMetric (lvis 0.5.3) evaluates on numpy 2 once mmact is imported."""
import numpy as np
import pytest
import torch

import mmact  # noqa: F401  (applies the lvis numpy shim)


@pytest.fixture(scope='module')
def lvis_root(toy_data_root):
    return toy_data_root('lvis')


def evaluate(root, degrade=None):
    from lvis import LVIS
    from mmdet.evaluation import LVISMetric

    ann_file = f'{root}/annotations/lvis_v1_val.json'
    api = LVIS(ann_file)
    cat_ids = api.get_cat_ids()
    metric = LVISMetric(ann_file=ann_file, metric=['bbox', 'segm'])
    metric.dataset_meta = dict(
        classes=[c['name'] for c in api.load_cats(cat_ids)])
    for img_id in api.get_img_ids():
        img = api.load_imgs([img_id])[0]
        anns = api.load_anns(api.get_ann_ids(img_ids=[img_id]))
        boxes = np.array([[x, y, x + w, y + h] for x, y, w, h in
                          (a['bbox'] for a in anns)], dtype=np.float32)
        masks = np.stack([api.ann_to_mask(a).astype(bool) for a in anns])
        if degrade is not None:
            boxes, masks = degrade(boxes, masks)
        metric.process({}, [
            dict(
                img_id=img_id,
                ori_shape=(img['height'], img['width']),
                pred_instances=dict(
                    bboxes=torch.from_numpy(boxes),
                    scores=torch.ones(len(anns)),
                    labels=torch.tensor(
                        [cat_ids.index(a['category_id']) for a in anns]),
                    masks=torch.from_numpy(masks)))
        ])
    return metric.evaluate(size=len(api.get_img_ids()))


def test_perfect_predictions_score_one(lvis_root):
    results = evaluate(lvis_root)
    assert results['lvis/bbox_AP'] == pytest.approx(1.0)
    assert results['lvis/segm_AP'] == pytest.approx(1.0)


def test_degraded_predictions_score_lower(lvis_root):

    def shift(boxes, masks):
        # Move every prediction by a third of its size: IoU falls under most
        # of the 0.5:0.95 thresholds.
        width = boxes[:, 2] - boxes[:, 0]
        boxes = boxes.copy()
        boxes[:, [0, 2]] += width[:, None] / 3
        dx = np.maximum((width / 3).astype(int), 1)
        masks = np.stack(
            [np.roll(m, int(d), axis=1) for m, d in zip(masks, dx)])
        return boxes, masks

    results = evaluate(lvis_root, degrade=shift)
    assert 0 <= results['lvis/bbox_AP'] < 0.9
    assert 0 <= results['lvis/segm_AP'] < 0.9
