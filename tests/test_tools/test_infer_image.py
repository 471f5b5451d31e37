"""tools/misc/infer_image.py: detectors of the shipped configs (narrowed to
a few channels, untrained weights) draw and name their classes on an image,
whatever names the checkpoint carries: the checkpoint's, the config's
dataset's (LVIS v1's 1203, V3Det's label file), else numbered; names of
another class count are refused before inference."""
import json
import runpy
from pathlib import Path

import mmcv
import numpy as np
import pytest
import torch

from mmact.testing import narrow_fpn_detector
from mmact.testing.tool_fork import run_python

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / 'tools/misc/infer_image.py'
TOY = 'configs/toy/apa_mrcnn_r50_toy.py'
LVIS = 'configs/lvis/apa_mrcnn_r50.py'
V3DET = 'configs/v3det/faster-rcnn_apase-aglu-r50_fpn_8xb4-rfs-ms-2x_v3det.py'
V3DET_LABELS = 'annotations/category_name_13204_v3det_2023_v1.txt'


def narrow_config(config: str, path: Path, data_root: str = None) -> Path:
    """``config`` with narrow widths and 160x128 test images, written to
    ``path``. Its untrained model keeps 8 proposals and every score, and
    one NMS across classes: a few detections of as many candidates as classes
    x 8 in one call (over 10000 boxes, mmcv's batched NMS otherwise loops
    over the classes: 13204 calls for V3Det)."""
    from mmact.utils.preflight import load_config
    cfg = load_config(str(REPO / config))
    narrow_fpn_detector(cfg.model)
    cfg.model.test_cfg.rpn.update(nms_pre=200, max_per_img=8)
    cfg.model.test_cfg.rcnn.update(max_per_img=20, score_thr=0.0)
    cfg.model.test_cfg.rcnn.nms.update(class_agnostic=True, split_thr=10**6)
    for step in cfg.test_dataloader.dataset.pipeline:
        if step['type'] == 'Resize':
            step['scale'] = (160, 128)
    if data_root is not None:
        cfg.test_dataloader.dataset.data_root = data_root
    cfg.dump(str(path))
    return path


def save_untrained(config: Path, path: Path, meta: dict = None) -> Path:
    """A checkpoint of the config's model at its (seeded) initial weights."""
    from mmengine.registry import MODELS, DefaultScope

    from mmact.utils.preflight import load_config
    cfg = load_config(str(config))
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('mmdet'):
        model = MODELS.build(cfg.model)
    torch.save({'state_dict': model.state_dict(), 'meta': meta or {}}, path)
    return path


@pytest.fixture
def image(tmp_path) -> Path:
    path = tmp_path / 'street.jpg'
    rng = np.random.default_rng(0)
    mmcv.imwrite(
        rng.integers(0, 256, (128, 160, 3), dtype=np.uint8), str(path))
    return path


@pytest.fixture
def drawn_texts(monkeypatch):
    """The label texts mmdet's visualizer draws."""
    from mmdet.visualization import DetLocalVisualizer
    texts = []
    draw = DetLocalVisualizer.draw_texts

    def record(self, text, *args, **kwargs):
        texts.extend([text] if isinstance(text, str) else text)
        return draw(self, text, *args, **kwargs)

    monkeypatch.setattr(DetLocalVisualizer, 'draw_texts', record)
    return texts


def infer(config, checkpoint, image, out_dir, *options):
    """Run the tool in this process; its predictions file."""
    main = runpy.run_path(str(TOOL))['main']
    status = main([
        str(config),
        str(checkpoint),
        str(image), '--out-dir',
        str(out_dir), '--device', 'cpu', '--score-thr', '0', *options
    ])
    assert status == 0
    assert (out_dir / 'vis' / image.name).stat().st_size > 0
    return json.loads((out_dir / f'preds/{image.stem}.json').read_text())


def test_lvis_detector_draws_and_names_its_1203_classes(
        tmp_path, image, drawn_texts, capsys):
    """A checkpoint without names (as the converter wrote them before):
    LVIS v1's names from the config's dataset, labels over 80 included."""
    from mmdet.datasets import LVISV1Dataset
    names = LVISV1Dataset.METAINFO['classes']
    config = narrow_config(LVIS, tmp_path / 'lvis.py')
    checkpoint = save_untrained(config, tmp_path / 'lvis.pth')
    preds = infer(config, checkpoint, image, tmp_path / 'out')
    labels = preds['labels']
    assert labels and max(labels) >= 80
    assert preds['label_names'] == [names[i] for i in labels]
    for label, score in zip(labels, preds['scores']):
        assert f'{names[label]}: {round(score * 100, 1)}' in drawn_texts
    assert 'note:' not in capsys.readouterr().out


def v3det_detector(tmp_path, data_root: Path) -> tuple:
    config = narrow_config(V3DET, tmp_path / 'v3det.py', f'{data_root}/')
    return config, save_untrained(config, tmp_path / 'v3det.pth')


def test_v3det_detector_names_its_classes_from_its_label_file(
        tmp_path, image, drawn_texts):
    root = tmp_path / 'V3Det'
    names = [f'v3det_category_{i}' for i in range(13204)]
    (root / V3DET_LABELS).parent.mkdir(parents=True)
    (root / V3DET_LABELS).write_text('\n'.join(names) + '\n')
    config, checkpoint = v3det_detector(tmp_path, root)
    preds = infer(config, checkpoint, image, tmp_path / 'out')
    assert preds['label_names'] == [names[i] for i in preds['labels']]
    assert {f'{names[i]}: '
            for i in preds['labels']
            } == {text[:text.index(': ') + 2]
                  for text in drawn_texts}


def test_v3det_detector_without_its_label_file_numbers_the_classes(
        tmp_path, image, drawn_texts, capsys):
    config, checkpoint = v3det_detector(tmp_path, tmp_path / 'absent')
    preds = infer(config, checkpoint, image, tmp_path / 'out')
    assert preds['label_names'] == [f'class {i}' for i in preds['labels']]
    assert all(text.startswith('class ') for text in drawn_texts)
    notes = [
        line for line in capsys.readouterr().out.splitlines()
        if line.startswith('note:')
    ]
    assert notes == [
        'note: neither the checkpoint nor the config names the classes '
        f'({tmp_path}/absent/{V3DET_LABELS} (test_dataloader.dataset.'
        'label_file, one class name a line) does not exist): drawn and '
        'written as class 0 ... class 13203'
    ]


def test_checkpoint_names_come_first_from_safetensors_metadata(
        tmp_path, image, drawn_texts):
    """The converter's safetensors output keeps dataset_meta as JSON."""
    from mmact.checkpoint import save_safetensors
    config = narrow_config(LVIS, tmp_path / 'lvis.py')
    state = torch.load(
        save_untrained(config, tmp_path / 'lvis.pth'),
        weights_only=True)['state_dict']
    names = [f'renamed_{i}' for i in range(1203)]
    save_safetensors(
        state,
        tmp_path / 'lvis.safetensors',
        metadata=dict(dataset_meta=dict(classes=names)))
    preds = infer(config, tmp_path / 'lvis.safetensors', image,
                  tmp_path / 'out')
    assert preds['label_names'] == [names[i] for i in preds['labels']]
    assert all(text.startswith('renamed_') for text in drawn_texts)


def test_checkpoint_of_another_class_count_is_refused_before_inference(
        tmp_path, image):
    from mmdet.datasets import CocoDataset

    from mmact.utils.refusal import Refused
    config = narrow_config(LVIS, tmp_path / 'lvis.py')
    checkpoint = save_untrained(
        config,
        tmp_path / 'coco.pth',
        meta=dict(dataset_meta=dict(CocoDataset.METAINFO)))
    main = runpy.run_path(str(TOOL))['main']
    with pytest.raises(Refused) as refusal:
        main([
            str(config),
            str(checkpoint),
            str(image), '--out-dir',
            str(tmp_path / 'out'), '--device', 'cpu'
        ])
    assert str(refusal.value) == (
        "the checkpoint's meta['dataset_meta'] names 80 classes, but the "
        "config's model predicts 1203 (model.roi_head.bbox_head.num_classes "
        '= 1203): a checkpoint of another dataset or model?')
    assert not (tmp_path / 'out').exists()


@pytest.mark.slow
def test_toy_detector_as_a_process(tmp_path, image):
    """The command line: the drawing, the predictions and their names."""
    config = narrow_config(TOY, tmp_path / 'toy.py')
    checkpoint = save_untrained(config, tmp_path / 'untrained.pth')
    result = run_python([
        TOOL, config, checkpoint.name, image, '--out-dir', 'out', '--device',
        'cpu', '--score-thr', '0'
    ],
                        cwd=tmp_path,
                        timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / 'out/vis' / image.name).stat().st_size > 0
    preds = json.loads((tmp_path / f'out/preds/{image.stem}.json').read_text())
    assert len(preds['labels']) == len(preds['scores']) == len(
        preds['bboxes']) == len(preds['label_names']) > 0
    from mmact.utils.preflight import load_config
    names = load_config(str(config)).test_dataloader.dataset.metainfo.classes
    assert preds['label_names'] == [names[i] for i in preds['labels']]
    assert f'{image}: out/vis/{image.name}' in result.stdout
