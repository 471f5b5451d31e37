"""tools/train.py and tools/test.py on a seconds-long classifier (ActResNet
with AGLU + APA*): resume, checkpoint inputs, AMP, TTA, typos."""
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

from mmact.testing.tool_fork import run_python

REPO = Path(__file__).resolve().parents[2]
CONFIGS = Path(__file__).parent / 'configs'
TINY = CONFIGS / 'tiny-cls_aglu-apa.py'
TINY_FLES = CONFIGS / 'tiny-cls_fles-aglu-apa.py'
TINY_ITERS = CONFIGS / 'tiny-cls_aglu-apa_iters.py'
TOY_COCO = REPO / 'configs/toy/mask-rcnn_r50_fpn_toy-coco.py'
pytestmark = pytest.mark.slow


def run(args, cwd, check=True):
    result = run_python(args,
                        cwd=cwd,
                        timeout=900,
                        env=dict(os.environ, PYTHONWARNINGS='ignore'))
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def train(cwd, work_dir, *options, config=TINY, check=True):
    return run(
        [REPO / 'tools/train.py', config, '--work-dir', work_dir, *options],
        cwd, check)


def evaluate(cwd, checkpoint, *options, config=TINY, check=True):
    return run([
        REPO / 'tools/test.py', config, checkpoint, '--work-dir', cwd / 'test',
        *options
    ], cwd, check)


def load(path) -> dict:
    return torch.load(path, map_location='cpu', weights_only=False)


def assert_identical(a, b, where='checkpoint'):
    """Every tensor and value of two (nested) checkpoint parts is equal."""
    assert type(a) is type(b), where
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_identical(a[key], b[key], f'{where}.{key}')
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_identical(x, y, f'{where}[{i}]')
    else:
        assert a == b, where


@pytest.fixture(scope='module')
def cwd(tmp_path_factory, with_tiny_cls_data):
    return with_tiny_cls_data(tmp_path_factory.mktemp('cls'))


@pytest.fixture(scope='module')
def first_epoch(cwd):
    """The first of two epochs, as a run stopped after epoch 1 leaves it."""
    work_dir = cwd / 'epoch1'
    train(cwd, work_dir, '--cfg-options', 'train_cfg.max_epochs=1')
    return work_dir / 'epoch_1.pth'


@pytest.fixture(scope='module')
def straight(cwd):
    """Two epochs without interruption."""
    work_dir = cwd / 'straight'
    train(cwd, work_dir)
    return work_dir / 'epoch_2.pth'


def resume(cwd, first_epoch, name, checkpoint=None, *options):
    work_dir = cwd / name
    work_dir.mkdir()
    shutil.copy(first_epoch, work_dir / 'epoch_1.pth')
    (work_dir / 'last_checkpoint').write_text(str(work_dir / 'epoch_1.pth'))
    train(cwd, work_dir, '--resume', *([checkpoint] if checkpoint else []),
          *options)
    return work_dir / 'epoch_2.pth'


def test_resume_is_exact(cwd, first_epoch, straight):
    resumed = load(resume(cwd, first_epoch, 'resumed'))
    expected = load(straight)
    assert len(expected['state_dict']) > 150
    assert_identical(resumed['state_dict'], expected['state_dict'])
    assert_identical(resumed['optimizer'], expected['optimizer'])
    assert_identical(resumed['param_schedulers'], expected['param_schedulers'])
    assert_identical(resumed['random_state'], expected['random_state'])


def test_resume_is_exact_by_iterations(cwd):
    """IterBasedTrainLoop re-draws the trained batches to skip them on
    resume; that must not use up the restored random state."""
    train(cwd, cwd / 'iters', config=TINY_ITERS)
    train(
        cwd,
        cwd / 'iters_resumed',
        '--cfg-options',
        'train_cfg.max_iters=3',
        config=TINY_ITERS)
    train(cwd, cwd / 'iters_resumed', '--resume', config=TINY_ITERS)
    expected = load(cwd / 'iters/iter_6.pth')
    resumed = load(cwd / 'iters_resumed/iter_6.pth')
    for part in ('state_dict', 'optimizer', 'param_schedulers',
                 'random_state'):
        assert_identical(resumed[part], expected[part], part)


def test_resume_without_the_hook_is_not_exact(cwd, first_epoch, straight):
    """What the hook fixes: mmengine re-seeds on resume."""
    resumed = load(
        resume(cwd, first_epoch, 'plain', None, '--no-exact-resume'))
    expected = load(straight)
    differ = [
        key for key, value in expected['state_dict'].items()
        if not torch.equal(value, resumed['state_dict'][key])
    ]
    assert len(differ) > len(expected['state_dict']) // 2


def test_legacy_checkpoint_tests_and_resumes(cwd, first_epoch, straight):
    """A checkpoint in torch's pre-1.6 format (the model zoo's before
    2020) loads for tools/test.py and --resume."""
    legacy = cwd / 'legacy_epoch_1.pth'
    torch.save(load(first_epoch), legacy, _use_new_zipfile_serialization=False)
    assert not legacy.read_bytes().startswith(b'PK')
    zip_log = evaluate(cwd, first_epoch).stdout
    legacy_log = evaluate(cwd, legacy).stdout
    accuracy = re.findall(r'accuracy/top1: ([\d.]+)', legacy_log)
    assert accuracy and accuracy == re.findall(r'accuracy/top1: ([\d.]+)',
                                               zip_log)
    resumed = load(resume(cwd, first_epoch, 'legacy_resumed', str(legacy)))
    assert_identical(resumed['state_dict'], load(straight)['state_dict'])


def test_url_checkpoint_is_left_to_mmengine(cwd):
    """No network here: the pre-start check passes the URL on and the
    failure is mmengine's download."""
    url = 'http://127.0.0.1:9/mask_rcnn_r50_fpn_1x_coco.pth'
    for result in (evaluate(cwd, url, check=False),
                   train(
                       cwd,
                       cwd / 'url',
                       '--cfg-options',
                       f'load_from={url}',
                       check=False)):
        assert result.returncode != 0
        assert 'does not exist' not in result.stderr
        assert 'urlopen' in result.stderr or 'URLError' in result.stderr


def test_mismatched_checkpoint_is_refused(cwd, first_epoch):
    checkpoint = load(first_epoch)
    state = checkpoint['state_dict']
    total = len(state)
    # Plain-ResNet weights for an AGLU model: no kappa / lambda.
    dropped = [k for k in state if k.endswith(('kappa_param', 'lambda_param'))]
    for key in dropped:
        del state[key]
    # ... and a head for another class count.
    state['head.fc.weight'] = torch.zeros(10, 64)
    state['neck.extra'] = torch.zeros(1)
    partial = cwd / 'partial.pth'
    torch.save(checkpoint, partial)

    result = evaluate(cwd, partial, check=False)
    assert result.returncode != 0
    assert f'{len(dropped)} of {total} model keys are missing' in \
        result.stderr
    assert 'backbone.relu.kappa_param' in result.stderr
    assert '1 checkpoint keys are not in the model: neck.extra' in \
        result.stderr
    assert 'head.fc.weight: checkpoint (10, 64) vs model (4, 64)' in \
        result.stderr
    assert '--allow-partial' in result.stderr
    assert result.stderr.splitlines()[-1].startswith(f'mmact: {partial}: ')
    assert 'Traceback' not in result.stderr
    assert 'accuracy/top1' not in result.stdout

    allowed = evaluate(cwd, partial, '--allow-partial')
    assert 'accuracy/top1' in allowed.stdout

    # Fine-tuning from part of a model is legitimate: train.py warns.
    finetune = train(cwd, cwd / 'finetune', '--cfg-options',
                     f'load_from={partial}', 'train_cfg.max_epochs=1',
                     'train_dataloader.batch_size=24')
    log = finetune.stdout + finetune.stderr
    assert 'WARNING' in log and 'does not fit the model' in log
    assert f'{len(dropped)} of {total} model keys are missing' \
        in log


def test_amp_trains_on_any_machine(cwd):
    """AGLU + APA* + FleS, two iterations under --amp."""
    result = train(
        cwd,
        cwd / 'amp',
        '--amp',
        '--cfg-options',
        'train_cfg.max_epochs=1',
        'train_dataloader.batch_size=12',
        'val_cfg=None',
        'val_dataloader=None',
        'val_evaluator=None',
        config=TINY_FLES)
    log = result.stdout + result.stderr
    wrapper = 'AmpOptimWrapper' if torch.cuda.is_available() else \
        'CPUAmpOptimWrapper'
    assert f"type='{wrapper}'" in log
    losses = [float(v) for v in re.findall(r' loss: (\S+)', log)]
    assert len(losses) == 2 and all(map(torch.isfinite,
                                        torch.tensor(losses))), losses


def test_tta(cwd, first_epoch):
    result = evaluate(cwd, first_epoch, '--tta')
    assert 'accuracy/top1' in result.stdout
    assert 'AverageClsScoreTTA' in result.stdout + result.stderr


def test_activation_typo_names_the_closest(cwd):
    result = train(
        cwd,
        cwd / 'typo',
        '--cfg-options',
        'model.backbone.act_cfg.type=AGLUU',
        check=False)
    assert result.returncode != 0
    assert "'AGLUU'" in result.stderr and 'Did you mean: AGLU' in \
        result.stderr


def test_show_and_wait_time_as_mmdet(load_tool):
    tools = load_tool('tools/test.py')
    det = Config.fromfile(str(TOY_COCO))
    tools.enable_visualization(det, 'shown', show=True, wait_time=0.5)
    expected = dict(
        type='DetVisualizationHook',
        draw=True,
        test_out_dir='shown',
        show=True,
        wait_time=0.5)
    hook = det.default_hooks.visualization
    assert {key: hook.get(key) for key in expected} == expected
    cls = Config.fromfile(str(TINY))
    tools.enable_visualization(cls, None, show=True, wait_time=3)
    hook = cls.default_hooks.visualization
    assert hook.enable and hook.show and hook.wait_time == 3
    with pytest.raises(ValueError, match='default_hooks.visualization'):
        tools.enable_visualization(Config(dict(default_hooks={})), show=True)


def test_detector_tta_config_as_mmdet(load_tool):
    tools = load_tool('tools/test.py')
    cfg = Config.fromfile(str(TOY_COCO))
    detector = cfg.model
    with pytest.warns(UserWarning, match='tta_model'):
        tools.enable_tta(cfg)
    assert cfg.model.type == 'DetTTAModel'
    assert cfg.model.module == detector
    flip = cfg.test_dataloader.dataset.pipeline[-1]
    assert flip.type == 'TestTimeAug'
    assert [t.prob for t in flip.transforms[0]] == [1., 0.]
    assert 'flip_direction' in flip.transforms[1][0].meta_keys


def test_killed_while_saving_resumes_exactly(cwd, straight):
    """The process dies half-way through writing epoch_2.pth with
    max_keep_ckpts=1: epoch_1.pth and last_checkpoint are intact (mmengine's
    stock hook would have deleted epoch_1.pth first), and --resume finishes
    the run with the same weights as an uninterrupted one."""
    work_dir = cwd / 'killed'
    keep_one = ('--cfg-options', 'default_hooks.checkpoint.max_keep_ckpts=1')
    killed = run([
        REPO / 'tests/test_tools/dying_save.py', REPO / 'tools/train.py', TINY,
        '--work-dir', work_dir, *keep_one
    ],
                 cwd,
                 check=False)
    assert killed.returncode == 3, killed.stderr[-3000:]
    assert (work_dir / 'last_checkpoint').read_text() == str(work_dir /
                                                             'epoch_1.pth')
    assert load(work_dir / 'epoch_1.pth')['meta']['epoch'] == 1
    assert not (work_dir / 'epoch_2.pth').exists()
    train(cwd, work_dir, '--resume', *keep_one)
    assert [p.name for p in work_dir.glob('*.pth')] == ['epoch_2.pth']
    assert not list(work_dir.glob('.*partial'))  # the dead write's leftover
    assert_identical(
        load(work_dir / 'epoch_2.pth')['state_dict'],
        load(straight)['state_dict'])


def test_second_run_in_a_work_dir_is_refused(cwd):
    """Two train.py in one work dir: the second exits at once naming the
    first (which runs long enough to still hold it); after the first is
    killed, a new run there without --resume is refused (it would overwrite
    the checkpoints) and --force starts over, taking the dead run's lock."""
    work_dir = cwd / 'shared'
    first = subprocess.Popen([
        sys.executable, REPO / 'tools/train.py', TINY, '--work-dir', work_dir,
        '--cfg-options', 'train_cfg.max_epochs=1000'
    ],
                             cwd=cwd,
                             stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL,
                             env=dict(os.environ, PYTHONWARNINGS='ignore'))
    try:
        deadline = time.monotonic() + 300
        while not list(work_dir.glob('epoch_*.pth')):
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        second = train(cwd, work_dir, check=False)
        assert second.returncode != 0
        assert 'is in use by another training run (process ' \
            f'{first.pid}' in second.stderr
    finally:
        first.kill()
        first.wait()
    third = train(cwd, work_dir, check=False)
    assert third.returncode != 0
    assert 'holds checkpoints of an earlier run (epoch_' in third.stderr
    assert '--force' in third.stderr
    train(cwd, work_dir, '--force', '--cfg-options', 'train_cfg.max_epochs=1')
    assert not (work_dir / '.mmact-train.lock').exists()


def test_divergence_stops_the_run_before_a_nan_checkpoint(cwd):
    work_dir = cwd / 'diverged'
    result = train(
        cwd,
        work_dir,
        '--cfg-options',
        'optim_wrapper.optimizer.lr=1e6',
        check=False)
    assert result.returncode != 0
    assert re.search(
        r'DivergenceError: training diverged at iteration \d+ \(epoch \d\): '
        r'non-finite loss', result.stderr), result.stderr[-3000:]
    for path in work_dir.glob('*.pth'):
        state = load(path)['state_dict']
        assert all(torch.isfinite(v).all() for v in state.values()), path


def test_labels_beyond_the_head_stop_before_the_model_is_built(
        cwd, first_epoch):
    """The 4-class toy set under a 3-class head: named before the Runner
    (which makes the timestamped log folder, then the model) starts."""
    work_dir = cwd / 'three_classes'
    result = train(
        cwd,
        work_dir,
        '--cfg-options',
        'model.head.num_classes=3',
        'data_preprocessor.num_classes=3',
        check=False)
    assert result.returncode != 0
    assert (
        'mmact: train_dataloader.dataset (data/toy_cls/meta/'
        'train.txt) has labels 0-3') in result.stderr, result.stderr[-3000:]
    assert 'model.head.num_classes = 3' in result.stderr
    assert not work_dir.exists() or not any(work_dir.glob('*/*.log'))
    evaluated = evaluate(
        cwd,
        first_epoch,
        '--cfg-options',
        'model.head.num_classes=3',
        check=False)
    assert evaluated.returncode != 0
    assert ('mmact: test_dataloader.dataset (data/toy_cls/meta/'
            'val.txt) has labels 0-3') in evaluated.stderr
