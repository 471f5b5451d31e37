"""Every entry point of tools/ refuses a file, a config or an argument with
one ``mmact: ...`` line on stderr, exit status 1 and no traceback, before
it writes anything (mmact.utils.refusal).

The tools run in this process, as ``python TOOL ...`` runs them
(``runpy`` with ``__name__ == '__main__'``): every refusal here comes
before a model is built, in well under a second after the imports. One
test runs tools/test.py as its own process, and ``MMACT_DEBUG=1`` adds the
traceback.
"""
import logging
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mmengine.logging import MMLogger

from mmact.utils.preemption import STOP_SIGNALS
from mmact.utils.refusal import DEBUG_VARIABLE

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / 'configs/toy/apa_mrcnn_r50_toy.py'
TINY = REPO / 'tests/test_tools/configs/tiny-cls_aglu-apa.py'
ANALYSIS = ('attention_stats', 'calibration', 'logit_distribution',
            'neural_collapse', 'plot_activations', 'swap_fidelity')
# the three files a failed save or download leaves where a checkpoint was
# expected, and the words that name each
BAD_FILES = {
    'truncated': 'is truncated or not a torch checkpoint',
    'empty': 'is empty (0 bytes), not a torch checkpoint',
    'html': 'is a web page (HTML), not a torch checkpoint',
}


@pytest.fixture
def bad_file(tmp_path):
    """``bad_file(kind)``: a ``.pth`` of that kind in ``tmp_path``."""

    def write(kind: str) -> Path:
        path = tmp_path / f'{kind}.pth'
        if kind == 'truncated':
            torch.save({'state_dict': {'w': torch.ones(64)}}, path)
            path.write_bytes(path.read_bytes()[:200])
        elif kind == 'empty':
            path.write_bytes(b'')
        else:
            path.write_text('<!DOCTYPE html>\n<html><body>Sign in to '
                            'download</body></html>\n')
        return path

    return write


@pytest.fixture
def refused(tmp_path, monkeypatch, capsys):
    """``refused(tool, *args)``: run ``tools/<tool>`` in ``tmp_path`` and
    return its refusal (the last stderr line, less ``mmact: ``) once it
    exited with status 1 and no traceback."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(DEBUG_VARIABLE, raising=False)
    monkeypatch.setenv('LOCAL_RANK', '0')  # train / test set it

    def run(tool: str, *args) -> str:
        # loggers of earlier tests may still write to a stderr capture that
        # has closed ('--- Logging error ---' and its traceback)
        for logger in MMLogger._instance_dict.values():
            for handler in logger.handlers:
                if type(handler) is logging.StreamHandler:
                    monkeypatch.setattr(handler, 'stream', sys.stderr)
        path = str(REPO / 'tools' / tool)
        monkeypatch.setattr(sys, 'argv', [path, *map(str, args)])
        monkeypatch.setattr(sys, 'path', [str(Path(path).parent), *sys.path])
        try:
            with pytest.raises(SystemExit) as stopped:
                runpy.run_path(path, run_name='__main__')
        finally:
            STOP_SIGNALS.uninstall()  # train / test install theirs
        err = capsys.readouterr().err
        assert stopped.value.code == 1, err[-3000:]
        assert 'Traceback' not in err, err[-3000:]
        last = err.rstrip('\n').splitlines()[-1]
        assert last.startswith('mmact: '), err[-3000:]
        return last[len('mmact: '):]

    return run


# ---------------------------------------------------------------------------
# a checkpoint that is no checkpoint: test.py, infer_image.py, train.py
# ---------------------------------------------------------------------------
@pytest.mark.parametrize('kind', sorted(BAD_FILES))
def test_test_tool_refuses_a_bad_checkpoint(refused, bad_file, tmp_path, kind):
    path = bad_file(kind)
    line = refused('test.py', TOY, path, '--work-dir', tmp_path / 'work')
    assert line.startswith(f'Checkpoint {str(path)!r} {BAD_FILES[kind]}')
    assert not (tmp_path / 'work').exists()


@pytest.mark.parametrize('kind', sorted(BAD_FILES))
def test_infer_image_refuses_a_bad_checkpoint(refused, bad_file, tmp_path,
                                              kind):
    path = bad_file(kind)
    (tmp_path / 'image.jpg').write_bytes(b'')
    line = refused('misc/infer_image.py', TOY, path, 'image.jpg', '--out-dir',
                   tmp_path / 'out')
    assert line.startswith(f'Checkpoint {str(path)!r} {BAD_FILES[kind]}')
    assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('kind', sorted(BAD_FILES))
@pytest.mark.parametrize('how', ['--resume', 'load_from'])
def test_train_refuses_a_bad_checkpoint(refused, bad_file, tmp_path, kind,
                                        how):
    path = bad_file(kind)
    given = ['--resume', path] if how == '--resume' else [
        '--cfg-options', f'load_from={path}'
    ]
    line = refused('train.py', TOY, '--work-dir', tmp_path / 'work', *given)
    assert line.startswith(f'Checkpoint {str(path)!r} {BAD_FILES[kind]}')
    assert not (tmp_path / 'work').exists()  # the lock's folder is gone


def test_a_missing_checkpoint_is_named(refused, tmp_path):
    assert refused('test.py', TOY, 'no.pth', '--work-dir',
                   tmp_path / 'work') == "Checkpoint 'no.pth' does not exist."
    (tmp_path / 'image.jpg').write_bytes(b'')
    assert refused('misc/infer_image.py', TOY, 'no.pth',
                   'image.jpg') == "Checkpoint 'no.pth' does not exist."
    assert refused('train.py', TOY, '--resume', 'no.pth', '--work-dir',
                   tmp_path / 'work') == "Checkpoint 'no.pth' does not exist."


# ---------------------------------------------------------------------------
# configs and arguments
# ---------------------------------------------------------------------------
@pytest.mark.parametrize('tool', [
    'train.py', 'test.py', 'misc/check_data.py', *(f'analysis/{name}.py'
                                                   for name in ANALYSIS)
])
def test_a_config_path_typo_is_named_with_the_closest(refused, tool):
    args = [str(TOY).replace('r50_toy', 'r50_tyo')]
    if tool == 'test.py':
        args.append('ckpt.pth')
    line = refused(tool, *args)
    assert line.startswith(f'Config file {args[0]!r} does not exist. Did '
                           f'you mean: {TOY}')


def test_infer_image_names_missing_images(refused, tmp_path):
    ckpt = tmp_path / 'model.pth'
    torch.save({'state_dict': {}}, ckpt)
    (tmp_path / 'there.jpg').write_bytes(b'')
    line = refused('misc/infer_image.py', TOY, ckpt, 'there.jpg', 'a.jpg',
                   'b.png', '--out-dir', tmp_path / 'out')
    assert line == 'image files do not exist: a.jpg, b.png'
    assert not (tmp_path / 'out').exists()


def test_test_tool_refuses_its_options(refused, tmp_path):
    ckpt = tmp_path / 'model.pth'
    torch.save({'state_dict': {}}, ckpt)
    assert refused('test.py', TOY, ckpt, '--out', 'preds.json') == \
        "--out must name a .pkl file, got 'preds.json'"
    assert refused('test.py', TOY, ckpt, '--show', '--cfg-options',
                   'default_hooks.visualization=None') == \
        '--show / --show-dir need default_hooks.visualization in the config.'
    assert not (tmp_path / 'work_dirs').exists()


def test_train_refuses_its_options(refused, tmp_path):
    work = ['--work-dir', tmp_path / 'work']
    assert refused('train.py', TOY, *work, '--auto-scale-lr',
                   '--cfg-options', 'auto_scale_lr=None') == \
        '--auto-scale-lr needs auto_scale_lr.base_batch_size in the config.'
    assert refused('train.py', TOY, *work, '--amp', '--cfg-options',
                   'optim_wrapper.type=ApexOptimWrapper') == \
        "--amp replaces optim_wrapper.type OptimWrapper, got " \
        "'ApexOptimWrapper'"
    assert "'SIGBOGUS'" in refused('train.py', TOY, *work, '--stop-signals',
                                   'SIGBOGUS')
    assert not (tmp_path / 'work').exists()


def test_train_refuses_to_overwrite_a_run(refused, tmp_path):
    work = tmp_path / 'work'
    work.mkdir()
    (work / 'epoch_1.pth').write_bytes(b'x')
    line = refused('train.py', TOY, '--work-dir', work)
    assert line.startswith(f'{work} holds checkpoints of an earlier run '
                           '(epoch_1.pth)')
    assert sorted(p.name for p in work.iterdir()) == ['epoch_1.pth']


@pytest.mark.parametrize('name', ANALYSIS)
def test_analysis_tools_refuse_their_options(refused, tmp_path, name):
    line = refused(f'analysis/{name}.py', TINY, '--num-samples', '0',
                   '--out-dir', tmp_path / 'out')
    assert line == '--num-samples must be >= 1, got 0'
    assert not (tmp_path / 'out').exists()


def test_analysis_tools_refuse_a_bad_checkpoint(refused, bad_file, tmp_path):
    path = bad_file('html')
    line = refused('analysis/plot_activations.py', TINY, path, '--out-dir',
                   tmp_path / 'out')
    assert line.startswith(f'Checkpoint {str(path)!r} {BAD_FILES["html"]}')
    assert refused('analysis/calibration.py', TINY, '--num-bins', '0') == \
        '--num-bins must be >= 1, got 0'
    assert not (tmp_path / 'out').exists()


def test_compare_runs_refuses_a_missing_or_untested_run(refused, tmp_path):
    assert refused('analysis/compare_runs.py', 'A=nowhere') == \
        "work dir 'nowhere' does not exist"
    (tmp_path / 'run').mkdir()
    assert refused('analysis/compare_runs.py', 'A=run', '--out',
                   'summary.json').startswith('no test metrics in run: ')
    assert not (tmp_path / 'summary.json').exists()


def test_check_data_ends_with_one_line(refused, tmp_path):
    """The problems it finds: listed, then one line."""
    line = refused('misc/check_data.py', TOY, '--paths-only')
    assert line.startswith(f'{TOY}: files and folders missing')
    assert line.endswith('listed above')


# ---------------------------------------------------------------------------
# the converter, the data generator, the benchmarks
# ---------------------------------------------------------------------------
def test_converter_refuses_its_source(refused, bad_file, tmp_path):
    out = tmp_path / 'out/converted.pth'
    path = bad_file('truncated')
    line = refused('model_converters/apa_to_mmact.py', path, out)
    assert line.startswith(f'Checkpoint {str(path)!r} '
                           f'{BAD_FILES["truncated"]}')
    other = tmp_path / 'other.pth'
    torch.save({'model': {'fc.weight': torch.zeros(2, 2)}}, other)
    line = refused('model_converters/apa_to_mmact.py', other, out)
    assert line.startswith('not a reference (SE-)ResNet checkpoint')
    assert not (tmp_path / 'out').exists()


def test_generate_toy_data_refuses_an_out_dir_it_cannot_write(
        refused, tmp_path):
    (tmp_path / 'file').write_text('')
    assert 'file' in refused('misc/generate_toy_data.py', 'cls', '--out-dir',
                             tmp_path / 'file')


@pytest.mark.skipif(
    torch.cuda.is_available(), reason='refuses --device cuda without a GPU')
@pytest.mark.parametrize('name', ['cuda', 'mask_rcnn_step'])
def test_gpu_benchmarks_refuse_cuda_without_a_gpu(refused, name):
    assert refused(f'benchmarks/benchmark_{name}.py', '--device',
                   'cuda').startswith(f'benchmark_{name}.py: --device cuda '
                                      'needs a CUDA GPU')


def test_long_tail_benchmark_refuses_too_many_images(refused):
    line = refused('benchmarks/benchmark_long_tail.py', '--max-per-class',
                   '500')
    assert '--test-per-class' in line and '--max-per-class' in line


# ---------------------------------------------------------------------------
# as a process; MMACT_DEBUG=1
# ---------------------------------------------------------------------------
@pytest.mark.slow
def test_a_refusal_is_the_whole_stderr_of_the_process(bad_file, tmp_path):
    path = bad_file('html')
    env = dict(os.environ, PYTHONWARNINGS='ignore')
    env.pop(DEBUG_VARIABLE, None)
    result = subprocess.run(
        [sys.executable, REPO / 'tools/test.py', TOY, path],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300)
    assert result.returncode == 1
    assert result.stderr == (f'mmact: Checkpoint {str(path)!r} '
                             f'{BAD_FILES["html"]}: the download saved an '
                             'error or log-in page of the server; nothing '
                             'was loaded. Download the file again (from the '
                             'release page, or with the link it gives).\n')
    assert not (tmp_path / 'work_dirs').exists()


def test_debug_variable_shows_the_traceback(bad_file, tmp_path, monkeypatch,
                                            capsys):
    path = bad_file('empty')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(DEBUG_VARIABLE, '1')
    monkeypatch.setenv('LOCAL_RANK', '0')
    monkeypatch.setattr(sys, 'argv', ['test.py', str(TOY), str(path)])
    try:
        with pytest.raises(SystemExit) as stopped:
            runpy.run_path(str(REPO / 'tools/test.py'), run_name='__main__')
    finally:
        STOP_SIGNALS.uninstall()
    err = capsys.readouterr().err
    assert stopped.value.code == 1
    assert err.startswith('Traceback (most recent call last):')
    assert 'in check_checkpoint' in err and 'ValueError: Checkpoint' in err
    assert err.splitlines()[-1] == (f'mmact: Checkpoint {str(path)!r} '
                                    f'{BAD_FILES["empty"]}: a save or '
                                    'download that did not finish; nothing '
                                    'was loaded. Use an intact file, e.g. an '
                                    'earlier epoch_N.pth of the same work '
                                    'dir.')
