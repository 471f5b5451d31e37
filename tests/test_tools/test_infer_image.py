"""tools/misc/infer_image.py: the toy LVIS APA* Mask R-CNN with untrained
weights on a generated image writes the drawing and the predictions."""
import json
import subprocess
import sys
from pathlib import Path

import torch

from mmact.testing import generate_toy_data

REPO = Path(__file__).resolve().parents[2]
TOY = 'configs/toy/apa_mrcnn_r50_toy.py'


def save_untrained(config: Path, path: Path) -> None:
    """A checkpoint of the config's model at its initial weights."""
    from mmengine.registry import MODELS, DefaultScope

    from mmact.utils.preflight import load_config
    cfg = load_config(str(config))
    with DefaultScope.overwrite_default_scope('mmdet'):
        model = MODELS.build(cfg.model)
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, path)


def test_infer_image_writes_the_drawing(tmp_path):
    data = generate_toy_data('lvis', str(tmp_path / 'lvis'))
    image = sorted((Path(data) / 'val2017').iterdir())[0]
    save_untrained(REPO / TOY, tmp_path / 'untrained.pth')
    result = subprocess.run([
        sys.executable, REPO / 'tools/misc/infer_image.py', REPO / TOY,
        'untrained.pth', image, '--out-dir', 'out', '--device', 'cpu',
        '--score-thr', '0'
    ],
                            cwd=tmp_path,
                            capture_output=True,
                            text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    drawing = tmp_path / 'out/vis' / image.name
    assert drawing.is_file() and drawing.stat().st_size > 0
    preds = json.loads((tmp_path / f'out/preds/{image.stem}.json').read_text())
    assert len(preds['labels']) == len(preds['scores']) == len(
        preds['bboxes']) > 0
    assert f'{image}: out/vis/{image.name}' in result.stdout
