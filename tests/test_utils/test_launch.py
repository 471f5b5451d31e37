import zipfile

import pytest
import torch
from mmengine.config import Config

from mmact.utils.launch import (check_checkpoint, check_data_paths,
                                load_config, missing_data_paths)

TOY_COCO = 'configs/toy/mask-rcnn_r50_fpn_toy-coco.py'
TOY_LVIS = 'configs/toy/mask-rcnn_r50_fpn_toy-lvis.py'


def test_config_typo_names_close_match():
    with pytest.raises(FileNotFoundError) as error:
        load_config('configs/toy/mask-rcnn_r50_fpn_toy-cocoo.py')
    assert 'mask-rcnn_r50_fpn_toy-coco.py' in str(error.value)


def test_config_in_missing_folder():
    with pytest.raises(FileNotFoundError, match='No such folder'):
        load_config('configs/nowhere/x.py')


def test_cfg_options_are_merged():
    cfg = load_config(TOY_COCO, {'train_cfg.max_epochs': 1})
    assert cfg.train_cfg.max_epochs == 1


def test_missing_dataset_names_every_path_and_the_generator(tmp_path):
    cfg = load_config(TOY_LVIS, {
        'train_dataloader.dataset.dataset.data_root': f'{tmp_path}/',
        'val_dataloader.dataset.data_root': f'{tmp_path}/',
        'val_evaluator.ann_file': f'{tmp_path}/annotations/lvis_v1_val.json'
    })
    missing = missing_data_paths(cfg, ('train', 'val'))
    assert any('lvis_v1_train.json' in m and 'dataset.dataset.ann_file' in m
               for m in missing)
    assert any('val_evaluator.ann_file' in m for m in missing)
    with pytest.raises(FileNotFoundError, match='generate_toy_data.py'):
        check_data_paths(cfg, ('train', 'val'))


def test_image_folder_checked(tmp_path):
    (tmp_path / 'annotations').mkdir()
    (tmp_path / 'annotations' / 'instances_train2017.json').write_text('{}')
    cfg = Config(
        dict(
            train_dataloader=dict(
                dataset=dict(
                    data_root=str(tmp_path),
                    ann_file='annotations/instances_train2017.json',
                    data_prefix=dict(img='train2017/')))))
    assert missing_data_paths(cfg, ('train', )) == [
        f'{tmp_path}/train2017/ (train_dataloader.dataset.data_prefix.img)'
    ]


def test_checkpoint_checks(tmp_path):
    good = tmp_path / 'good.pth'
    torch.save({'state_dict': {'w': torch.randn(64, 64)}}, good)
    check_checkpoint(str(good))

    with pytest.raises(FileNotFoundError, match='absent.pth'):
        check_checkpoint(str(tmp_path / 'absent.pth'))

    truncated = tmp_path / 'truncated.pth'
    truncated.write_bytes(good.read_bytes()[:len(good.read_bytes()) // 2])
    with pytest.raises(ValueError, match='truncated'):
        check_checkpoint(str(truncated))

    corrupt = tmp_path / 'corrupt.pth'
    data = bytearray(good.read_bytes())
    with zipfile.ZipFile(good) as archive:
        info = max(archive.infolist(), key=lambda i: i.file_size)
    # Flip bytes inside the largest stored member so only its CRC fails.
    start = info.header_offset + 30 + len(info.filename) + 64
    data[start:start + 16] = bytes(b ^ 0xFF for b in data[start:start + 16])
    corrupt.write_bytes(bytes(data))
    with pytest.raises(ValueError, match='corrupt'):
        check_checkpoint(str(corrupt))
