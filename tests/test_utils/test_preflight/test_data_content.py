"""mmact.utils.preflight.data_content: samples checked before the model."""
import json
from types import SimpleNamespace

import pytest
from mmdet.datasets import CocoDataset
from mmengine.config import Config
from mmengine.runner import Runner

from mmact.utils.preflight import (DataCheckError, check_datasets,
                                   head_num_classes, use_checked_datasets)
from mmact.utils.preflight import data_content

CATEGORIES = [dict(id=1, name='cat'), dict(id=2, name='dog')]


def coco_file(path, annotations, images=None, categories=CATEGORIES):
    images = [dict(id=1, file_name='1.jpg', width=100, height=80)
              ] if images is None else images
    for i, ann in enumerate(annotations):
        ann.setdefault('id', i + 1)
        ann.setdefault('image_id', 1)
        ann.setdefault('category_id', 1)
        ann.setdefault('iscrowd', 0)
        ann.setdefault('area', ann['bbox'][2] * ann['bbox'][3])
    path.write_text(
        json.dumps(
            dict(
                images=images, annotations=annotations,
                categories=categories)))
    return str(path)


def detector(dataset, num_classes=2):
    return Config(
        dict(
            default_scope='mmdet',
            model=dict(
                rpn_head=dict(num_classes=1),
                roi_head=dict(
                    bbox_head=dict(num_classes=num_classes),
                    mask_head=dict(num_classes=num_classes))),
            train_dataloader=dict(dataset=dataset)))


def coco(ann_file, classes=('cat', 'dog'), **kwargs):
    return dict(
        type='CocoDataset',
        ann_file=ann_file,
        data_prefix=dict(img=''),
        metainfo=dict(classes=classes),
        pipeline=[],
        **kwargs)


@pytest.fixture
def logged(monkeypatch):
    lines = []
    monkeypatch.setattr(data_content, 'print_log',
                        lambda msg, **kwargs: lines.append(msg))
    return lines


def test_head_num_classes_leaves_out_class_agnostic_heads():
    cfg = detector(None, num_classes=3)
    cfg.data_preprocessor = dict(num_classes=3)
    cfg.model.roi_head.bbox_head = [dict(num_classes=3), dict(num_classes=3)]
    assert head_num_classes(cfg) == [
        ('model.roi_head.bbox_head[0].num_classes', 3),
        ('model.roi_head.bbox_head[1].num_classes', 3),
        ('model.roi_head.mask_head.num_classes', 3),
        ('data_preprocessor.num_classes', 3),
    ]


@pytest.mark.parametrize('wrapped', [False, True])
def test_detection_classes_must_match_the_heads(tmp_path, wrapped):
    ann_file = coco_file(tmp_path / 'train.json', [dict(bbox=[1, 1, 9, 9])])
    dataset = coco(ann_file)
    where = 'train_dataloader.dataset'
    if wrapped:
        dataset = dict(
            type='ClassBalancedDataset', oversample_thr=0.1, dataset=dataset)
        where += '.dataset'
    with pytest.raises(DataCheckError) as error:
        check_datasets(detector(dataset, num_classes=4), ('train', ))
    message = str(error.value)
    assert f'{where} ({ann_file}) has 2 classes ({where}.metainfo.classes)' \
        in message
    assert 'model.roi_head.bbox_head.num_classes = 4' in message
    assert 'model.roi_head.mask_head.num_classes = 4' in message
    assert 'rpn_head' not in message and 'Set num_classes to 2' in message
    built = check_datasets(detector(dataset, num_classes=2), ('train', ))
    assert len(built['train']) >= 1


def classifier(tmp_path, labels, num_classes):
    (tmp_path / 'train.txt').write_text(''.join(
        f'{i}.jpg {label}\n' for i, label in enumerate(labels)))
    return Config(
        dict(
            default_scope='mmpretrain',
            model=dict(head=dict(num_classes=num_classes)),
            data_preprocessor=dict(num_classes=num_classes),
            train_dataloader=dict(
                dataset=dict(
                    type='CustomDataset',
                    data_root=str(tmp_path),
                    ann_file='train.txt',
                    pipeline=[]))))


def test_labels_beyond_the_classifier_head(tmp_path):
    cfg = classifier(tmp_path, range(10), num_classes=4)
    with pytest.raises(DataCheckError) as error:
        check_datasets(cfg, ('train', ))
    message = str(error.value)
    assert f'{tmp_path}/train.txt) has labels 0-9' in message
    assert 'model.head.num_classes = 4, data_preprocessor.num_classes = 4' \
        in message
    assert 'Set num_classes to 10' in message
    # a head wider than the labels trains (mmpretrain: ImageNet subsets)
    check_datasets(classifier(tmp_path, range(3), num_classes=4), ('train', ))


def test_empty_annotation_sets(tmp_path):
    ann_file = coco_file(tmp_path / 'empty.json', [], images=[])
    with pytest.raises(
            DataCheckError,
            match=f'train_dataloader.dataset \\({ann_file}\\): no samples. '
            'Check that train_dataloader.dataset.ann_file'):
        check_datasets(detector(coco(ann_file)), ('train', ))
    with pytest.raises(DataCheckError, match='train.txt\\): no samples'):
        check_datasets(classifier(tmp_path, [], num_classes=4), ('train', ))


def test_filter_that_removes_every_sample(tmp_path):
    # the image's only box is of a class the dataset leaves out
    ann_file = coco_file(tmp_path / 'train.json',
                         [dict(bbox=[1, 1, 9, 9], category_id=2)])
    dataset = coco(
        ann_file, classes=('cat', ), filter_cfg=dict(filter_empty_gt=True))
    with pytest.raises(
            DataCheckError,
            match='train_dataloader.dataset.filter_cfg=.*removes all 1 '
            'samples'):
        check_datasets(detector(dataset, num_classes=1), ('train', ))


def test_dropped_boxes_counted_by_reason(tmp_path, logged):
    annotations = [
        dict(bbox=[10, 10, 20, 20]),  # kept
        dict(bbox=[10, 10, 20, 20], category_id=2),  # kept
        dict(bbox=[10, 10, 0, 20]),  # zero width
        dict(bbox=[10, 10, 20, -5]),  # negative height
        dict(bbox=[120, 10, 20, 20]),  # right of the 100-pixel image
        dict(bbox=[10, 10, 0.5, 20]),  # half a pixel wide
        dict(bbox=[10, 10, 20, 20], area=0),  # zero area
        dict(bbox=[10, 10, 20, 20], category_id=3),  # not among the classes
        dict(bbox=[10, 10, 0, 0], ignore=True),  # ignored, not counted
    ]
    categories = CATEGORIES + [dict(id=3, name='cow')]
    ann_file = coco_file(
        tmp_path / 'train.json', annotations, categories=categories)
    built = check_datasets(detector(coco(ann_file)), ('train', ))
    instances = built['train'].get_data_info(0)['instances']
    assert len(instances) == 2  # mmdet kept what the count says it keeps
    assert logged == [
        f'Data check: train_dataloader.dataset ({ann_file}): mmdet drops 6 '
        'of 8 boxes while loading: 2 zero or negative width / height, '
        '1 outside the image, 1 under one pixel wide or high, 1 zero area, '
        '1 a category outside the classes.'
    ]
    check_datasets(detector(coco(ann_file)), ('train', ), warn=False)
    assert len(logged) == 1  # other ranks stay quiet


def test_split_folder_without_its_meta_file(tmp_path):
    for name in 'abcd':
        (tmp_path / 'train' / name).mkdir(parents=True)
        (tmp_path / 'train' / name / '1.jpg').write_bytes(b'')
    dataset = dict(
        type='ImageNet', data_root=str(tmp_path), split='train', pipeline=[])
    cfg = Config(
        dict(
            default_scope='mmpretrain',
            model=dict(head=dict(num_classes=4)),
            train_dataloader=dict(dataset=dataset)))
    with pytest.raises(DataCheckError) as error:
        check_datasets(cfg, ('train', ))
    message = str(error.value)
    assert f'{tmp_path}/meta/train.txt does not exist ' \
        "(train_dataloader.dataset.split='train'" in message
    assert '4 subfolders for 1000 classes' in message
    assert 'or set train_dataloader.dataset.ann_file' in message
    # one folder per class: mmpretrain's folder scan works
    cfg.train_dataloader.dataset.metainfo = dict(classes=list('abcd'))
    assert len(check_datasets(cfg, ('train', ))['train']) == 4


def test_annotations_read_once_and_the_runner_gets_that_dataset(
        tmp_path, monkeypatch):
    loads = []
    load = CocoDataset.load_data_list
    monkeypatch.setattr(CocoDataset, 'load_data_list',
                        lambda self: loads.append(1) or load(self))
    ann_file = coco_file(tmp_path / 'train.json', [dict(bbox=[1, 1, 9, 9])])
    cfg = detector(coco(ann_file))
    built = check_datasets(cfg, ('train', ))
    runner = SimpleNamespace(
        _train_dataloader=dict(
            batch_size=1,
            dataset=cfg.train_dataloader.dataset,
            sampler=dict(type='DefaultSampler', shuffle=False)))
    use_checked_datasets(runner, built)
    loader = Runner.build_dataloader(runner._train_dataloader)
    assert loader.dataset is built['train'] and len(loads) == 1
    assert cfg.train_dataloader.dataset.type == 'CocoDataset'  # dump intact
    # handed over, not kept: a second build of that config finds nothing
    key = runner._train_dataloader['dataset']['key']
    with pytest.raises(KeyError, match=key):
        Runner.build_dataloader(runner._train_dataloader)
