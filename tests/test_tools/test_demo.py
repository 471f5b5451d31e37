"""`make demo`: the toy LVIS configs, the Makefile, README and summary tool."""
import inspect
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, Tuple

import pytest
from mmengine.config import Config

from mmact.testing import free_port, narrowing_options
from mmact.testing.tool_fork import run_python

REPO = Path(__file__).resolve().parents[2]
LVIS = REPO / 'configs' / 'lvis'
TOY = REPO / 'configs' / 'toy'
# toy config -> the real config it inherits
DEMO_CONFIGS = {
    'apa_mrcnn_r50_toy.py':
    'apa_mrcnn_r50.py',
    'se-relu_mrcnn_r50_toy.py':
    'mask-rcnn_se-relu-r50_fpn_gol-normmask_8xb2-rfs-ms-2x_lvis-v1.py',
}
# Model keys the generated data and two CPU cores may change: the class
# count, GOL's rare threshold (a share of the training images), the ImageNet
# checkpoint (training from scratch: BN statistics from the batches, residual
# branches not zero-initialised) and the numbers of anchors / proposals /
# RoIs per image.
DATA_FORCED = {
    'backbone.init_cfg', 'backbone.frozen_stages', 'backbone.norm_eval',
    'backbone.zero_init_residual', 'roi_head.bbox_head.num_classes',
    'roi_head.mask_head.num_classes',
    'roi_head.bbox_head.loss_cls.rare_threshold', 'train_cfg.rpn.sampler.num',
    'train_cfg.rpn_proposal.nms_pre', 'train_cfg.rpn_proposal.max_per_img',
    'train_cfg.rcnn.sampler.num', 'test_cfg.rpn.nms_pre',
    'test_cfg.rpn.max_per_img'
}


def _diff(a: Any, b: Any, path: str = '') -> Iterator[str]:
    """Dotted paths where two config trees differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            yield from _diff(
                a.get(key), b.get(key), f'{path}.{key}' if path else key)
    elif a != b:
        yield path


def _leaf(dataset: dict) -> dict:
    while 'dataset' in dataset:
        dataset = dataset['dataset']
    return dataset


def _types(pipeline) -> list:
    return [t['type'] for t in pipeline]


@pytest.fixture(scope='module', params=sorted(DEMO_CONFIGS))
def config_pair(request) -> Tuple[Config, Config]:
    toy = Config.fromfile(str(TOY / request.param))
    real = Config.fromfile(str(LVIS / DEMO_CONFIGS[request.param]))
    return toy, real


def test_toy_model_is_the_real_model(config_pair):
    toy, real = config_pair
    changed = set(_diff(toy.model.to_dict(), real.model.to_dict()))
    assert changed <= DATA_FORCED, changed - DATA_FORCED
    assert toy.model.backbone.init_cfg == []  # PyTorch's default init
    assert real.model.backbone.init_cfg['type'] == 'Pretrained'


def test_toy_training_is_the_real_training(config_pair):
    toy, real = config_pair
    # GOL frequencies, zero decay rules, optimizer type, evaluator: inherited
    assert toy.custom_hooks == real.custom_hooks
    optim_wrapper = toy.optim_wrapper.to_dict()
    # from scratch the only addition is gradient clipping
    assert optim_wrapper.pop('clip_grad') == dict(max_norm=10, norm_type=2)
    assert optim_wrapper == real.optim_wrapper.to_dict()
    for split in ('train', 'test'):
        toy_loader = toy[f'{split}_dataloader']
        real_loader = real[f'{split}_dataloader']
        # RFS wrapper, dataset type, the same transforms (other sizes)
        assert toy_loader.dataset.type == real_loader.dataset.type
        assert _leaf(toy_loader.dataset).type == _leaf(
            real_loader.dataset).type
        assert _types(_leaf(toy_loader.dataset).pipeline) == _types(
            _leaf(real_loader.dataset).pipeline)
        assert toy_loader.batch_size == real_loader.batch_size
    assert toy.test_evaluator.type == real.test_evaluator.type == 'LVISMetric'
    # validation is configured (tools/train.py --cfg-options
    # train_cfg.val_begin=1 turns it on) but off: the demo tests once
    assert toy.val_evaluator == toy.test_evaluator
    assert toy.train_cfg.val_begin > toy.train_cfg.max_epochs
    assert toy.test_evaluator.metric == real.test_evaluator.metric
    # the real step decay at the same fractions of the shorter schedule
    scale = toy.train_cfg.max_epochs / real.train_cfg.max_epochs
    assert toy.param_scheduler[1].milestones == [
        int(m * scale) for m in real.param_scheduler[1].milestones
    ]
    assert toy.param_scheduler[1].type == real.param_scheduler[1].type


def test_toy_config_matches_generated_data(config_pair):
    from mmact.models.losses import GOLLoss
    from mmact.testing import FORMATS, lvis_frequency_thresholds, toy_classes
    toy, real = config_pair
    defaults = FORMATS['lvis'].defaults
    classes = toy.train_dataloader.dataset.dataset.metainfo.classes
    assert tuple(classes) == toy_classes('lvis', defaults['num_classes'])
    assert toy.model.roi_head.bbox_head.num_classes == len(classes)
    assert toy.model.roi_head.mask_head.num_classes == len(classes)
    # RFS threshold at the common/frequent boundary, as 1e-3 is on LVIS
    _, common_max = lvis_frequency_thresholds(defaults['num_train'],
                                              defaults['num_classes'])
    share = common_max / defaults['num_train']
    assert toy.train_dataloader.dataset.oversample_thr == pytest.approx(share)
    # GOL's rare threshold at the same ratio to RFS's as on LVIS
    real_loss = real.model.roi_head.bbox_head.loss_cls
    default_rare = inspect.signature(GOLLoss).parameters['rare_threshold']
    real_rare = real_loss.get('rare_threshold', default_rare.default)
    real_rfs = real.train_dataloader.dataset.oversample_thr
    toy_rare = toy.model.roi_head.bbox_head.loss_cls.rare_threshold
    assert toy_rare == pytest.approx(share * real_rare / real_rfs)
    assert toy.toy_test_scale == tuple(defaults['image_size'])
    assert toy.test_evaluator.ann_file.startswith(toy.toy_data_root)


# ---------------------------------------------------------------------------
# Makefile and README
# ---------------------------------------------------------------------------
def _make_dry_run(target: str) -> str:
    if shutil.which('make') is None:
        pytest.skip('make is not installed')
    result = subprocess.run(['make', '-n', target],
                            cwd=REPO,
                            capture_output=True,
                            text=True,
                            check=True)
    return result.stdout


def _readme_demo_commands() -> list:
    """Command lines of the demo block of docs/get_started.md (after its
    marker)."""
    text = (REPO / 'docs/get_started.md').read_text()
    match = re.search(r'<!-- demo-commands -->\s*```bash\n(.*?)```', text,
                      re.S)
    assert match, 'get_started.md: no ```bash block after <!-- demo-commands -->'
    lines = []
    for line in match.group(1).splitlines():
        line = line.split('#', 1)[0].strip()
        if line:
            lines.append(line)
    return lines


def test_documented_demo_commands_are_the_makefile_commands():
    # the docs write `python` for the Makefile's .venv/bin/python running a
    # tool; the launchers are given it as PYTHON=.venv/bin/python
    recipe = re.sub(r'(^|\s)\.venv/bin/python (?=tools/)', r'\1python ',
                    _make_dry_run('demo'), flags=re.M)
    assert recipe.count('PYTHON=.venv/bin/python tools/dist_') == 4
    commands = _readme_demo_commands()
    assert any('dist_train.sh' in c for c in commands)
    lines = recipe.splitlines()
    assert [c for c in commands if c not in lines] == []
    # and they list every tool the demo runs
    assert [
        c for c in lines
        if 'tools/' in c and 'setup_env' not in c and c not in commands
    ] == []
    for name in re.findall(r'(?:tools|configs)/[\w./-]+\.(?:py|sh)', recipe):
        assert (REPO / name).is_file(), name
    for page in ('README.md', 'docs/get_started.md'):
        text = (REPO / page).read_text()
        for target in re.findall(r'^make ([\w.-]+)', text, re.M):
            _make_dry_run(target)


# ---------------------------------------------------------------------------
# the demo's commands, two iterations each
# ---------------------------------------------------------------------------
def _run(cmd, cwd) -> str:
    env = dict(
        os.environ,
        PYTHON=sys.executable,
        PORT=free_port(),
        OMP_NUM_THREADS='1')
    if cmd[0] == sys.executable:  # a tool: forked from a warm interpreter
        result = run_python(
            cmd[1:], cwd=cwd, env=env, timeout=900, per_call=('PORT', ))
    else:
        result = subprocess.run([str(c) for c in cmd],
                                cwd=cwd,
                                env=env,
                                capture_output=True,
                                text=True,
                                timeout=900)
    assert result.returncode == 0, (
        result.stdout[-3000:] + result.stderr[-3000:])
    return result.stdout


# the demo's two trainings (make demo, steps 2-5), by the name the summary
# gives each
DEMO_RUNS = {'APA': 'apa_mrcnn_r50_toy.py', 'SE': 'se-relu_mrcnn_r50_toy.py'}


@pytest.fixture(scope='module')
def demo_run(toy_data_root, tmp_path_factory):
    """``demo_run(name)``: the work dir of one demo config trained with
    ``dist_train.sh`` and tested with ``dist_test.sh``, 2 processes and two
    iterations each; run once per module, so the summary test reuses them.
    The model at a sixteenth of its widths (the same blocks, heads and
    losses; the full widths train in tests/test_configs/)."""
    cwd = tmp_path_factory.mktemp('demo')
    (cwd / 'data').mkdir()
    (cwd / 'data' / 'toy_lvis').symlink_to(toy_data_root('lvis'))
    done: Dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in done:
            config = TOY / DEMO_RUNS[name]
            work_dir = cwd / name
            narrow = narrowing_options(Config.fromfile(config).model, depth=50)
            # 4 training images with RFS: 2 iterations of 2 x 2 images
            _run([
                'bash', REPO / 'tools/dist_train.sh', config, '2',
                '--work-dir', work_dir, '--cfg-options',
                'train_cfg.max_epochs=1',
                'train_dataloader.dataset.dataset.indices=4', *narrow
            ], cwd)
            checkpoint = (work_dir / 'last_checkpoint').read_text().strip()
            _run([
                'bash', REPO / 'tools/dist_test.sh', config, checkpoint, '2',
                '--work-dir', work_dir, '--cfg-options',
                'test_dataloader.dataset.indices=2', *narrow
            ], cwd)
            done[name] = work_dir
        return done[name]

    return get


@pytest.mark.slow
@pytest.mark.parametrize('name', list(DEMO_RUNS))
def test_demo_config_trains_and_tests_with_two_processes(demo_run, name):
    work_dir = demo_run(name)
    assert (work_dir / 'epoch_1.pth').is_file()
    assert list(work_dir.glob('*/*.json')), 'dist_test.sh wrote no metrics'


@pytest.mark.slow
def test_demo_summary_of_the_two_runs(demo_run, tmp_path):
    """compare_runs.py over the two demo runs (make demo, step 7)."""
    runs = [f'{name}={demo_run(name)}' for name in DEMO_RUNS]
    summary_file = tmp_path / 'summary.json'
    out = _run([
        sys.executable, REPO / 'tools/analysis/compare_runs.py', *runs,
        '--out', summary_file
    ], tmp_path)
    assert re.search(r'bbox APr\s+-?\d\.\d{3}\s+-?\d\.\d{3}', out), out
    summary = json.loads(summary_file.read_text())
    assert summary['threads_per_process'] == '1'
    for name in DEMO_RUNS:
        metrics: Dict[str, float] = summary['runs'][name]['metrics']
        for iou in ('bbox', 'segm'):
            for key in ('APr', 'APc', 'APf', 'AP', 'AP50'):
                assert math.isfinite(metrics[f'{iou}_{key}'])


# ---------------------------------------------------------------------------
# compare_runs on bad input
# ---------------------------------------------------------------------------
def _fake_test_run(work_dir: Path, stamp: str, values: dict) -> Path:
    (work_dir / stamp).mkdir(parents=True)
    path = work_dir / stamp / f'{stamp}.json'
    path.write_text(json.dumps({f'lvis/{k}': v for k, v in values.items()}))
    return path


def test_compare_runs_table_and_errors(load_tool, tmp_path, capsys):
    main = load_tool('tools/analysis/compare_runs.py').main
    values = {
        f'{iou}_{m}': 0.1 * i
        for i, (iou, m) in enumerate(
            (iou, m) for iou in ('bbox', 'segm')
            for m in ('AP', 'AP50', 'APr', 'APc', 'APf'))
    }
    _fake_test_run(tmp_path / 'a', '20240101_000000', {'bbox_AP': 9.0})
    _fake_test_run(tmp_path / 'a', '20240102_000000', values)  # newest
    _fake_test_run(tmp_path / 'b', '20240101_000000', values)
    out_file = tmp_path / 'out' / 'summary.json'
    assert main(
        [f'A={tmp_path / "a"}', f'B={tmp_path / "b"}', '--out',
         str(out_file)]) == 0
    table = capsys.readouterr().out
    assert re.search(r'bbox APr\s+0\.200\s+0\.200', table), table
    summary = json.loads(out_file.read_text())
    assert summary['runs']['A']['metrics']['segm_APf'] == pytest.approx(0.9)
    assert summary['finite'] is True
    # no test run
    (tmp_path / 'c').mkdir()
    with pytest.raises(FileNotFoundError, match='no test metrics in'):
        main([f'C={tmp_path / "c"}'])
    # a checkpoint written after the newest test: not tested
    (tmp_path / 'b' / 'epoch_1.pth').write_bytes(b'x')
    later = os.path.getmtime(tmp_path / 'b' / 'epoch_1.pth') + 5
    os.utime(tmp_path / 'b' / 'epoch_1.pth', (later, later))
    with pytest.raises(RuntimeError, match='was not tested'):
        main([f'B={tmp_path / "b"}'])
    # a newest metrics file that is not JSON is named, not skipped
    broken = _fake_test_run(tmp_path / 'a', '20240103_000000', values)
    broken.write_text(broken.read_text() + '0}')
    with pytest.raises(ValueError, match='20240103_000000.json.*not JSON'):
        main([f'A={tmp_path / "a"}'])
    broken.unlink()
    # a metric the run does not have
    with pytest.raises(KeyError, match='no bbox_AR'):
        main([f'A={tmp_path / "a"}', '--metrics', 'AR'])
    with pytest.raises(SystemExit):
        main(['no-equals-sign'])
