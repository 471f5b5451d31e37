"""The launchers find the interpreter by one rule: ``PYTHON``, else the
repository's ``.venv/bin/python`` next to ``tools/``, else ``python`` on the
PATH (tools/launcher_common.sh, sourced by tools/dist_train.sh,
dist_test.sh, slurm_train.sh and slurm_test.sh); each prints the one it
uses before it starts, and the docs state the rule in that order. The one
place that tests the rule."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mmact.testing.doc_blocks import doc_pages

REPO = Path(__file__).resolve().parents[2]
FAKE_SLURM = Path(__file__).resolve().parent / 'fake_slurm'
LAUNCHERS = {
    'slurm_train.sh': ['part', 'job', 'cfg.py', 'work_dirs/x'],
    'slurm_test.sh': ['part', 'job', 'cfg.py', 'ckpt.pth'],
    'dist_train.sh': ['cfg.py', '1'],
    'dist_test.sh': ['cfg.py', 'ckpt.pth', '1'],
}

FAKE_PYTHON = '#!/usr/bin/env bash\necho "{name} $*" >> "$CALLS"\n'


def _fake_python(path: Path, name: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(FAKE_PYTHON.format(name=name))
    path.chmod(0o755)


def _run(tmp_path: Path, script: str, env: dict, args=None):
    calls = tmp_path / 'calls.txt'
    calls.write_text('')
    result = subprocess.run(
        ['bash', str(tmp_path / 'repo/tools' / script),
         *(LAUNCHERS[script] if args is None else args)],
        cwd=tmp_path,
        env=dict(
            os.environ,
            PATH=f'{FAKE_SLURM}:{tmp_path / "bin"}:/usr/bin:/bin',
            FAKE_SLURM_LOG=str(tmp_path / 'slurm.log'),
            CALLS=str(calls),
            **env),
        capture_output=True,
        text=True,
        timeout=60)
    return result, calls.read_text()


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A copy of the launchers in a repository layout, a stand-in
    ``python`` on the PATH."""
    (tmp_path / 'repo/tools').mkdir(parents=True)
    for script in (*LAUNCHERS, 'launcher_common.sh'):
        shutil.copy(REPO / 'tools' / script, tmp_path / 'repo/tools' / script)
    _fake_python(tmp_path / 'bin/python', 'path-python')
    monkeypatch.delenv('PYTHON', raising=False)
    return tmp_path


def _announced(script: str, stderr: str) -> list:
    """The interpreter lines the launcher printed (``set -x`` traces of
    the slurm scripts start with ``+`` and are not counted)."""
    return re.findall(rf'^{re.escape(script)}: interpreter (\S+) \((.+)\)$',
                      stderr, re.M)


@pytest.mark.parametrize('script', sorted(LAUNCHERS))
def test_one_interpreter_rule_named_before_the_start(checkout, script):
    tool = 'train.py' if 'train' in script else 'test.py'
    # no .venv: python on the PATH
    result, calls = _run(checkout, script, {})
    assert result.returncode == 0, result.stderr
    assert calls.startswith('path-python ') and tool in calls, calls
    assert _announced(script, result.stderr) == [
        (str(checkout / 'bin/python'),
         'python on the PATH; set PYTHON to use another')
    ], result.stderr
    # the repository's .venv next to tools/
    _fake_python(checkout / 'repo/.venv/bin/python', 'venv-python')
    result, calls = _run(checkout, script, {})
    assert result.returncode == 0, result.stderr
    assert calls.startswith('venv-python '), calls
    assert _announced(script, result.stderr) == [
        (str(checkout / 'repo/.venv/bin/python'),
         "the repository's .venv; set PYTHON to use another")
    ], result.stderr
    # PYTHON first, a path or a name on the PATH
    _fake_python(checkout / 'chosen', 'chosen-python')
    result, calls = _run(checkout, script, {'PYTHON': str(checkout / 'chosen')})
    assert result.returncode == 0, result.stderr
    assert calls.startswith('chosen-python '), calls
    assert _announced(script, result.stderr) == [(str(checkout / 'chosen'),
                                                  'PYTHON')]
    _fake_python(checkout / 'bin/python3.11', 'named-python')
    result, calls = _run(checkout, script, {'PYTHON': 'python3.11'})
    assert calls.startswith('named-python '), calls
    assert _announced(script, result.stderr) == [
        (str(checkout / 'bin/python3.11'), 'PYTHON')
    ]


@pytest.mark.parametrize('script', sorted(LAUNCHERS))
def test_a_missing_interpreter_stops_the_launcher(checkout, script):
    result, calls = _run(checkout, script,
                         {'PYTHON': str(checkout / 'no/python')})
    assert result.returncode == 127 and calls == ''
    assert f"no interpreter '{checkout / 'no/python'}' (PYTHON)" in \
        result.stderr
    assert not (checkout / 'slurm.log').exists()  # srun never started


def _paragraphs(text: str) -> list:
    return [p for p in re.split(r'\n\s*\n', text) if p.strip()]


def test_pages_state_the_rule_in_its_order():
    """A paragraph that names both ``PYTHON`` and the repository's
    ``.venv`` as the launchers' interpreter names ``PYTHON`` first."""
    stated = 0
    for page in doc_pages(REPO):
        for paragraph in _paragraphs(page.read_text()):
            if not re.search(r'launcher|dist_train|slurm_train', paragraph):
                continue
            venv = re.search(r'(?<![\w-])\.venv/(bin/python)?`', paragraph)
            chosen = re.search(r'`PYTHON`', paragraph)
            if venv and chosen:
                stated += 1
                assert chosen.start() < venv.start(), \
                    f'{page.relative_to(REPO)}: {paragraph}'
    assert stated >= 2  # lvis.md and get_started.md's GPU install


def test_the_gpu_install_section_says_to_set_python():
    """A GPU machine may hold a CPU-only .venv (make demo): the GPU install
    section tells the user to point the launchers at the GPU stack."""
    text = (REPO / 'docs/get_started.md').read_text()
    gpu = text[text.index('**GPU users**'):]
    gpu = gpu[:gpu.index('\n## ')]
    assert re.search(r'^PYTHON=("[^"]+"|\S+) tools/dist_train\.sh ', gpu,
                     re.M), gpu
    assert '`PYTHON`' in gpu


@pytest.mark.parametrize('script', ['slurm_train.sh', 'slurm_test.sh'])
def test_slurm_launchers_refuse_a_missing_partition(checkout, script):
    """An unset ``$PARTITION`` in a batch script shifts every argument:
    the launcher stops with its usage instead of starting srun."""
    result, calls = _run(checkout, script, {},
                         args=LAUNCHERS[script][1:])
    assert result.returncode == 2 and calls == ''
    assert 'usage:' in result.stderr and 'got 3 arguments' in result.stderr
    result, calls = _run(checkout, script, {},
                         args=['', *LAUNCHERS[script][1:]])
    assert result.returncode == 2 and calls == ''
    assert "PARTITION ''" in result.stderr
