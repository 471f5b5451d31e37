"""tools/misc/check_data.py on generated data: a complete root passes; a
missing file, a malformed annotation field, a bad list line, a missing
image and a label the model cannot predict are each named."""
import json
import runpy
import shutil
from pathlib import Path

import pytest

from mmact.testing import generate_toy_data
from mmact.testing.tool_fork import run_python

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / 'tools/misc/check_data.py'
LVIS = 'configs/lvis/apa_mrcnn_r50.py'
IMAGENET_LT = 'configs/imagenet/apase-aglu-r50_cos-cls_8xb32-coslr-200e_in1k-lt.py'
V3DET = 'configs/v3det/faster-rcnn_apase-aglu-r50_fpn_8xb4-rfs-ms-2x_v3det.py'


@pytest.fixture(scope='module')
def generated(tmp_path_factory):
    root = tmp_path_factory.mktemp('generated')
    generate_toy_data('lvis', str(root / 'lvis_v1'))
    generate_toy_data('cls', str(root / 'cls'))
    return root


@pytest.fixture
def data(generated, tmp_path, monkeypatch):
    """A fresh copy under ./data, where the configs look."""
    shutil.copytree(generated / 'lvis_v1', tmp_path / 'data/lvis_v1')
    monkeypatch.chdir(tmp_path)
    return tmp_path / 'data'


def check(capsys, *argv):
    """Run the tool in this process: (exit status, stdout, stderr)."""
    main = runpy.run_path(str(TOOL))['main']
    status = main([str(REPO / argv[0]), *argv[1:]])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_complete_root_passes(data):
    result = run_python([TOOL, REPO / LVIS], cwd=data.parent, timeout=300)
    assert result.returncode == 0, result.stderr
    assert 'train: 24 samples' in result.stdout
    assert 'the data of train, val, test is complete' in result.stdout


def test_missing_annotation_file_is_named(data, capsys):
    (data / 'lvis_v1/annotations/lvis_v1_val.json').unlink()
    status, _, err = check(capsys, LVIS, '--paths-only')
    assert status == 1
    assert 'data/lvis_v1/annotations/lvis_v1_val.json ' \
        '(val_dataloader.dataset.ann_file)' in err
    assert 'docs/user_guides/datasets.md' in err
    status, _, err = check(capsys, LVIS, '--splits', 'train')
    assert status == 0


def test_malformed_fields_are_named(data, capsys):
    path = data / 'lvis_v1/annotations/lvis_v1_train.json'
    content = json.loads(path.read_text())
    content['annotations'][3]['bbox'] = [1.0, 2.0, 3.0]
    del content['images'][1]['coco_url']
    content['annotations'][5]['segmentation'] = [[1, 2, 3]]
    path.write_text(json.dumps(content))
    status, _, err = check(capsys, LVIS, '--splits', 'train')
    assert status == 1 and 'malformed annotation fields' in err
    ann3, ann5 = content['annotations'][3], content['annotations'][5]
    img1 = content['images'][1]
    assert f'lvis_v1_train.json: annotations[3] (id {ann3["id"]}).bbox: ' \
        '[1.0, 2.0, 3.0], expected [x, y, width, height]' in err
    assert f'images[1] (id {img1["id"]}).coco_url: missing' in err
    assert f'annotations[5] (id {ann5["id"]}).segmentation: polygon 0' in err


def test_missing_image_is_named(data, capsys):
    image = sorted((data / 'lvis_v1/val2017').iterdir())[0]
    image.unlink()
    status, _, err = check(capsys, LVIS, '--splits', 'val')
    assert status == 1 and 'image files missing' in err
    assert f'{image.name} (val_dataloader.dataset: image of a sample)' in err


def test_labels_beyond_the_heads_are_named(data, capsys):
    status, _, err = check(
        capsys, LVIS, '--splits', 'train', '--cfg-options',
        'model.roi_head.bbox_head.num_classes=10',
        'model.roi_head.mask_head.num_classes=10')
    assert status == 1 and 'cannot train or test' in err
    assert 'model.roi_head.bbox_head.num_classes = 10' in err


def test_classification_list_lines_are_named(generated, tmp_path, capsys,
                                             monkeypatch):
    """ImageNet-LT's lists: a line without a label names its number."""
    root = tmp_path / 'data/imagenet'
    shutil.copytree(generated / 'cls', root)
    meta = root / 'meta'
    for split in ('train', 'val'):
        (meta / f'{split}.txt').rename(meta / f'ImageNet_LT_{split}.txt')
    lines = (meta / 'ImageNet_LT_val.txt').read_text().splitlines()
    (meta / 'ImageNet_LT_test.txt').write_text('\n'.join(lines) + '\n')
    # the lists are relative to data/imagenet/: train images under train/
    train = [f'train/{line}' for line in
             (meta / 'ImageNet_LT_train.txt').read_text().splitlines()]
    (meta / 'ImageNet_LT_train.txt').write_text('\n'.join(train) + '\n')
    for split in ('val', 'test'):
        fixed = [f'val/{line}' for line in lines]
        (meta / f'ImageNet_LT_{split}.txt').write_text('\n'.join(fixed) +
                                                       '\n')
    monkeypatch.chdir(tmp_path)
    options = ['--cfg-options', 'model.head.num_classes=1000']
    status, out, err = check(capsys, IMAGENET_LT, *options)
    assert status == 0, err
    fixed[2] = fixed[2].split()[0]
    (meta / 'ImageNet_LT_test.txt').write_text('\n'.join(fixed) + '\n')
    status, _, err = check(capsys, IMAGENET_LT, *options)
    assert status == 1
    assert f'ImageNet_LT_test.txt: line 3: {fixed[2]!r} has no label' in err


def test_missing_v3det_label_file_is_named_with_its_download(
        tmp_path, capsys, monkeypatch):
    """V3DetDataset reads its class names from data_root by default."""
    root = tmp_path / 'data/V3Det'
    generate_toy_data('v3det', str(root))
    monkeypatch.chdir(tmp_path)
    status, out, _ = check(capsys, V3DET, '--paths-only')
    assert status == 0, out
    labels = root / 'annotations/category_name_13204_v3det_2023_v1.txt'
    labels.unlink()
    status, _, err = check(capsys, V3DET, '--paths-only')
    assert status == 1
    lines = err.splitlines()
    relative = labels.relative_to(tmp_path)
    for split in ('train_dataloader.dataset.dataset', 'val_dataloader.dataset',
                  'test_dataloader.dataset'):
        assert f'  {relative} ({split}.label_file)' in lines
    assert 'to get them: V3Det: the images, v3det_2023_v1_train.json, ' \
        'v3det_2023_v1_val.json and category_name_13204_v3det_2023_v1.txt ' \
        'from https://v3det.openxlab.org.cn/' in lines
    assert lines[-1] == f'mmact: {REPO / V3DET}: files and folders ' \
        'missing (where each dataset comes from and its layout: ' \
        'docs/user_guides/datasets.md); 3 listed above'


def test_missing_generated_set_names_its_generator(tmp_path, capsys,
                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, _, err = check(capsys, 'configs/toy/apa_mrcnn_r50_toy.py',
                           '--paths-only')
    assert status == 1
    assert 'to get them: python tools/misc/generate_toy_data.py lvis ' \
        '--out-dir data/' in err.splitlines()
