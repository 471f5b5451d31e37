"""Every tool path a checkpoint reaches refuses one whose unpickling would
run code: tools/test.py, tools/train.py (load_from, --resume, init_cfg
Pretrained from a file, http://, torchvision:// and open-mmlab://), the
converter and the analysis tools, on a seconds-long classifier."""
import os
import shutil
from pathlib import Path

import pytest

from mmact.testing import serve_files
from mmact.testing.tool_fork import run_python

REPO = Path(__file__).resolve().parents[2]
TINY = Path(__file__).parent / 'configs' / 'tiny-cls_aglu-apa.py'
pytestmark = pytest.mark.slow


@pytest.fixture(scope='module')
def cwd(tmp_path_factory, with_tiny_cls_data):
    return with_tiny_cls_data(tmp_path_factory.mktemp('safe_loading'))


def run(cwd, *args, code=None):
    """A tool (or ``python -c code`` with the tool's arguments)."""
    command = ['-c', code, *args] if code else list(args)
    return run_python(command,
                      cwd=cwd,
                      timeout=600,
                      env=dict(os.environ,
                               PYTHONWARNINGS='ignore',
                               TORCH_HOME=str(cwd / 'torch_home')))


def assert_refused(result, marker, where):
    assert result.returncode != 0, result.stdout[-2000:]
    assert not marker.exists()
    expected = f'mmact: checkpoint {where} needs posix.system, which is ' \
        "not on mmact's allow-list"
    assert expected in result.stderr, result.stderr[-3000:]
    assert '--trust-checkpoint' in result.stderr


def train(cwd, tmp_path, *options):
    return run(cwd, REPO / 'tools/train.py', TINY, '--work-dir',
               tmp_path / 'work', '--cfg-options', 'train_cfg.max_epochs=1',
               *options)


def test_test_tool(cwd, crafted_checkpoint):
    path, marker = crafted_checkpoint()
    result = run(cwd, REPO / 'tools/test.py', TINY, path, '--work-dir',
                 cwd / 'test')
    assert_refused(result, marker, repr(str(path)))


def test_train_load_from(cwd, tmp_path, crafted_checkpoint):
    path, marker = crafted_checkpoint()
    assert_refused(
        train(cwd, tmp_path, f'load_from={path}'), marker, repr(str(path)))


def test_train_resume_from_the_work_dir(cwd, tmp_path, crafted_checkpoint):
    path, marker = crafted_checkpoint()
    work = tmp_path / 'work'
    work.mkdir()
    shutil.copy(path, work / 'epoch_1.pth')
    (work / 'last_checkpoint').write_text(str(work / 'epoch_1.pth'))
    result = train(cwd, tmp_path, '--resume')
    assert_refused(result, marker, repr(str(work / 'epoch_1.pth')))


def test_train_init_cfg_pretrained_file(cwd, tmp_path, crafted_checkpoint):
    path, marker = crafted_checkpoint()
    result = train(cwd, tmp_path, 'model.backbone.init_cfg.type=Pretrained',
                   f'model.backbone.init_cfg.checkpoint={path}')
    assert_refused(result, marker, repr(str(path)))


def test_train_load_from_http(cwd, tmp_path, crafted_checkpoint):
    path, marker = crafted_checkpoint()
    with serve_files(path.parent) as url:
        result = train(cwd, tmp_path, f'load_from={url}/{path.name}')
    cached = cwd / 'torch_home' / 'hub' / 'checkpoints' / path.name
    assert_refused(result, marker, f"'{url}/{path.name}' (read from "
                   f"'{cached}')")


# tools/train.py with mmengine's model-zoo tables pointed at the server
_ZOO = ('import runpy, sys\n'
        'import mmengine.runner.checkpoint as c\n'
        'url = sys.argv.pop(1)\n'
        'c.get_torchvision_models = lambda: {"crafted": url}\n'
        'c.get_external_models = lambda: {"crafted": url}\n'
        'sys.argv[0] = sys.argv[1]\n'
        'runpy.run_path(sys.argv.pop(1), run_name="__main__")\n')


@pytest.mark.parametrize('scheme', ['torchvision', 'open-mmlab'])
def test_train_init_cfg_model_zoo(cwd, tmp_path, crafted_checkpoint, scheme):
    path, marker = crafted_checkpoint()
    with serve_files(path.parent) as url:
        result = run(
            cwd,
            f'{url}/{path.name}',
            REPO / 'tools/train.py',
            TINY,
            '--work-dir',
            tmp_path / 'work',
            '--cfg-options',
            'model.backbone.init_cfg.type=Pretrained',
            f'model.backbone.init_cfg.checkpoint={scheme}://crafted',
            code=_ZOO)
    cached = cwd / 'torch_home' / 'hub' / 'checkpoints' / path.name
    assert_refused(result, marker,
                   f"'{scheme}://crafted' (read from '{cached}')")


def test_converter(cwd, tmp_path, crafted_checkpoint):
    path, marker = crafted_checkpoint()
    out = tmp_path / 'converted.pth'
    result = run(cwd, REPO / 'tools/model_converters/apa_to_mmact.py', path,
                 out)
    assert_refused(result, marker, repr(str(path)))
    assert not out.exists()


def test_analysis_tool(cwd, tmp_path, crafted_checkpoint):
    path, marker = crafted_checkpoint()
    result = run(cwd, REPO / 'tools/analysis/plot_activations.py', TINY, path,
                 '--out-dir', tmp_path / 'plots')
    assert_refused(result, marker, repr(str(path)))


def test_trust_flag_is_the_opt_out(cwd, crafted_checkpoint):
    """The payload is live: trusted, the tool unpickles it."""
    path, marker = crafted_checkpoint()
    run(cwd, REPO / 'tools/test.py', TINY, path, '--work-dir', cwd / 'test',
        '--trust-checkpoint', path)
    assert marker.exists()


def test_safetensors_weights_test_and_refuse_a_resume(cwd, tmp_path):
    """tools/test.py reads safetensors weights; --resume refuses them (a
    resume needs the state a training run wrote)."""
    from mmengine.config import Config
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS

    from mmact.checkpoint import save_safetensors
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(Config.fromfile(TINY).model)
    path = tmp_path / 'weights.safetensors'
    save_safetensors(model.state_dict(), path)
    result = run(cwd, REPO / 'tools/test.py', TINY, path, '--work-dir',
                 tmp_path / 'test')
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'accuracy/top1' in result.stdout + result.stderr
    result = train(cwd, tmp_path, '--resume', path)
    assert result.returncode != 0
    assert 'holds weights only (safetensors)' in result.stderr


def test_inference_tool(cwd, tmp_path, crafted_checkpoint):
    path, marker = crafted_checkpoint()
    image = tmp_path / 'image.jpg'
    import cv2
    import numpy as np
    cv2.imwrite(str(image), np.zeros((32, 32, 3), np.uint8))
    result = run(cwd, REPO / 'tools/misc/infer_image.py',
                 REPO / 'configs/toy/apa_mrcnn_r50_toy.py', path, image,
                 '--out-dir', tmp_path / 'out')
    assert_refused(result, marker, repr(str(path)))
