"""tools/benchmarks/benchmark_long_tail.py: the data split and a short run."""
import json
import os
from pathlib import Path

import numpy as np
import pytest

from mmact.testing.tool_fork import run_python

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / 'tools/benchmarks/benchmark_long_tail.py'


def test_digits_split_is_long_tailed_balanced_and_disjoint(load_tool):
    bench = load_tool('tools/benchmarks/benchmark_long_tail.py')
    x_train, y_train, x_test, y_test = bench.digits_split(100, 100.0, 50)
    assert np.bincount(y_train).tolist() == [100, 59, 35, 21, 12, 7, 4, 2,
                                             1, 1]
    assert np.bincount(y_test).tolist() == [50] * 10
    assert x_train.shape[1:] == (1, 8, 8) and 0 <= x_train.min() \
        and x_train.max() <= 1
    # no test image is also a training image
    train_rows = {row.tobytes() for row in x_train}
    overlap = sum(row.tobytes() in train_rows for row in x_test)
    assert overlap <= 2  # digits has a few exact duplicate scans


@pytest.mark.slow
def test_every_variant_trains(tmp_path):
    out = tmp_path / 'results.json'
    result = run_python(
        [SCRIPT, '--seeds', '0', '--epochs', '5', '--out', out],
        timeout=600,
        env=dict(os.environ, PYTHONWARNINGS='ignore'))
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'mean +- std over seeds' in result.stdout
    report = json.loads(out.read_text())
    assert report['train_counts'] == [100, 59, 35, 21, 12, 7, 4, 2, 1, 1]
    assert set(report['results']) == {
        'relu-se', 'aglu-apase', 'fles', 'arelu', 'iglu'
    }
    for variant, runs in report['results'].items():
        (run, ) = runs
        assert 'diverged' not in run, variant
        for key in ('overall', 'many', 'medium', 'few'):
            assert 0.0 <= run[key] <= 1.0
        # 3 of 10 classes hold 80% of the training images: after 5 epochs
        # they are learnt well above chance (10%)
        assert run['many'] > 0.3, (variant, run)
