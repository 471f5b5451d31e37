"""tools/analysis/swap_fidelity.py as a user runs it."""
import json
import os
from pathlib import Path

import pytest

from mmact.testing.tool_fork import run_python

REPO = Path(__file__).resolve().parents[2]
SE_R50 = REPO / 'configs/imagenet/se-relu-r50_8xb32-coslr-100e_in1k.py'


def _run(tmp_path, *args):
    result = run_python(
        [
            REPO / 'tools/analysis/swap_fidelity.py',
            str(SE_R50), '--inputs', 'noise', '--shape', '3', '64', '64',
            '--num-samples', '4', '--calibrate-bn', '--cfg-options',
            # a fresh model's zero-initialised residual branches would hide
            # every activation after them
            'model.backbone.zero_init_residual=False', '--out-dir',
            str(tmp_path), *args
        ],
        timeout=900,
        env=dict(os.environ, PYTHONWARNINGS='ignore'))
    assert result.returncode == 0, result.stderr[-3000:]
    with open(tmp_path / 'swap_fidelity.json') as f:
        return result.stdout, json.load(f)


@pytest.mark.slow
def test_se_gates_to_apa_keep_the_classifier(tmp_path):
    out, report = _run(tmp_path, '--act', 'APA')
    matched = report['output']['match@0.01']
    assert matched['rel_l2'] < 1e-4  # float32 rounding
    assert matched['top1_agreement'] == 1.0
    assert report['output']['random']['rel_l2'] > 100 * matched['rel_l2']
    # one row per SE gate (16 blocks), with its local error
    assert len(report['layers']) == 16
    assert all(v['match@0.01'] < 1e-6 for v in report['layers'].values())
    assert 'top1_agreement' in out and 'backbone.layer4.2.attn.gate' in out


@pytest.mark.slow
def test_relu_to_aglu_variants(tmp_path):
    out, report = _run(tmp_path, '--tolerance', '0.02', '--kappa', '16',
                       '--calibrate')
    output = report['output']
    assert set(output) == {
        'random', 'match@0.02', 'calibrated@0.02', 'kappa=16'
    }
    assert output['match@0.02']['rel_l2'] < 0.7 * output['random']['rel_l2']
    assert output['calibrated@0.02']['rel_l2'] < 0.7 * output['random'][
        'rel_l2']
    # the stem, three per block and the one inside each SE layer
    assert 'backbone.relu' in report['layers']
    assert len(report['layers']) == 1 + 16 * 4
    for errors in report['layers'].values():
        assert errors['match@0.02'] == pytest.approx(0.02, rel=0.6)
    assert report['params']['kappa=16']['backbone.relu']['kappa'] == 16.0
    assert 'calibrated@0.02' in out
