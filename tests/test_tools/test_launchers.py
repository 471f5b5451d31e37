"""The launchers find the interpreter by one rule: ``PYTHON``, else the
repository's ``.venv/bin/python`` next to ``tools/``, else ``python`` on the
PATH (tools/dist_train.sh, tools/slurm_train.sh, tools/slurm_test.sh)."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKE_SLURM = Path(__file__).resolve().parent / 'fake_slurm'
LAUNCHERS = {
    'slurm_train.sh': ['part', 'job', 'cfg.py', 'work_dirs/x'],
    'slurm_test.sh': ['part', 'job', 'cfg.py', 'ckpt.pth'],
    'dist_train.sh': ['cfg.py', '1'],
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


@pytest.mark.parametrize('script', sorted(LAUNCHERS))
def test_one_interpreter_rule(checkout, script):
    tool = 'train.py' if 'train' in script else 'test.py'
    # no .venv: python on the PATH
    result, calls = _run(checkout, script, {})
    assert result.returncode == 0, result.stderr
    assert calls.startswith('path-python ') and tool in calls, calls
    # the repository's .venv next to tools/
    _fake_python(checkout / 'repo/.venv/bin/python', 'venv-python')
    result, calls = _run(checkout, script, {})
    assert result.returncode == 0, result.stderr
    assert calls.startswith('venv-python '), calls
    # PYTHON first
    _fake_python(checkout / 'chosen', 'chosen-python')
    result, calls = _run(checkout, script, {'PYTHON': str(checkout / 'chosen')})
    assert result.returncode == 0, result.stderr
    assert calls.startswith('chosen-python '), calls


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
