"""tools/dist_train.sh and dist_test.sh with 2 CPU processes (gloo)."""
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mmact.testing import (child_processes, free_port, is_alive,
                           narrow_fpn_detector, narrowing_options)
from mmact.testing.tool_fork import run_python
from mmact.utils.preflight import load_config

REPO = Path(__file__).resolve().parents[2]
TOY_COCO = REPO / 'configs/toy/mask-rcnn_r50_fpn_toy-coco.py'

pytestmark = pytest.mark.slow


def run(cmd, cwd, **env_vars):
    """A launcher in a fresh process; ``python TOOL ...`` forked from a warm
    interpreter (mmact.testing.tool_fork)."""
    env = dict(
        os.environ,
        PYTHON=sys.executable,
        PORT=free_port(),
        PYTHONPATH=str(Path(__file__).parent),
        **env_vars)
    if cmd[0] == sys.executable:
        result = run_python(
            cmd[1:], cwd=cwd, env=env, timeout=900, per_call=('PORT', ))
    else:
        result = subprocess.run(
            cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


def metrics(log: str) -> dict:
    return {k: float(v) for k, v in re.findall(r'(coco/\w+): (-?[\d.]+)', log)}


@pytest.fixture(scope='module')
def trained(tmp_path_factory, toy_data_root):
    """Two processes train one epoch (4 iterations each) and validate the
    toy COCO Mask R-CNN at a sixteenth of its widths (the same blocks and
    heads: what the launchers and hooks do does not depend on the widths;
    the full model trains in tests/test_configs/test_all_configs.py)."""
    cwd = tmp_path_factory.mktemp('dist')
    (cwd / 'data').mkdir()
    (cwd / 'data' / 'toy_coco').symlink_to(toy_data_root('coco'))
    narrow = load_config(str(TOY_COCO))
    narrow_fpn_detector(narrow.model, depth=50)
    narrow.dump(str(cwd / 'toy_coco_narrow.py'))
    config = cwd / 'probe.py'
    config.write_text(
        "_base_ = './toy_coco_narrow.py'\n"
        "custom_imports = dict(imports=['mmact', 'dist_probe'], "
        "allow_failed_imports=False)\n"
        "custom_hooks = [dict(type='DistProbeHook')]\n"
        "train_cfg = dict(max_epochs=1, val_interval=1)\n"
        # Keep every detection of the barely trained model, so metrics and
        # predictions have something to compare.
        "model = dict(test_cfg=dict(rcnn=dict(score_thr=0.0)))\n")
    work_dir = cwd / 'work'
    log = run([
        'bash',
        str(REPO / 'tools/dist_train.sh'),
        str(config), '2', '--work-dir',
        str(work_dir)
    ], cwd)
    return cwd, config, work_dir, log


def test_ranks_hold_identical_parameters(trained):
    _, _, work_dir, log = trained
    assert 'CPUDistributedDataParallel' in log or 'world_size: 2' in log
    rank0 = torch.load(work_dir / 'params_rank0.pth')
    rank1 = torch.load(work_dir / 'params_rank1.pth')
    assert rank0.keys() == rank1.keys() and len(rank0) > 100
    saved = torch.load(
        work_dir / 'epoch_1.pth', weights_only=False)['state_dict']
    for name, value in rank0.items():
        torch.testing.assert_close(value, rank1[name], rtol=0, atol=0)
        # The checkpoint holds exactly the trained weights.
        torch.testing.assert_close(value, saved[name], rtol=0, atol=0)


def test_only_rank0_writes_the_checkpoint(trained):
    _, _, work_dir, _ = trained
    assert (work_dir / 'saved_by_rank0').exists()
    assert not (work_dir / 'saved_by_rank1').exists()
    assert (work_dir / 'epoch_1.pth').exists()
    # rank 0 held the work dir, and released it before its os._exit
    assert not (work_dir / '.mmact-train.lock').exists()


def test_dist_test_matches_single_process(trained):
    cwd, config, work_dir, _ = trained
    checkpoint = str(work_dir / 'epoch_1.pth')
    # One thread in every process (torchrun's default, set here in case the
    # caller's environment has another): convolutions sum in another order
    # on another thread count, and with score_thr=0 a last bit decides which
    # near-tied boxes make the top 100.
    single = run([
        sys.executable,
        str(REPO / 'tools/test.py'),
        str(config), checkpoint, '--work-dir',
        str(cwd / 'single'), '--out',
        str(cwd / 'single.pkl')
    ],
                 cwd,
                 OMP_NUM_THREADS='1')
    double = run([
        'bash',
        str(REPO / 'tools/dist_test.sh'),
        str(config), checkpoint, '2', '--work-dir',
        str(cwd / 'double'), '--out',
        str(cwd / 'double.pkl')
    ],
                 cwd,
                 OMP_NUM_THREADS='1')
    assert metrics(single) and metrics(single) == metrics(double)
    with open(cwd / 'single.pkl', 'rb') as f:
        single_preds = pickle.load(f)
    with open(cwd / 'double.pkl', 'rb') as f:
        double_preds = pickle.load(f)
    assert len(single_preds) == len(double_preds) == 8
    for a, b in zip(single_preds, double_preds):
        assert a['img_id'] == b['img_id']
        torch.testing.assert_close(a['pred_instances']['bboxes'],
                                   b['pred_instances']['bboxes'])
        torch.testing.assert_close(a['pred_instances']['scores'],
                                   b['pred_instances']['scores'])


TINY_CLS = Path(__file__).parent / 'configs/tiny-cls_aglu-apa.py'


def test_sync_bn_and_exact_resume_with_two_cpu_processes(
        tmp_path, with_tiny_cls_data):
    """SyncBN (GPU-only) runs as BN with one warning; 2 epochs straight and
    1 + --resume give identical checkpoints, each process getting its own
    random state back."""
    with_tiny_cls_data(tmp_path)
    # Another seed per process, so restoring one process's state on both
    # would show.
    sync_bn = ('model.backbone.norm_cfg.type=SyncBN',
               'randomness.diff_rank_seed=True')

    def dist_train(work_dir, *options):
        return run([
            'bash',
            str(REPO / 'tools/dist_train.sh'),
            str(TINY_CLS), '2', '--work-dir',
            str(work_dir), *options
        ], tmp_path)

    log = dist_train(tmp_path / 'straight', '--cfg-options', *sync_bn)
    assert log.count('SyncBN needs GPUs') == 1
    dist_train(tmp_path / 'resumed', '--cfg-options', *sync_bn,
               'train_cfg.max_epochs=1')
    dist_train(tmp_path / 'resumed', '--resume', '--cfg-options', *sync_bn)

    straight = torch.load(
        tmp_path / 'straight/epoch_2.pth', weights_only=False)
    resumed = torch.load(tmp_path / 'resumed/epoch_2.pth', weights_only=False)
    rank0, rank1 = straight['random_state']  # one per process
    assert not torch.equal(rank0['torch'], rank1['torch'])
    for part in ('state_dict', 'optimizer', 'param_schedulers',
                 'random_state'):
        assert identical(straight[part], resumed[part]), part


def identical(a, b) -> bool:
    """Equal values, every tensor bit for bit, through dicts and lists."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(identical(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(identical, a, b))
    return a == b


@pytest.mark.skipif(
    not sys.platform.startswith('linux'), reason='reads /proc (Linux)')
def test_killing_the_launcher_ends_the_workers(tmp_path, toy_data_root):
    """kill -9 of tools/dist_train.sh: both workers end within seconds
    (torchrun alone leaves them training to the end, minutes away). The
    model at a sixteenth of its widths, as in :func:`trained`."""
    (tmp_path / 'data').mkdir()
    (tmp_path / 'data' / 'toy_coco').symlink_to(toy_data_root('coco'))
    work_dir = tmp_path / 'work'
    narrow = narrowing_options(load_config(str(TOY_COCO)).model, depth=50)
    launcher = subprocess.Popen([
        'bash',
        str(REPO / 'tools/dist_train.sh'),
        str(TOY_COCO), '2', '--work-dir',
        str(work_dir), '--cfg-options', 'train_cfg.max_epochs=500',
        'default_hooks.logger.interval=1', *narrow
    ],
                                cwd=tmp_path,
                                env=dict(
                                    os.environ,
                                    PYTHON=sys.executable,
                                    PORT=free_port()),
                                stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    # training has started once the main worker logged an iteration (killed
    # earlier, in their start-up, the workers may end only by
    # end_with_launcher's SIGKILL, 30 s later)
    while not any('(train)' in log.read_text()
                  for log in work_dir.glob('*/*.log')):
        assert launcher.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    workers = child_processes(launcher.pid)  # the script exec'd torchrun
    assert len(workers) == 2
    launcher.send_signal(signal.SIGKILL)
    launcher.wait()
    deadline = time.monotonic() + 60
    try:
        while any(is_alive(p) for p in workers):
            assert time.monotonic() < deadline, 'workers outlived the launcher'
            time.sleep(0.2)
    finally:  # a failed check leaves no orphan training on
        for pid in filter(is_alive, workers):
            os.kill(pid, signal.SIGKILL)
