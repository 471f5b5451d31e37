"""tools/train.py --amp without a GPU: the toy LVIS APA* Mask R-CNN
(configs/toy/apa_mrcnn_r50_toy.py, narrowed to a few channels) trains a
step under CPU bfloat16 autocast, its RPN's boxes reaching mmcv's CPU nms
and its RoIs mmcv's RoIAlign in float32."""
import math
import re
from pathlib import Path

import pytest

from mmact.testing import generate_toy_data, narrow_fpn_detector
from mmact.testing.tool_fork import run_python

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / 'configs/toy/apa_mrcnn_r50_toy.py'


@pytest.mark.slow
def test_amp_on_the_cpu_trains_the_toy_lvis_detector(tmp_path):
    from mmact.utils.preflight import load_config
    generate_toy_data('lvis', str(tmp_path / 'data/toy_lvis'))
    cfg = load_config(str(TOY))
    narrow_fpn_detector(cfg.model)
    cfg.dump(str(tmp_path / 'toy_narrow.py'))
    result = run_python([
        REPO / 'tools/train.py', 'toy_narrow.py', '--amp', '--work-dir',
        'work', '--cfg-options', 'train_cfg.max_epochs=1',
        'train_dataloader.dataset.dataset.indices=2'
    ],
                        cwd=tmp_path,
                        timeout=600)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-3000:]
    assert '--amp without a GPU: bfloat16 autocast on the CPU' in log
    step = re.search(r'Epoch\(train\) \[1\]\[1/1\].* loss: (\S+)', log)
    assert step is not None and math.isfinite(float(step[1])), log[-3000:]
    assert (tmp_path / 'work/epoch_1.pth').is_file()
