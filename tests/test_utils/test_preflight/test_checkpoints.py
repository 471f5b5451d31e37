import collections
import fractions
import pickle
import zipfile

import numpy as np
import pytest
import torch
from mmengine.config import Config

from mmact.utils.preflight import (check_checkpoint, check_pretrained_paths,
                                   is_remote_checkpoint,
                                   missing_pretrained_paths)

REMOTE = [
    'https://download.openmmlab.com/mmdetection/v2.0/mask_rcnn/'
    'mask_rcnn_r50_fpn_1x_coco/mask_rcnn_r50_fpn_1x_coco_20200205-d4b0c5d6'
    '.pth', 'http://example.com/x.pth', 'torchvision://resnet50',
    'modelzoo://resnet50', 'open-mmlab://resnet50_caffe',
    'openmmlab://resnet50_caffe', 'mmcls://resnet50', 'pavi://model/1',
    's3://bucket/ckpt.pth', 'cluster1:s3://bucket/ckpt.pth',
    'petrel://bucket/ckpt.pth'
]


def _checkpoint() -> dict:
    """A checkpoint as mmengine writes it: tensors, numpy, nested meta."""
    return {
        'meta': {
            'epoch': 1,
            'seed': 0,
            'array': np.arange(6),
            'ratio': fractions.Fraction(1, 3)
        },
        'state_dict':
        collections.OrderedDict(
            w=torch.randn(64, 64),
            b=torch.arange(5),
            h=torch.ones(3, dtype=torch.float16)),
        'optimizer': {
            'state': {}
        }
    }


@pytest.fixture
def zip_ckpt(tmp_path):
    path = tmp_path / 'zip.pth'
    torch.save(_checkpoint(), path)
    return path


@pytest.fixture
def legacy_ckpt(tmp_path):
    path = tmp_path / 'legacy.pth'
    torch.save(_checkpoint(), path, _use_new_zipfile_serialization=False)
    return path


@pytest.mark.parametrize('uri', REMOTE)
def test_remote_checkpoints_are_left_to_mmengine(uri):
    assert is_remote_checkpoint(uri)
    check_checkpoint(uri)  # no network needed, nothing raised


def test_unknown_scheme_is_a_local_path(tmp_path):
    assert not is_remote_checkpoint('ftp://host/x.pth')
    with pytest.raises(FileNotFoundError, match='does not exist'):
        check_checkpoint('ftp://host/x.pth')
    with pytest.raises(FileNotFoundError, match='absent.pth'):
        check_checkpoint(str(tmp_path / 'absent.pth'))


def test_zip_checkpoint(zip_ckpt, tmp_path):
    check_checkpoint(str(zip_ckpt))
    data = zip_ckpt.read_bytes()
    truncated = tmp_path / 'truncated.pth'
    truncated.write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match='truncated'):
        check_checkpoint(str(truncated))

    corrupt = tmp_path / 'corrupt.pth'
    flipped = bytearray(data)
    with zipfile.ZipFile(zip_ckpt) as archive:
        info = max(archive.infolist(), key=lambda i: i.file_size)
    # Flip bytes inside the largest stored member so only its CRC fails.
    start = info.header_offset + 30 + len(info.filename) + 64
    flipped[start:start + 16] = bytes(b ^ 0xFF
                                      for b in flipped[start:start + 16])
    corrupt.write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match='corrupt'):
        check_checkpoint(str(corrupt))


def test_legacy_checkpoint_is_accepted(legacy_ckpt):
    assert not zipfile.is_zipfile(legacy_ckpt)
    check_checkpoint(str(legacy_ckpt))
    # It is what torch (and so mmengine) loads.
    loaded = torch.load(legacy_ckpt, weights_only=False)
    assert torch.equal(loaded['state_dict']['b'], torch.arange(5))


@pytest.mark.parametrize('keep', [0.99, 0.5, 0.01])
def test_truncated_legacy_checkpoint_is_refused(legacy_ckpt, tmp_path, keep):
    data = legacy_ckpt.read_bytes()
    cut = tmp_path / 'cut.pth'
    cut.write_bytes(data[:int(len(data) * keep)])
    with pytest.raises(ValueError, match='truncated') as error:
        check_checkpoint(str(cut))
    assert str(cut) in str(error.value)
    with pytest.raises(Exception):
        torch.load(cut, weights_only=False)  # torch agrees


def test_other_files_are_refused(tmp_path):
    plain = tmp_path / 'plain.pkl'
    plain.write_bytes(pickle.dumps({'state_dict': {}}))
    text = tmp_path / 'text.pth'
    text.write_text('<html>404</html>')
    empty = tmp_path / 'empty.pth'
    empty.write_bytes(b'')
    for path, what in ((plain, 'is not a torch checkpoint'),
                       (text, 'is a web page (HTML), not a torch checkpoint'),
                       (empty, 'is empty (0 bytes), not a torch checkpoint')):
        with pytest.raises(ValueError) as error:
            check_checkpoint(str(path))
        assert f'{str(path)!r} {what}' in str(error.value)


def test_pretrained_urls_are_not_missing(tmp_path):
    cfg = Config(
        dict(
            model=dict(
                backbone=dict(
                    init_cfg=dict(type='Pretrained', checkpoint=REMOTE[0])),
                neck=dict(init_cfg=[
                    dict(type='Pretrained', checkpoint='torchvision://x'),
                    dict(
                        type='Pretrained',
                        checkpoint=str(tmp_path / 'absent.pth'))
                ]))))
    assert missing_pretrained_paths(cfg) == [
        f'{tmp_path}/absent.pth (model.neck.init_cfg[1].checkpoint)'
    ]


def _fine_tune_cfg(tmp_path, load_from_keys):
    """A detector whose backbone init file is absent, fine-tuned from a
    checkpoint holding ``load_from_keys``."""
    torch.save({'state_dict': {
        k: torch.ones(1)
        for k in load_from_keys
    }}, tmp_path / 'detector.pth')
    return Config(
        dict(
            load_from=str(tmp_path / 'detector.pth'),
            model=dict(
                backbone=dict(
                    init_cfg=dict(
                        type='Pretrained',
                        checkpoint=str(tmp_path / 'imagenet.pth'))),
                neck=dict(init_cfg=[
                    dict(type='Xavier'),
                    dict(
                        type='Pretrained',
                        checkpoint=str(tmp_path / 'neck.pth'))
                ]))))


def test_load_from_replaces_the_absent_inits_it_covers(tmp_path):
    cfg = _fine_tune_cfg(
        tmp_path, ['module.backbone.conv1.weight', 'neck.lateral.weight'])
    skipped = check_pretrained_paths(cfg)
    assert skipped == [
        f"model.backbone.init_cfg.checkpoint '{tmp_path}/imagenet.pth' does "
        f"not exist; load_from '{tmp_path}/detector.pth' holds the "
        'backbone.* weights it would initialise, so it is skipped',
        f"model.neck.init_cfg[1].checkpoint '{tmp_path}/neck.pth' does not "
        f"exist; load_from '{tmp_path}/detector.pth' holds the neck.* "
        'weights it would initialise, so it is skipped'
    ]
    assert cfg.model.backbone.init_cfg is None
    assert cfg.model.neck.init_cfg == [dict(type='Xavier')]


def test_load_from_that_does_not_cover_still_stops(tmp_path):
    cfg = _fine_tune_cfg(tmp_path, ['neck.lateral.weight'])
    with pytest.raises(FileNotFoundError, match='imagenet.pth') as error:
        check_pretrained_paths(cfg)
    assert 'neck.pth' not in str(error.value)  # covered: not listed
