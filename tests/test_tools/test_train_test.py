"""tools/train.py and tools/test.py as a user runs them."""
import json
import os
import pickle
from pathlib import Path

import pytest
import torch

from mmact.testing import narrow_fpn_detector
from mmact.testing.tool_fork import run_python
from mmact.utils.preflight import load_config

REPO = Path(__file__).resolve().parents[2]
TOY_COCO = REPO / 'configs/toy/mask-rcnn_r50_fpn_toy-coco.py'
TOY_LVIS = REPO / 'configs/toy/mask-rcnn_r50_fpn_toy-lvis.py'


def run(args, cwd, check=True):
    result = run_python(args, cwd=cwd, timeout=900,
                        env=dict(os.environ, PYTHONWARNINGS='ignore'))
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope='module')
def lvis_run(tmp_path_factory, toy_data_root):
    """Train the toy LVIS config at a sixteenth of its widths (the same
    blocks and heads; the tools' paths do not depend on the widths, the
    full model trains in tests/test_configs/test_all_configs.py) for one
    epoch on 12 images, then validate: ``(cwd, work dir, log, config)``."""
    cwd = tmp_path_factory.mktemp('lvis')
    (cwd / 'data').mkdir()
    (cwd / 'data' / 'toy_lvis').symlink_to(
        toy_data_root('lvis', num_train=12, num_val=4))
    narrow = load_config(str(TOY_LVIS))
    narrow_fpn_detector(narrow.model, depth=50)
    config = cwd / 'toy_lvis_narrow.py'
    narrow.dump(str(config))
    work_dir = cwd / 'work'
    result = run([REPO / 'tools/train.py', config, '--work-dir', work_dir,
                  '--cfg-options', 'train_cfg.max_epochs=1',
                  'train_cfg.val_interval=1'], cwd)
    return cwd, work_dir, result.stdout + result.stderr, config


@pytest.mark.slow
def test_train_evaluates_with_lvis_metric(lvis_run):
    _, work_dir, log, _ = lvis_run
    assert 'lvis/bbox_AP:' in log and 'lvis/segm_AP:' in log
    assert (work_dir / 'epoch_1.pth').exists()


@pytest.mark.slow
def test_test_dumps_predictions_and_draws(lvis_run):
    cwd, work_dir, _, config = lvis_run
    out = cwd / 'preds.pkl'
    result = run([REPO / 'tools/test.py', config, work_dir / 'epoch_1.pth',
                  '--work-dir', cwd / 'test', '--out', out, '--show-dir',
                  'shown'], cwd)
    assert 'lvis/bbox_AP:' in result.stdout + result.stderr
    with open(out, 'rb') as f:
        predictions = pickle.load(f)
    assert len(predictions) == 4
    assert {'bboxes', 'scores', 'labels', 'masks'} <= set(
        predictions[0]['pred_instances'])
    assert len(list((cwd / 'test').rglob('shown/*.jpg'))) == 4


@pytest.mark.slow
def test_corrupt_resume_checkpoint_leaves_work_dir_alone(lvis_run):
    cwd, work_dir, _, config = lvis_run
    before = {p: p.stat().st_mtime_ns for p in work_dir.rglob('*')}
    corrupt = cwd / 'corrupt.pth'
    corrupt.write_bytes((work_dir / 'epoch_1.pth').read_bytes()[:4096])
    result = run([REPO / 'tools/train.py', config, '--work-dir', work_dir,
                  '--resume', corrupt], cwd, check=False)
    assert result.returncode != 0
    assert 'truncated' in result.stderr and str(corrupt) in result.stderr
    assert {p: p.stat().st_mtime_ns for p in work_dir.rglob('*')} == before
    # Loadable as before.
    assert 'state_dict' in torch.load(work_dir / 'epoch_1.pth',
                                      weights_only=False)


def test_config_typo(tmp_path):
    result = run([REPO / 'tools/train.py', REPO / 'configs/toy/mask-rcnn_r50_fpn_toy-cooc.py'],
                 tmp_path, check=False)
    assert result.returncode != 0
    assert 'Did you mean' in result.stderr
    assert 'mask-rcnn_r50_fpn_toy-coco.py' in result.stderr


def test_missing_dataset_says_how_to_generate(tmp_path):
    result = run([REPO / 'tools/train.py', TOY_COCO, '--work-dir',
                  tmp_path / 'work'], tmp_path, check=False)
    assert result.returncode != 0
    assert 'data/toy_coco/annotations/instances_train2017.json' in result.stderr
    assert 'generate_toy_data.py' in result.stderr
    assert not (tmp_path / 'work').exists()


def test_unknown_type_names_the_type_and_registry(tmp_path):
    config = tmp_path / 'typo.py'
    config.write_text(f"_base_ = '{TOY_COCO}'\n"
                      "model = dict(backbone=dict(type='ResNett'))\n")
    # The data checks run first: give them one annotated image per split.
    classes = load_config(
        str(TOY_COCO)).train_dataloader.dataset.metainfo['classes']
    annotations = json.dumps(dict(
        images=[dict(id=1, file_name='1.jpg', width=64, height=64)],
        annotations=[dict(id=1, image_id=1, category_id=1, bbox=[8, 8, 16, 16],
                          area=256, iscrowd=0)],
        categories=[dict(id=i + 1, name=name)
                    for i, name in enumerate(classes)]))
    for folder in ('annotations', 'train2017', 'val2017'):
        (tmp_path / 'data' / 'toy_coco' / folder).mkdir(parents=True)
    for split in ('train', 'val'):
        (tmp_path / 'data/toy_coco/annotations' /
         f'instances_{split}2017.json').write_text(annotations)
    result = run([REPO / 'tools/train.py', config, '--work-dir',
                  tmp_path / 'work'], tmp_path, check=False)
    assert result.returncode != 0
    assert 'ResNett is not in the mmdet::model registry' in result.stderr
    assert 'Did you mean: ResNet' in result.stderr


@pytest.mark.parametrize('config,kind', [(TOY_COCO, 'coco'), (TOY_LVIS, 'lvis')])
def test_toy_configs_name_the_generated_classes(config, kind):
    from mmact.testing import toy_classes
    cfg = load_config(str(config))
    classes = cfg.val_dataloader.dataset.metainfo['classes']
    assert tuple(classes) == toy_classes(kind, len(classes))
    assert cfg.model.roi_head.bbox_head.num_classes == len(classes)
    assert cfg.model.roi_head.mask_head.num_classes == len(classes)
