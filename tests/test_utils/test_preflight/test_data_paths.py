from pathlib import Path

import pytest
from mmengine.config import Config

from mmact.utils.preflight import (check_data_paths, fill_hints,
                                   inspect_data_paths, load_config,
                                   missing_data_paths)

REPO = Path(__file__).resolve().parents[3]
TOY_LVIS = str(REPO / 'configs/toy/mask-rcnn_r50_fpn_toy-lvis.py')


def _train(dataset: dict, **cfg) -> Config:
    return Config(dict(train_dataloader=dict(dataset=dataset), **cfg))


def test_missing_dataset_names_every_path_and_the_generator(tmp_path):
    root = tmp_path / 'toy_lvis'
    cfg = load_config(
        TOY_LVIS, {
            'train_dataloader.dataset.dataset.data_root': f'{root}/',
            'val_dataloader.dataset.data_root': f'{root}/',
            'val_evaluator.ann_file': f'{root}/annotations/lvis_v1_val.json'
        })
    missing = missing_data_paths(cfg, ('train', 'val'))
    assert any('lvis_v1_train.json' in m and 'dataset.dataset.ann_file' in m
               for m in missing)
    assert any('val_evaluator.ann_file' in m for m in missing)
    with pytest.raises(FileNotFoundError) as error:
        check_data_paths(cfg, ('train', 'val'))
    assert str(error.value).endswith(
        'To get them: python tools/misc/generate_toy_data.py lvis --out-dir '
        f"{tmp_path}/. Each dataset's source and layout: "
        'docs/user_guides/datasets.md')


def test_real_dataset_hint_names_its_download(tmp_path, monkeypatch):
    """Paths of the real LVIS v1 root are not filled by the generator."""
    monkeypatch.chdir(tmp_path)
    cfg = load_config(str(REPO / 'configs/lvis/apa_mrcnn_r50.py'))
    missing = missing_data_paths(cfg, ('val', ))
    assert fill_hints(cfg, missing) == [
        'LVIS v1: lvis_v1_train.json and lvis_v1_val.json from '
        "https://www.lvisdataset.org/dataset, the images COCO 2017's "
        '(train2017.zip, val2017.zip from https://cocodataset.org/#download)'
    ]


def test_v3det_label_file_is_checked(tmp_path, monkeypatch):
    """V3DetDataset reads its class names from data_root by default."""
    monkeypatch.chdir(tmp_path)
    config = REPO / ('configs/v3det/faster-rcnn_apase-aglu-r50_fpn_8xb4-rfs-'
                     'ms-2x_v3det.py')
    cfg = load_config(str(config))
    labels = 'data/V3Det/annotations/category_name_13204_v3det_2023_v1.txt'
    line = f'{labels} (test_dataloader.dataset.label_file)'
    assert line in missing_data_paths(cfg, ('test', ))
    (tmp_path / labels).parent.mkdir(parents=True)
    (tmp_path / labels).write_text('a\n')
    assert line not in missing_data_paths(cfg, ('test', ))
    cfg.test_dataloader.dataset.label_file = 'names.txt'
    assert 'data/V3Det/names.txt (test_dataloader.dataset.label_file)' in \
        missing_data_paths(cfg, ('test', ))


def test_model_and_metric_files_are_checked(tmp_path, monkeypatch):
    """ImageNet-LT's head and ShotAccuracy read the training list."""
    monkeypatch.chdir(tmp_path)
    config = REPO / ('configs/imagenet/apase-aglu-r50_cos-cls_8xb32-coslr-'
                     '200e_in1k-lt.py')
    missing = missing_data_paths(load_config(str(config)), ('test', ))
    listing = 'data/imagenet/meta/ImageNet_LT_train.txt'
    assert f'{listing} (model.head.train_ann_file)' in missing
    assert f'{listing} (test_evaluator.train_ann_file)' in missing


def test_image_folder_checked(tmp_path):
    (tmp_path / 'annotations').mkdir()
    (tmp_path / 'annotations' / 'instances_train2017.json').write_text('{}')
    cfg = _train(
        dict(
            data_root=str(tmp_path),
            ann_file='annotations/instances_train2017.json',
            data_prefix=dict(img='train2017/')))
    assert missing_data_paths(cfg, ('train', )) == [
        f'{tmp_path}/train2017/ (train_dataloader.dataset.data_prefix.img)'
    ]


def test_string_data_prefix(tmp_path):
    # mmpretrain: data_prefix='train' (e.g. eva02-base-p14_in1k.py)
    cfg = _train(
        dict(type='ImageNet', data_root=str(tmp_path), data_prefix='train'),
        default_scope='mmpretrain')
    assert missing_data_paths(cfg, ('train', )) == [
        f'{tmp_path}/train (train_dataloader.dataset.data_prefix)'
    ]
    (tmp_path / 'train').mkdir()
    assert missing_data_paths(cfg, ('train', )) == []


def test_imagenet_split_reads_the_split_folder(tmp_path):
    # mmpretrain: ImageNet(data_root=..., split='train') as in
    # resnet50_8xb32_in1k.py
    cfg = _train(
        dict(
            type='ImageNet',
            data_root=str(tmp_path / 'imagenet'),
            split='train'),
        default_scope='mmpretrain')
    assert missing_data_paths(cfg, ('train', )) == [
        f'{tmp_path}/imagenet/train (train_dataloader.dataset.split)'
    ]
    (tmp_path / 'imagenet' / 'train').mkdir(parents=True)
    assert missing_data_paths(cfg, ('train', )) == []


def test_split_datasets_need_their_data_root(tmp_path):
    cfg = _train(
        dict(type='CUB', data_root=str(tmp_path / 'CUB'), split='train'),
        default_scope='mmpretrain')
    assert missing_data_paths(cfg, ('train', )) == [
        f'{tmp_path}/CUB (train_dataloader.dataset.data_root)'
    ]


def test_downloading_datasets_are_noted_not_missing(tmp_path):
    # CIFAR10 downloads itself by default (download=True).
    cfg = _train(
        dict(
            type='CIFAR10', data_root=str(tmp_path / 'cifar10'),
            split='train'),
        default_scope='mmpretrain')
    missing, notes = inspect_data_paths(cfg, ('train', ))
    assert missing == [] and 'download=True' in notes[0]
    cfg.train_dataloader.dataset.download = False
    assert missing_data_paths(cfg, ('train', )) == [
        f'{tmp_path}/cifar10 (train_dataloader.dataset.data_root)'
    ]


@pytest.mark.parametrize('where', ['dataset', 'pipeline', 'uri'])
def test_remote_backends_are_noted_not_missing(tmp_path, where):
    petrel = dict(backend='petrel', path_mapping={'data/': 's3://data/'})
    dataset = dict(
        data_root='data/coco/',
        ann_file='annotations/instances_train2017.json',
        data_prefix=dict(img='train2017/'),
        pipeline=[dict(type='LoadImageFromFile')])
    if where == 'dataset':
        dataset['backend_args'] = petrel
    elif where == 'pipeline':
        dataset['pipeline'][0]['backend_args'] = petrel
        (tmp_path / 'coco/annotations').mkdir(parents=True)
        (tmp_path / 'coco/annotations/instances_train2017.json').touch()
        dataset['data_root'] = f'{tmp_path}/coco/'
    else:
        dataset['data_root'] = 's3://openmmlab/datasets/detection/coco/'
    missing, notes = inspect_data_paths(_train(dataset), ('train', ))
    assert missing == []
    assert notes and all('not checked' in n for n in notes)
    if where != 'pipeline':
        assert 'petrel' in notes[0] or 's3://' in notes[0]
    else:  # the annotation file is still read locally and was checked
        assert 'train2017' in notes[0] and 'petrel' in notes[0]


def test_wrappers_and_concat(tmp_path):
    cfg = _train(
        dict(
            type='ConcatDataset',
            datasets=[
                dict(
                    type='RepeatDataset',
                    times=2,
                    dataset=dict(data_root=str(tmp_path), ann_file='a.json')),
                dict(data_root=str(tmp_path), ann_file=['b.txt', 'c.txt'])
            ]))
    (tmp_path / 'b.txt').touch()
    assert missing_data_paths(cfg, ('train', )) == [
        f'{tmp_path}/a.json (train_dataloader.dataset.datasets[0].dataset.'
        'ann_file)',
        f'{tmp_path}/c.txt (train_dataloader.dataset.datasets[1].ann_file)'
    ]


def test_evaluator_forms(tmp_path):
    cfg = Config(
        dict(val_evaluator=[
            dict(type='CocoMetric', ann_file=str(tmp_path / 'a.json')),
            dict(type='Evaluator', metrics=[dict(ann_file='s3://b.json')])
        ]))
    missing, notes = inspect_data_paths(cfg, ('val', ))
    assert missing == [f'{tmp_path}/a.json (val_evaluator.ann_file)']
    assert notes == [
        's3://b.json (val_evaluator.ann_file): remote, not '
        'checked'
    ]


def test_unknown_split_is_refused():
    with pytest.raises(ValueError, match='splits must be among'):
        missing_data_paths(Config(), ('training', ))
