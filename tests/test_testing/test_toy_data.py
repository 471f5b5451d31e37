"""Tests of the deterministic toy dataset generator (mmact.testing)."""
import filecmp
import importlib.util
import json
import os
import os.path as osp
import subprocess
import sys
from collections import Counter, defaultdict
from typing import Dict, List

import cv2
import numpy as np
import pytest
from pycocotools.coco import COCO

from mmact.testing import (COCO_CATEGORY_IDS, MANIFEST, TOY_FORMATS,
                           category_appearance, generate_toy_data,
                           lvis_frequency, lvis_frequency_thresholds,
                           missing_files, toy_classes)

# pycocotools' mask decoding warns on numpy 2 once per call; not ours
pytestmark = pytest.mark.filterwarnings(
    'ignore:__array__ implementation:DeprecationWarning')

SMALL = dict(num_train=6, num_val=4, num_classes=5)


def _mmdet_config(relpath: str):
    """Load a stock mmdet config shipped in the installed package."""
    from mmengine.config import Config
    spec = importlib.util.find_spec('mmdet')
    return Config.fromfile(
        osp.join(osp.dirname(spec.origin), '.mim', 'configs', relpath))


def _mmpretrain_config(relpath: str):
    """Load a stock mmpretrain config shipped in the installed package."""
    from mmengine.config import Config
    spec = importlib.util.find_spec('mmpretrain')
    return Config.fromfile(
        osp.join(osp.dirname(spec.origin), '.mim', 'configs', relpath))


def _set_data_root(dataset_cfg, data_root: str) -> None:
    """Swap ``data_root`` in a dataset config and in wrapped datasets."""
    if 'dataset' in dataset_cfg:
        _set_data_root(dataset_cfg['dataset'], data_root)
    else:
        dataset_cfg['data_root'] = data_root


def _build_mmdet_dataset(dataset_cfg):
    """Build a dataset with mmdet's registry and default scope."""
    from mmdet.registry import DATASETS
    from mmdet.utils import register_all_modules
    from mmengine.registry import DefaultScope
    register_all_modules(init_default_scope=False)
    with DefaultScope.overwrite_default_scope('mmdet'):
        return DATASETS.build(dataset_cfg)


def _load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def _mask_extent(mask: np.ndarray) -> List[float]:
    ys, xs = np.nonzero(mask)
    return [
        float(xs.min()),
        float(ys.min()),
        float(xs.max() - xs.min() + 1),
        float(ys.max() - ys.min() + 1)
    ]


def _tree(root: str) -> List[str]:
    return sorted(
        osp.relpath(osp.join(d, n), root) for d, _, names in os.walk(root)
        for n in names)


# The default sets, written once per test session (tests/conftest.py).
@pytest.fixture(scope='module')
def coco_root(toy_data_root) -> str:
    return toy_data_root('coco')


@pytest.fixture(scope='module')
def lvis_root(toy_data_root) -> str:
    return toy_data_root('lvis')


@pytest.fixture(scope='module')
def v3det_root(toy_data_root) -> str:
    return toy_data_root('v3det')


@pytest.fixture(scope='module')
def o365_root(toy_data_root) -> str:
    return toy_data_root('objects365')


@pytest.fixture(scope='module')
def cls_root(toy_data_root) -> str:
    return toy_data_root('cls')


# ---------------------------------------------------------------------------
# determinism, names, options, completeness, CLI
# ---------------------------------------------------------------------------
SMALL_OPTIONS = {
    'coco': SMALL,
    'lvis': dict(num_train=12, num_val=4, num_classes=6),
    'v3det': SMALL,
    'objects365': SMALL,
    'cls': dict(num_classes=4, max_per_class=6, num_val_per_class=2),
}


@pytest.mark.parametrize('fmt', TOY_FORMATS)
def test_deterministic(tmp_path, fmt):
    kwargs = SMALL_OPTIONS[fmt]
    a = generate_toy_data(fmt, str(tmp_path / 'a'), seed=3, **kwargs)
    b = generate_toy_data(fmt, str(tmp_path / 'b'), seed=3, **kwargs)
    c = generate_toy_data(fmt, str(tmp_path / 'c'), seed=4, **kwargs)
    files = _tree(a)
    assert files == _tree(b) and len(files) > 3
    match, mismatch, errors = filecmp.cmpfiles(a, b, files, shallow=False)
    assert mismatch == [] and errors == [] and len(match) == len(files)
    # decoded images are identical too (not only the encoded bytes)
    for rel in files:
        if rel.endswith('.jpg'):
            assert np.array_equal(
                cv2.imread(osp.join(a, rel)), cv2.imread(osp.join(b, rel)))
    # another seed gives other data
    assert any(not filecmp.cmp(osp.join(a, f), osp.join(c, f), shallow=False)
               for f in files if osp.exists(osp.join(c, f)))


def test_options_checked(tmp_path):
    with pytest.raises(ValueError, match="unknown option.*with_segm"):
        generate_toy_data('coco', str(tmp_path), with_segm=False)
    with pytest.raises(ValueError, match='accepted:.*num_val_per_class'):
        generate_toy_data('cls', str(tmp_path), num_train=3)
    with pytest.raises(ValueError, match='unknown toy format'):
        generate_toy_data('voc', str(tmp_path))
    with pytest.raises(ValueError, match='rare_max < common_max'):
        generate_toy_data('lvis', str(tmp_path), rare_max=5, common_max=5)
    with pytest.raises(ValueError, match='imbalance must be >= 1'):
        generate_toy_data('cls', str(tmp_path), imbalance=0.5)
    with pytest.raises(ValueError, match='image_size must be at least 32'):
        generate_toy_data('lvis', str(tmp_path), image_size=(16, 64))


def test_manifest_and_missing_files(tmp_path):
    calls = []
    root = generate_toy_data(
        'lvis',
        str(tmp_path / 'lvis'),
        progress=lambda *a: calls.append(a),
        **SMALL_OPTIONS['lvis'])
    # progress after every image of each split, in order
    assert calls == [('train', i, 12)
                     for i in range(1, 13)] + [('val', i, 4)
                                               for i in range(1, 5)]
    manifest = _load(osp.join(root, MANIFEST))
    assert manifest['format'] == 'lvis'
    assert manifest['options']['num_train'] == 12
    assert sorted(
        manifest['files']) == [f for f in _tree(root) if f != MANIFEST]
    assert missing_files(root, 'lvis', **SMALL_OPTIONS['lvis']) == []
    # other options: not this set
    problems = missing_files(root, 'lvis', num_train=13)
    assert len(problems) == 1 and 'not \'lvis\'' in problems[0]
    # a lost image is named
    os.remove(osp.join(root, 'val2017', '000000000013.jpg'))
    assert missing_files(root, 'lvis', **SMALL_OPTIONS['lvis']) == [
        osp.join(root, 'val2017', '000000000013.jpg')
    ]
    # an interrupted run has no manifest
    os.remove(osp.join(root, MANIFEST))
    assert 'did not finish' in missing_files(root, 'lvis',
                                             **SMALL_OPTIONS['lvis'])[0]


def test_toy_classes():
    from mmdet.datasets import (CocoDataset, LVISV1Dataset,
                                Objects365V2Dataset)
    from mmpretrain.datasets.categories import IMAGENET_CATEGORIES
    assert toy_classes('coco', 8) == CocoDataset.METAINFO['classes'][:8]
    assert toy_classes('lvis', 20) == LVISV1Dataset.METAINFO['classes'][:20]
    assert toy_classes('objects365',
                       5) == Objects365V2Dataset.METAINFO['classes'][:5]
    assert toy_classes('cls', 3) == tuple(IMAGENET_CATEGORIES[:3])
    assert len(set(toy_classes('v3det', 8))) == 8
    assert len(COCO_CATEGORY_IDS) == 80 and COCO_CATEGORY_IDS[-1] == 90
    with pytest.raises(ValueError):
        toy_classes('coco', 81)
    with pytest.raises(ValueError):
        toy_classes('voc', 3)


def test_lvis_frequency_rule():
    assert [lvis_frequency(n, 2, 6)
            for n in (1, 2, 3, 6, 7, 100)] == ['r', 'r', 'c', 'c', 'f', 'f']
    assert lvis_frequency_thresholds(24, 20) == (2, 7)
    for num_train, num_classes in ((3, 3), (10, 40), (24, 20), (400, 100)):
        rare_max, common_max = lvis_frequency_thresholds(
            num_train, num_classes)
        assert 1 <= rare_max < common_max < num_train


def test_cli(load_tool, tmp_path, capsys):
    cli = load_tool('tools/misc/generate_toy_data.py')
    assert cli.main([
        'coco', 'cls', '--out-dir',
        str(tmp_path), '--num-train', '5', '--num-val', '2', '--num-classes',
        '3', '--seed', '1'
    ]) == 0
    out = capsys.readouterr().out
    assert 'toy_coco' in out and 'toy_cls' in out
    coco = _load(str(tmp_path / 'toy_coco/annotations/instances_val2017.json'))
    assert len(coco['images']) == 2 and len(coco['categories']) == 3
    assert len(os.listdir(tmp_path / 'toy_coco' / 'train2017')) == 5
    lines = (tmp_path / 'toy_cls/meta/val.txt').read_text().splitlines()
    assert len(lines) == 3 * 2
    assert not (tmp_path / 'toy_lvis').exists()
    with pytest.raises(SystemExit):
        cli.main(['voc', '--out-dir', str(tmp_path)])


def test_cli_skip_complete(load_tool, tmp_path, capsys):
    cli = load_tool('tools/misc/generate_toy_data.py')
    args = [
        'lvis', '--out-dir',
        str(tmp_path), '--num-train', '6', '--num-val', '2', '--num-classes',
        '5', '--skip-complete'
    ]
    assert cli.main(args) == 0
    assert 'lvis val: 2/2 images' in capsys.readouterr().out
    assert cli.main(args) == 0
    assert 'is complete, kept' in capsys.readouterr().out
    lost = tmp_path / 'toy_lvis' / 'train2017' / '000000000002.jpg'
    lost.unlink()
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert 'is incomplete' in out and str(lost) in out
    assert lost.is_file()


def test_import_mmact_does_not_import_testing():
    code = ('import sys, mmact; '
            'sys.exit(int("mmact.testing" in sys.modules))')
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [osp.dirname(osp.dirname(sys.modules['mmact'].__file__))] +
            [p for p in [os.environ.get('PYTHONPATH')] if p]))
    subprocess.run([sys.executable, '-c', code], check=True, env=env)


# ---------------------------------------------------------------------------
# exact annotations
# ---------------------------------------------------------------------------
def _check_exact(ann_file: str,
                 img_dir_fn,
                 label_of: Dict[int, int],
                 with_segm: bool = True) -> int:
    """Masks/bboxes/areas agree with each other and with the pixels."""
    coco = COCO(ann_file)
    assert coco.getAnnIds(), 'no annotations'
    for img_id in coco.getImgIds():
        info = coco.loadImgs([img_id])[0]
        img = cv2.imread(img_dir_fn(info))
        assert img is not None and img.shape == (info['height'], info['width'],
                                                 3)
        anns = coco.loadAnns(coco.getAnnIds(imgIds=[img_id]))
        assert 1 <= len(anns) <= 4
        union = np.zeros(img.shape[:2], np.int32)
        for ann in anns:
            assert ann.get('iscrowd', 0) == 0
            if not with_segm:
                assert 'segmentation' not in ann
                continue
            assert len(ann['segmentation']) == 1  # one exact polygon
            mask = coco.annToMask(ann).astype(bool)
            assert mask.sum() == ann['area'] > 0
            assert ann['bbox'] == _mask_extent(mask)
            union += mask
            # the shape is painted with the category colour over the mask
            inner = cv2.erode(mask.astype(np.uint8), np.ones((3, 3), np.uint8))
            if inner.sum() >= 4:
                _, colour = category_appearance(label_of[ann['category_id']])
                mean = img[inner.astype(bool)].reshape(-1, 3).mean(axis=0)
                assert np.abs(mean - np.asarray(colour)).max() < 12
        assert union.max() <= 1, 'shapes overlap'
    return len(coco.getAnnIds())


def test_coco_exact(coco_root):
    names = toy_classes('coco', 8)
    for split in ('train', 'val'):
        ann_file = osp.join(coco_root,
                            f'annotations/instances_{split}2017.json')
        data = _load(ann_file)
        assert [c['id']
                for c in data['categories']] == list(COCO_CATEGORY_IDS[:8])
        assert tuple(c['name'] for c in data['categories']) == names
        assert data['categories'][0]['supercategory'] == 'person'
        assert len(data['images']) == (16 if split == 'train' else 8)
        # every class is present in each split
        assert {a['category_id']
                for a in data['annotations']} == set(COCO_CATEGORY_IDS[:8])
        n = _check_exact(
            ann_file,
            lambda i, s=split: osp.join(coco_root, f'{s}2017', i['file_name']),
            {
                cid: k
                for k, cid in enumerate(COCO_CATEGORY_IDS)
            })
        assert n == len(data['annotations'])


def test_v3det_o365_files(v3det_root, o365_root):
    label_of = {k + 1: k for k in range(8)}
    n = _check_exact(
        osp.join(v3det_root, 'annotations/v3det_2023_v1_val.json'),
        lambda i: osp.join(v3det_root, i['file_name']), label_of, False)
    assert n > 8
    names = open(
        osp.join(v3det_root, 'annotations',
                 'category_name_13204_v3det_2023_v1.txt')).read().split('\n')
    assert tuple(names[:-1]) == toy_classes('v3det', 8) and names[-1] == ''
    data = _load(osp.join(o365_root, 'annotations/zhiyuan_objv2_train.json'))
    assert all(i['file_name'].startswith('images/v2/patch0/objects365_v2_')
               for i in data['images'])
    _check_exact(
        osp.join(o365_root, 'annotations/zhiyuan_objv2_train.json'),
        lambda i: osp.join(o365_root, 'train', 'patch0',
                           osp.basename(i['file_name'])), label_of, False)


def test_segm_option(tmp_path):
    root = generate_toy_data(
        'objects365', str(tmp_path), with_segm=True, **SMALL)
    _check_exact(
        osp.join(root,
                 'annotations/zhiyuan_objv2_val.json'), lambda i: osp.join(
                     root, 'val', 'patch0', osp.basename(i['file_name'])),
        {k + 1: k
         for k in range(5)})


# ---------------------------------------------------------------------------
# LVIS
# ---------------------------------------------------------------------------
def test_lvis_long_tail(lvis_root):
    from lvis import LVIS
    train = LVIS(osp.join(lvis_root, 'annotations/lvis_v1_train.json'))
    val = LVIS(osp.join(lvis_root, 'annotations/lvis_v1_val.json'))
    thr = train.dataset['info']['frequency_thresholds']
    assert (thr['rare_max'],
            thr['common_max']) == lvis_frequency_thresholds(24, 20)
    cats = train.load_cats(train.get_cat_ids())
    assert len(cats) == 20 and len(train.get_img_ids()) == 24
    assert [c['id'] for c in cats] == list(range(1, 21))
    assert tuple(c['name'] for c in cats) == toy_classes('lvis', 20)
    assert val.dataset['categories'] == train.dataset['categories']
    # image_count / instance_count are the generated training statistics
    images_of = defaultdict(set)
    instances = Counter()
    for ann in train.dataset['annotations']:
        images_of[ann['category_id']].add(ann['image_id'])
        instances[ann['category_id']] += 1
    for cat in cats:
        assert cat['image_count'] == len(images_of[cat['id']]) >= 1
        assert cat['instance_count'] == instances[cat['id']]
        assert cat['frequency'] == lvis_frequency(cat['image_count'],
                                                  thr['rare_max'],
                                                  thr['common_max'])
        for key in ('synset', 'synonyms', 'def'):
            assert cat[key]
    # long tail: a few frequent, some common, several rare
    freq = Counter(c['frequency'] for c in cats)
    assert 1 <= freq['f'] < freq['c'] < freq['r']
    counts = sorted(c['image_count'] for c in cats)
    assert counts[0] == 1 and counts[-1] >= 5 * counts[0]
    # frequency does not follow category id order
    assert [c['frequency'] for c in cats] != sorted(c['frequency']
                                                    for c in cats)
    # federated labels
    for lvis_api in (train, val):
        for img in lvis_api.dataset['images']:
            present = {
                a['category_id']
                for a in lvis_api.img_ann_map[img['id']]
            }
            assert present
            assert not set(img['neg_category_ids']) & present
            assert set(img['not_exhaustive_category_ids']) <= present
            rel = img['coco_url'].replace('http://images.cocodataset.org/', '')
            assert osp.isfile(osp.join(lvis_root, rel))
    assert any(i['neg_category_ids'] for i in train.dataset['images'])
    assert any(i['not_exhaustive_category_ids']
               for i in train.dataset['images'])
    # val covers all categories
    assert {a['category_id']
            for a in val.dataset['annotations']} == set(range(1, 21))


def test_lvis_exact_and_lvis_eval(lvis_root):
    from lvis import LVIS, LVISEval, LVISResults
    from mmact.utils import patch_lvis_numpy
    ann_file = osp.join(lvis_root, 'annotations/lvis_v1_val.json')
    data = _load(ann_file)
    for ann in data['annotations']:
        assert 'iscrowd' not in ann
    _check_exact(
        ann_file, lambda i: osp.join(
            lvis_root, i['coco_url'].replace('http://images.cocodataset.org/',
                                             '')),
        {k + 1: k
         for k in range(20)})
    assert patch_lvis_numpy()
    gt = LVIS(ann_file)
    for iou_type in ('bbox', 'segm'):
        results = []
        for ann in gt.dataset['annotations']:
            res = dict(
                image_id=ann['image_id'],
                category_id=ann['category_id'],
                score=1.0)
            if iou_type == 'bbox':
                res['bbox'] = ann['bbox']
            else:
                rle = gt.ann_to_rle(ann)
                rle['counts'] = rle['counts'].decode()
                res['segmentation'] = rle
            results.append(res)
        lvis_eval = LVISEval(gt, LVISResults(gt, results), iou_type)
        lvis_eval.run()
        stats = lvis_eval.get_results()
        for key in ('AP', 'AP50', 'APr', 'APc', 'APf'):
            assert stats[key] == pytest.approx(1.0), (iou_type, key)


# ---------------------------------------------------------------------------
# stock dataset classes and pipelines
# ---------------------------------------------------------------------------
def _check_mmdet_dataset(cfg, root: str, ann_file: str, with_mask: bool,
                         cat_ids: List[int]):
    _set_data_root(cfg, root)
    dataset = _build_mmdet_dataset(cfg)
    inner = dataset.dataset if hasattr(dataset, 'dataset') else dataset
    data = _load(ann_file)
    assert len(dataset) == len(data['images'])
    assert list(inner.cat_ids) == cat_ids
    n_inst = 0
    for i in range(len(inner)):
        info = inner.get_data_info(i)
        assert osp.isfile(info['img_path'])
        n_inst += len(info['instances'])
        for inst in info['instances']:
            assert 0 <= inst['bbox_label'] < len(cat_ids)
            assert ('mask' in inst) == with_mask
    assert n_inst == len(data['annotations'])
    sample = dataset[0]
    gt = sample['data_samples'].gt_instances
    assert sample['inputs'].shape[0] == 3 and len(gt) >= 1
    assert hasattr(gt, 'masks') == with_mask
    return dataset


def test_mmdet_coco_dataset(coco_root):
    cfg = _mmdet_config('_base_/datasets/coco_instance.py')
    for loader, split in ((cfg.train_dataloader, 'train'), (cfg.val_dataloader,
                                                            'val')):
        _check_mmdet_dataset(
            loader.dataset, coco_root,
            osp.join(coco_root, f'annotations/instances_{split}2017.json'),
            True, list(COCO_CATEGORY_IDS[:8]))


def test_mmdet_lvis_dataset(lvis_root):
    cfg = _mmdet_config('_base_/datasets/lvis_v1_instance.py')
    assert cfg.train_dataloader.dataset.type == 'ClassBalancedDataset'
    for loader, split in ((cfg.train_dataloader, 'train'), (cfg.val_dataloader,
                                                            'val')):
        _check_mmdet_dataset(
            loader.dataset, lvis_root,
            osp.join(lvis_root, f'annotations/lvis_v1_{split}.json'), True,
            list(range(1, 21)))


def test_mmdet_v3det_o365_datasets(v3det_root, o365_root):
    cfg = _mmdet_config('_base_/datasets/v3det.py')
    for loader, split in ((cfg.train_dataloader, 'train'), (cfg.val_dataloader,
                                                            'val')):
        dataset = _check_mmdet_dataset(
            loader.dataset, v3det_root,
            osp.join(v3det_root, f'annotations/v3det_2023_v1_{split}.json'),
            False, list(range(1, 9)))
        inner = dataset.dataset if hasattr(dataset, 'dataset') else dataset
        assert inner.metainfo['classes'] == toy_classes('v3det', 8)
    cfg = _mmdet_config('_base_/datasets/objects365v2_detection.py')
    for loader, split in ((cfg.train_dataloader, 'train'), (cfg.val_dataloader,
                                                            'val')):
        _check_mmdet_dataset(
            loader.dataset, o365_root,
            osp.join(o365_root, f'annotations/zhiyuan_objv2_{split}.json'),
            False, list(range(1, 9)))


@pytest.mark.parametrize('fmt', ['coco', 'v3det', 'objects365'])
def test_coco_metric_perfect(fmt, coco_root, v3det_root, o365_root):
    import torch
    from mmdet.evaluation import CocoMetric
    root, cfg_file, ann = {
        'coco': (coco_root, '_base_/datasets/coco_instance.py',
                 'annotations/instances_val2017.json'),
        'v3det': (v3det_root, '_base_/datasets/v3det.py',
                  'annotations/v3det_2023_v1_val.json'),
        'objects365': (o365_root, '_base_/datasets/objects365v2_detection.py',
                       'annotations/zhiyuan_objv2_val.json'),
    }[fmt]
    cfg = _mmdet_config(cfg_file)
    _set_data_root(cfg.val_dataloader.dataset, root)
    dataset = _build_mmdet_dataset(cfg.val_dataloader.dataset)
    metrics = ['bbox', 'segm'] if fmt == 'coco' else ['bbox']
    metric = CocoMetric(ann_file=osp.join(root, ann), metric=metrics)
    metric.dataset_meta = dataset.metainfo
    coco = COCO(osp.join(root, ann))
    for img_id in coco.getImgIds():
        info = coco.loadImgs([img_id])[0]
        anns = coco.loadAnns(coco.getAnnIds(imgIds=[img_id]))
        bboxes = torch.tensor([[x, y, x + w, y + h]
                               for x, y, w, h in (a['bbox'] for a in anns)])
        pred = dict(
            bboxes=bboxes,
            scores=torch.ones(len(anns)),
            labels=torch.tensor(
                [dataset.cat_ids.index(a['category_id']) for a in anns]))
        if 'segm' in metrics:
            pred['masks'] = torch.from_numpy(
                np.stack([coco.annToMask(a) for a in anns]).astype(bool))
        metric.process({}, [
            dict(
                img_id=img_id,
                ori_shape=(info['height'], info['width']),
                pred_instances=pred)
        ])
    results = metric.evaluate(size=len(coco.getImgIds()))
    for m in metrics:
        assert results[f'coco/{m}_mAP'] == pytest.approx(1.0)
        assert results[f'coco/{m}_mAP_50'] == pytest.approx(1.0)


def test_mmpretrain_long_tail(cls_root):
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import DATASETS
    from mmpretrain.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    cfg = _mmpretrain_config('_base_/datasets/imagenet_bs32.py')
    counts = {}
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        for split, loader in (('train', cfg.train_dataloader),
                              ('val', cfg.val_dataloader)):
            loader.dataset.data_root = cls_root
            dataset = DATASETS.build(loader.dataset)
            assert type(dataset).__name__ == 'ImageNet'
            labels = [int(x) for x in dataset.get_gt_labels()]
            counts[split] = [labels.count(k) for k in range(10)]
            assert all(
                osp.isfile(dataset.get_data_info(i)['img_path'])
                for i in range(len(dataset)))
            sample = dataset[0]
            assert tuple(sample['inputs'].shape) == (3, 224, 224)
            assert sample['data_samples'].gt_label.item() == labels[0]
        custom = DATASETS.build(
            dict(
                type='CustomDataset',
                data_root=cls_root,
                ann_file='meta/train.txt',
                data_prefix='train',
                classes=osp.join(cls_root, 'meta/classes.txt'),
                pipeline=[]))
        assert custom.CLASSES == toy_classes('cls', 10)
        assert len(custom) == sum(counts['train'])
    train = counts['train']
    assert train[0] == 20 and train[-1] == 2  # imbalance 10
    assert all(a >= b for a, b in zip(train, train[1:]))
    assert counts['val'] == [5] * 10


def test_classification_imbalance_option(tmp_path):
    root = generate_toy_data(
        'cls',
        str(tmp_path),
        num_classes=5,
        imbalance=4,
        max_per_class=8,
        num_val_per_class=1,
        image_size=(24, 20))
    lines = open(osp.join(root, 'meta/train.txt')).read().splitlines()
    counts = Counter(int(line.rsplit(' ', 1)[1]) for line in lines)
    # floor(8 * 4^(-k/4)), the CIFAR-LT convention
    assert [counts[k] for k in range(5)] == [8, 5, 4, 2, 2]
    img = cv2.imread(osp.join(root, 'train', lines[0].rsplit(' ', 1)[0]))
    assert img.shape == (20, 24, 3)
