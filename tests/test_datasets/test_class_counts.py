"""mmact.datasets.class_counts: the one module that counts classes."""
import json
import os

import numpy as np
import pytest

from mmact.datasets import (class_counts_from_ann_file, long_tailed_counts,
                            image_counts_from_annotations,
                            image_counts_from_dataset,
                            image_counts_from_labels, shot_groups,
                            unwrap_datasets)


def test_long_tailed_counts_follow_the_imbalance_factor():
    counts = long_tailed_counts(10, 100, 100.0)
    # floor(100 * 100^(-i/9)): the CIFAR-LT convention
    assert counts == [100, 59, 35, 21, 12, 7, 4, 2, 1, 1]
    assert counts[0] / counts[-1] == 100
    assert long_tailed_counts(10, 50, 1.0) == [50] * 10
    assert long_tailed_counts(4, 8, 2) == [8, 6, 5, 4]  # the tiny-cls set
    assert long_tailed_counts(1, 7, 3.0) == [7]
    for bad in ((0, 8, 2), (4, 0, 2), (4, 8, 0.5)):
        with pytest.raises(ValueError, match='long_tailed_counts needs'):
            long_tailed_counts(*bad)


def test_shot_groups_thresholds():
    # ImageNet-LT protocol: many > 100, medium 20..100, few < 20
    assert shot_groups([101, 100, 20, 19,
                        0]) == ['many', 'medium', 'medium', 'few', 'few']
    assert shot_groups([5, 3, 1], 4, 2) == ['many', 'medium', 'few']
    with pytest.raises(ValueError, match='few_threshold'):
        shot_groups([1], many_threshold=10, few_threshold=20)


def test_counts_from_text_and_json(tmp_path):
    text = tmp_path / 'train.txt'
    text.write_text('a/x 1.jpg 0\nb.jpg 2\nc.jpg 2\n\n')  # label is last
    np.testing.assert_array_equal(
        class_counts_from_ann_file(str(text)), [1, 0, 2])
    np.testing.assert_array_equal(
        class_counts_from_ann_file(str(text), num_classes=5), [1, 0, 2, 0, 0])
    data = tmp_path / 'train.json'
    data.write_text(
        json.dumps(
            dict(
                metainfo={},
                data_list=[
                    dict(img_path='a', gt_label=1),
                    dict(img_path='b', gt_label=[1])
                ])))
    np.testing.assert_array_equal(
        class_counts_from_ann_file(str(data)), [0, 2])
    with pytest.raises(FileNotFoundError, match='train_ann_file'):
        class_counts_from_ann_file(str(tmp_path / 'missing.txt'))


def test_image_counts_from_labels_count_each_image_once():
    counts, num_images = image_counts_from_labels([[0, 0, 2], [], [2], [1, 2]],
                                                  num_classes=4)
    assert counts == [1, 1, 3, 0] and num_images == 3
    with pytest.raises(ValueError, match=r'label 4 outside \[0, 4\)'):
        image_counts_from_labels([[4]], num_classes=4)


@pytest.fixture(scope='module')
def toy_lvis(toy_data_root):
    root = toy_data_root(
        'lvis', num_train=24, num_val=4, image_size=(64, 64), num_classes=20)
    ann = os.path.join(root, 'annotations', 'lvis_v1_train.json')
    with open(ann) as f:
        data = json.load(f)
    return root, ann, data


@pytest.fixture(scope='module')
def toy_coco(toy_data_root):
    root = toy_data_root(
        'coco', num_train=12, num_val=2, image_size=(64, 64), num_classes=6)
    ann = os.path.join(root, 'annotations', 'instances_train2017.json')
    with open(ann) as f:
        data = json.load(f)
    return root, ann, data


def _lvis_dataset(root, ann):
    from mmdet.datasets import LVISV1Dataset
    return LVISV1Dataset(
        data_root=root, ann_file=ann, data_prefix=dict(img=''), pipeline=[])


def _coco_dataset(root, ann):
    from mmdet.datasets import CocoDataset

    from mmact.testing import toy_classes
    return CocoDataset(
        data_root=root,
        ann_file=ann,
        data_prefix=dict(img='train2017/'),
        metainfo=dict(classes=toy_classes('coco', 6)),
        pipeline=[])


def _manual_counts(data, cat_ids):
    images = {i: set() for i in cat_ids}
    for a in data['annotations']:
        images[a['category_id']].add(a['image_id'])
    return [len(images[i]) for i in cat_ids
            ], len({a['image_id']
                    for a in data['annotations']})


def test_counts_from_lvis_dataset_use_image_count(toy_lvis):
    root, ann, data = toy_lvis
    ds = _lvis_dataset(root, ann)
    counts, num_images = image_counts_from_dataset(ds)
    by_id = {c['id']: c for c in data['categories']}
    assert counts == [by_id[i]['image_count'] for i in ds.cat_ids]
    assert num_images == 24
    # the file's image_count is what is used: a doctored copy shows it
    doctored = json.loads(json.dumps(data))
    doctored['categories'][0]['image_count'] = 999
    assert image_counts_from_annotations(doctored)[0][0] == 999
    assert image_counts_from_annotations(doctored, source='count')[0][0] != 999
    # counting the loaded annotations agrees with LVIS image_count
    assert image_counts_from_dataset(
        ds, source='count') == (counts, num_images)
    assert len(set(counts)) > 3  # long-tailed, not constant


def test_counts_from_wrapped_datasets(toy_lvis):
    from mmengine.dataset import ClassBalancedDataset, ConcatDataset
    root, ann, _ = toy_lvis
    base = image_counts_from_dataset(_lvis_dataset(root, ann))
    rfs = ClassBalancedDataset(_lvis_dataset(root, ann), oversample_thr=0.3)
    assert len(rfs) > 24  # it does over-sample; the counts must not
    assert image_counts_from_dataset(rfs) == base
    cat = ConcatDataset([_lvis_dataset(root, ann), _lvis_dataset(root, ann)])
    counts, n = image_counts_from_dataset(cat)
    assert counts == [2 * c for c in base[0]] and n == 2 * base[1]


def test_counts_from_coco_dataset_are_counted(toy_coco):
    root, ann, data = toy_coco
    ds = _coco_dataset(root, ann)
    counts, num_images = image_counts_from_dataset(ds)
    assert (counts, num_images) == _manual_counts(data, ds.cat_ids)
    with pytest.raises(ValueError, match='image_count'):
        image_counts_from_dataset(ds, source='image_count')
    # same numbers straight from the file (GOLLoss freq_file path)
    assert image_counts_from_annotations(ann) == (counts, num_images)


def test_counts_from_classification_dataset(tmp_path):
    from mmpretrain.datasets import CustomDataset
    labels = [0, 0, 0, 2, 1, 2]
    (tmp_path / 'train.txt').write_text(''.join(f'img_{i}.jpg {c}\n'
                                                for i, c in enumerate(labels)))
    ds = CustomDataset(
        data_root=str(tmp_path),
        ann_file='train.txt',
        metainfo=dict(classes=('a', 'b', 'c')),
        pipeline=[],
        lazy_init=True)
    assert image_counts_from_dataset(ds) == ([3, 1, 2], 6)
    np.testing.assert_array_equal(
        class_counts_from_ann_file(str(tmp_path / 'train.txt')), [3, 1, 2])


def test_unwrap_datasets_reaches_every_leaf():
    from mmengine.dataset import BaseDataset, ConcatDataset, RepeatDataset

    class Labels(BaseDataset):
        METAINFO = dict(classes=('a', 'b'))

        def __init__(self, labels):
            self.labels = labels
            super().__init__()

        def load_data_list(self):
            return [dict(gt_label=label) for label in self.labels]

    a, b, c = Labels([0]), Labels([1, 1]), Labels([0, 1])
    concat = ConcatDataset([a, b, c])
    assert unwrap_datasets(concat) == [a, b, c]
    assert image_counts_from_dataset(concat) == ([2, 3], 5)
    repeated = RepeatDataset(c, times=3)
    assert unwrap_datasets(repeated) == [c]
    # repeats do not count: each image of c once
    assert image_counts_from_dataset(repeated) == ([1, 1], 2)
