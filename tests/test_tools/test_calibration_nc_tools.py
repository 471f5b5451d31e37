"""tools/analysis/{calibration,neural_collapse}.py as a user runs them, on a
generated long-tailed set and the APA* ImageNet-LT config adapted to it."""
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.config import Config
from scipy import linalg

from mmact.testing import adapt_config
from mmact.testing.tool_fork import run_python

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
APASE_LT = REPO / ('configs/imagenet/'
                   'apase-aglu-r50_cos-cls_8xb32-coslr-200e_in1k-lt.py')
PNG_MAGIC = b'\x89PNG\r\n\x1a\n'


def run_tool(name, *args, check=True):
    result = run_python([REPO / 'tools/analysis' / name, *args],
                        timeout=900,
                        env=dict(os.environ, PYTHONWARNINGS='ignore'))
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope='module')
def lt_config(tmp_path_factory, toy_data_root):
    """5 classes with 8, 5, 3, 2, 1 training and 2 val images each."""
    base = tmp_path_factory.mktemp('calibration_nc')
    root = toy_data_root(
        'cls',
        num_classes=5,
        imbalance=8,
        max_per_class=8,
        num_val_per_class=2,
        image_size=(64, 64))
    cfg = adapt_config(
        Config.fromfile(str(APASE_LT)),
        root,
        5,
        work_dir=str(base / 'work'),
        batch_size=2)
    path = base / 'apase_lt.py'
    cfg.dump(str(path))
    return path


def test_calibration_tool(lt_config, tmp_path):
    result = run_tool('calibration.py', lt_config, '--out-dir', tmp_path,
                      '--num-bins', '5')
    png = (tmp_path / 'reliability.png').read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 2000
    report = json.loads((tmp_path / 'calibration.json').read_text())
    assert report['n'] == 10  # the whole val split: 5 classes x 2
    assert sum(report['counts']) == 10 and len(report['edges']) == 6
    # ECE from the reported bars
    ece = sum(n * abs(a - c) for n, a, c in zip(
        report['counts'], report['accuracy'], report['confidence']) if n) / 10
    assert report['ece'] == pytest.approx(ece, abs=1e-12)
    # 5 classes: the top-1 probability is at least 1/5
    assert 0.2 <= report['confidence_mean'] <= 1.0
    assert all(a is None for n, a in zip(report['counts'], report['accuracy'])
               if n == 0)
    assert 'ECE' in result.stdout and 'confident' in result.stdout


def test_neural_collapse_tool_matches_eq_12(lt_config, tmp_path):
    """The tool's NC1 equals Eq. 12 on features extracted here from the
    same checkpoint."""
    from mmact.analysis import (build_split_dataloader, load_model,
                                sample_batches)
    cfg = Config.fromfile(str(lt_config))
    model = load_model(cfg)
    with torch.no_grad():  # mmpretrain zero-initialises the residual BNs
        for name, param in model.named_parameters():
            if name.endswith('bn3.weight'):
                param.uniform_(0.5, 1.5)
    torch.save(
        dict(state_dict=model.state_dict(), meta={}), tmp_path / 'ckpt.pth')
    run_tool('neural_collapse.py', lt_config, tmp_path / 'ckpt.pth',
             '--out-dir', tmp_path)
    report = json.loads((tmp_path / 'neural_collapse.json').read_text())
    assert (report['num_samples'], report['num_classes'],
            report['feature_dim'], report['rank_between']) == (10, 5, 2048, 4)

    feats, labels = [], []
    for data, label in sample_batches(model,
                                      build_split_dataloader(cfg, 'val'), 10):
        with torch.no_grad():  # backbone, then global average pooling
            x = model.neck(model.backbone(data['inputs']))[-1]
        feats.append(x.double().numpy())
        labels.append(np.concatenate(label))
    feats, labels = np.concatenate(feats), np.concatenate(labels)
    f_g = feats.mean(0)
    s_w = np.zeros((2048, 2048))
    s_b = np.zeros((2048, 2048))
    for k in range(5):
        f_k = feats[labels == k]
        s_w += (f_k - f_k.mean(0)).T @ (f_k - f_k.mean(0)) / 10
        s_b += np.outer(f_k.mean(0) - f_g, f_k.mean(0) - f_g) / 5
    assert report['trace_within'] == pytest.approx(np.trace(s_w), rel=1e-6)
    expected = np.trace(s_w @ linalg.pinv(s_b)) / 5
    assert report['nc1'] == pytest.approx(expected, rel=1e-5)


def test_tools_refuse_detectors(tmp_path):
    toy = REPO / 'configs/toy/mask-rcnn_r50_fpn_toy-coco.py'
    for tool in ('calibration.py', 'neural_collapse.py'):
        result = run_tool(tool, toy, '--out-dir', tmp_path, check=False)
        assert result.returncode != 0
        assert 'needs an mmpretrain ImageClassifier' in result.stderr
        assert 'MaskRCNN' in result.stderr
