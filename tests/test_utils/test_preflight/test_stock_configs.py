"""The data check over every config mmdet and mmpretrain ship.

Parsing ~1,400 configs is the cost (about a minute per package on two
cores); the check itself takes milliseconds per config. mmengine writes each
parsed file and its bases to a temporary folder, so the temporary folder is
moved to memory when the machine has one.
"""
import glob
import os
import os.path as osp
import tempfile
import warnings
from typing import Dict

import pytest
from mmengine.config import Config

import mmact  # noqa: F401
from mmact.utils.preflight import inspect_data_paths

# Config files and path strings of the pinned mmdet / mmpretrain, the same on
# both stacks: run once, on the default one (Makefile, test-torch2.1).
pytestmark = [pytest.mark.stack_independent, pytest.mark.slow]

# Forms named in the issue that led to this check, and what they report.
EXPECTED = {
    'mmpretrain': {
        # data_prefix='train' (a string)
        'eva02/eva02-base-p14_in1k.py':
        ('data/imagenet/train (train_dataloader.dataset.data_prefix)', None),
        # ImageNet(split='train'), no data_prefix
        'resnet/resnet50_8xb32_in1k.py':
        ('data/imagenet/train (train_dataloader.dataset.split)', None),
        # CIFAR10 downloads its data (download=True by default)
        'resnet/resnet18_8xb16_cifar10.py': (None, 'download=True'),
    },
    'mmdet': {
        'mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py':
        ('data/coco/annotations/instances_train2017.json '
         '(train_dataloader.dataset.ann_file)', None),
    },
}


def stock_configs(package: str) -> Dict[str, str]:
    """``{path relative to the configs folder: path}`` of a package."""
    root = osp.join(
        osp.dirname(__import__(package).__file__), '.mim', 'configs')
    paths = sorted(glob.glob(f'{root}/**/*.py', recursive=True))
    return {
        osp.relpath(p, root): p
        for p in paths if f'{os.sep}_base_{os.sep}' not in p
    }


@pytest.mark.parametrize('package', ['mmdet', 'mmpretrain'])
def test_data_check_handles_every_stock_config(package, monkeypatch, tmp_path):
    if os.access('/dev/shm', os.W_OK):
        monkeypatch.setattr(tempfile, 'tempdir', '/dev/shm')
    monkeypatch.chdir(tmp_path)  # no data/ here: every local path missing
    paths = stock_configs(package)
    assert len(paths) > 300
    unparsable, crashed, checked = [], [], 0
    expected = dict(EXPECTED[package])
    for name, path in paths.items():
        try:
            cfg = Config.fromfile(path, import_custom_modules=False)
        except Exception as error:  # mmengine itself cannot read it
            unparsable.append(f'{name}: {type(error).__name__}')
            continue
        try:
            missing, notes = inspect_data_paths(cfg, ('train', 'val', 'test'))
        except Exception as error:
            crashed.append(f'{name}: {error!r}')
            continue
        assert all(isinstance(line, str) for line in missing + notes)
        checked += 1
        if name in EXPECTED[package]:
            expected.pop(name)
            line, note = EXPECTED[package][name]
            assert line is None or line in missing, (name, missing)
            assert note is None or any(note in n for n in notes), (name, notes)
            assert note is None or not missing, (name, missing)
    assert not crashed, '\n'.join(crashed)
    assert not expected, f'not found: {sorted(expected)}'
    if unparsable:
        warnings.warn(f'{len(unparsable)} {package} configs that mmengine '
                      'cannot parse were skipped:\n' + '\n'.join(unparsable))
    assert checked > 0.95 * len(paths)
