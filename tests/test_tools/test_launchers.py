"""The launchers find the interpreter by one rule (tools/launcher_common.sh,
sourced by tools/dist_train.sh, dist_test.sh, slurm_train.sh,
slurm_test.sh and tools/gpu/gpu_check.sh): ``PYTHON``, else the activated
virtual environment (``VIRTUAL_ENV``), else the activated conda environment
other than base (``CONDA_PREFIX``), else the repository's
``.venv/bin/python`` next to ``tools/``, else ``python`` on the PATH. Each
names the one it uses and why on one line before it starts, or stops with
one line when it has no torch; the docs state the rule in that order. The
one place that tests the rule; every run here starts from an environment
without ``PYTHON``, ``VIRTUAL_ENV``, ``CONDA_PREFIX`` and
``CONDA_DEFAULT_ENV``."""
import os
import re
import shutil
import subprocess
import sys
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
CHOOSERS = ('PYTHON', 'VIRTUAL_ENV', 'CONDA_PREFIX', 'CONDA_DEFAULT_ENV')

# answers the launcher's torch probe (python -c ...) as an interpreter with
# torch does, and records every other call
FAKE_PYTHON = ('#!/usr/bin/env bash\n'
               'if [[ "$1" == -c ]]; then echo torch; exit 0; fi\n'
               'echo "{name} $*" >> "$CALLS"\n')


def _fake_python(path: Path, name: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(FAKE_PYTHON.format(name=name))
    path.chmod(0o755)
    return path


def _env(tmp_path: Path, **env) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in CHOOSERS}
    return dict(
        clean,
        PATH=f'{FAKE_SLURM}:{tmp_path / "bin"}:/usr/bin:/bin',
        FAKE_SLURM_LOG=str(tmp_path / 'slurm.log'),
        CALLS=str(tmp_path / 'calls.txt'),
        **env)


def _run(tmp_path: Path, script: str, env: dict, args=None):
    calls = tmp_path / 'calls.txt'
    calls.write_text('')
    result = subprocess.run([
        'bash',
        str(tmp_path / 'repo/tools' / script),
        *(LAUNCHERS[script] if args is None else args)
    ],
                            cwd=tmp_path,
                            env=_env(tmp_path, **env),
                            capture_output=True,
                            text=True,
                            timeout=60)
    return result, calls.read_text()


@pytest.fixture
def checkout(tmp_path):
    """A copy of the launchers in a repository layout, a stand-in
    ``python`` on the PATH."""
    (tmp_path / 'repo/tools').mkdir(parents=True)
    for script in (*LAUNCHERS, 'launcher_common.sh'):
        shutil.copy(REPO / 'tools' / script, tmp_path / 'repo/tools' / script)
    _fake_python(tmp_path / 'bin/python', 'path-python')
    return tmp_path


@pytest.fixture(scope='module')
def without_torch(tmp_path_factory) -> Path:
    """A real virtual environment without torch (no pip, no packages)."""
    env = tmp_path_factory.mktemp('no_torch') / 'venv'
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', env],
                   check=True,
                   timeout=120)
    return env


def _announced(script: str, stderr: str) -> list:
    """The interpreter lines the launcher printed (``set -x`` traces of
    the slurm scripts start with ``+`` and are not counted)."""
    return re.findall(rf'^{re.escape(script)}: interpreter (\S+) \((.+)\)$',
                      stderr, re.M)


def _uses(checkout, script, env, name, path, why):
    """The launcher started ``name`` (the fake at ``path``) and said so
    with the reason ``why``."""
    result, calls = _run(checkout, script, env)
    assert result.returncode == 0, result.stderr
    tool = 'train.py' if 'train' in script else 'test.py'
    assert calls.startswith(f'{name} ') and tool in calls, calls
    assert _announced(script, result.stderr) == [(str(path), why)], \
        result.stderr


@pytest.mark.parametrize('script', sorted(LAUNCHERS))
def test_one_interpreter_rule_named_before_the_start(checkout, script):
    other = '; set PYTHON to use another'
    # nothing activated, no .venv: python on the PATH
    _uses(
        checkout, script, {}, 'path-python', checkout / 'bin/python',
        'python on the PATH: no environment is activated and there is no '
        f'.venv{other}')
    # the repository's .venv next to tools/, also under conda's base
    venv = _fake_python(checkout / 'repo/.venv/bin/python', 'venv-python')
    why = f"the repository's .venv: no environment is activated{other}"
    _uses(checkout, script, {}, 'venv-python', venv, why)
    base = _fake_python(checkout / 'conda/bin/python', 'base-python')
    conda_base = dict(
        CONDA_PREFIX=str(base.parents[1]), CONDA_DEFAULT_ENV='base')
    _uses(checkout, script, conda_base, 'venv-python', venv, why)
    # an activated conda environment other than base
    gpu = _fake_python(checkout / 'conda/envs/gpu/bin/python', 'conda-python')
    conda_gpu = dict(CONDA_PREFIX=str(gpu.parents[1]), CONDA_DEFAULT_ENV='gpu')
    _uses(checkout, script, conda_gpu, 'conda-python', gpu,
          f'CONDA_PREFIX: the activated conda environment gpu{other}')
    # an activated virtual environment, inside conda's or not
    active = _fake_python(checkout / 'active/bin/python', 'active-python')
    why = f'VIRTUAL_ENV: the activated virtual environment{other}'
    for env in ({}, conda_gpu):
        _uses(checkout, script, dict(env, VIRTUAL_ENV=str(active.parents[1])),
              'active-python', active, why)
    # PYTHON first, a path or a name on the PATH
    chosen = _fake_python(checkout / 'chosen', 'chosen-python')
    everything = dict(conda_gpu, VIRTUAL_ENV=str(active.parents[1]))
    _uses(checkout, script, dict(everything, PYTHON=str(chosen)),
          'chosen-python', chosen, 'PYTHON')
    named = _fake_python(checkout / 'bin/python3.11', 'named-python')
    _uses(checkout, script, dict(everything, PYTHON='python3.11'),
          'named-python', named, 'PYTHON')


@pytest.mark.parametrize('script', sorted(LAUNCHERS))
def test_a_missing_interpreter_stops_the_launcher(checkout, script):
    result, calls = _run(checkout, script,
                         {'PYTHON': str(checkout / 'no/python')})
    assert result.returncode == 127 and calls == ''
    assert f"no interpreter '{checkout / 'no/python'}' (PYTHON)" in \
        result.stderr
    gone = checkout / 'gone'
    result, calls = _run(checkout, script, {'VIRTUAL_ENV': str(gone)})
    assert result.returncode == 127 and calls == ''
    assert f"no interpreter '{gone}/bin/python' (VIRTUAL_ENV: the " \
        'activated virtual environment' in result.stderr
    assert not (checkout / 'slurm.log').exists()  # srun never started


@pytest.mark.parametrize('script', sorted(LAUNCHERS))
def test_an_environment_without_torch_stops_before_torchrun(
        checkout, script, without_torch):
    """One line names the environment and the missing package; torchrun
    (or srun) does not start."""
    result, calls = _run(checkout, script, {'VIRTUAL_ENV': str(without_torch)})
    assert result.returncode == 1 and calls == ''
    lines = [
        line for line in result.stderr.splitlines()
        if not line.startswith('+')  # set -x
    ]
    assert lines == [
        f'{script}: the activated virtual environment {without_torch} '
        f'(VIRTUAL_ENV) has no torch ({without_torch}/bin/python cannot '
        "import it): install torch and mmact's requirements there "
        '(docs/get_started.md), or set PYTHON to an interpreter that has '
        'them'
    ]
    assert not (checkout / 'slurm.log').exists()


def test_gpu_check_takes_the_rule(tmp_path, without_torch):
    """tools/gpu/gpu_check.sh sources the rule: an activated environment
    without torch stops it before it writes its log."""
    log = tmp_path / 'gpu_check/gpu_check.log'
    result = subprocess.run(
        ['bash', str(REPO / 'tools/gpu/gpu_check.sh'),
         str(log)],
        env=_env(tmp_path, VIRTUAL_ENV=str(without_torch)),
        capture_output=True,
        text=True,
        timeout=60)
    assert result.returncode == 1
    assert result.stderr.startswith(
        f'gpu_check.sh: the activated virtual environment {without_torch} '
        '(VIRTUAL_ENV) has no torch')
    assert not log.parent.exists()


def _paragraphs(text: str) -> list:
    return [p for p in re.split(r'\n\s*\n', text) if p.strip()]


def test_pages_state_the_rule_in_its_order():
    """A paragraph that names the launchers' interpreter (``PYTHON`` and
    the repository's ``.venv``) names the whole rule in its order."""
    stated = []
    for page in doc_pages(REPO):
        for paragraph in _paragraphs(page.read_text()):
            if not re.search(r'launcher|dist_train|slurm_train', paragraph):
                continue
            venv = re.search(r'(?<![\w-])\.venv/(bin/python)?`', paragraph)
            chosen = re.search(r'`PYTHON`', paragraph)
            if not (venv and chosen):
                continue
            where = f'{page.relative_to(REPO)}: {paragraph}'
            order = [
                chosen.start(),
                paragraph.find('`VIRTUAL_ENV`'),
                paragraph.find('`CONDA_PREFIX`'),
                venv.start(),
            ]
            assert -1 not in order and order == sorted(order), where
            assert 'base' in paragraph, where  # conda's base is skipped
            stated.append(page.name)
    assert {'lvis.md', 'get_started.md', 'preemption.md'} <= set(stated)


def test_the_gpu_install_section_names_the_interpreter():
    """A GPU machine may hold a CPU-only .venv (make demo): the GPU install
    section says the launchers take the activated environment, or
    ``PYTHON``."""
    text = (REPO / 'docs/get_started.md').read_text()
    gpu = text[text.index('**GPU users**'):]
    gpu = gpu[:gpu.index('\n## ')]
    assert re.search(r'^PYTHON=("[^"]+"|\S+) tools/dist_train\.sh ', gpu,
                     re.M), gpu
    assert '`PYTHON`' in gpu and '`VIRTUAL_ENV`' in gpu


@pytest.mark.parametrize('script', ['slurm_train.sh', 'slurm_test.sh'])
def test_slurm_launchers_refuse_a_missing_partition(checkout, script):
    """An unset ``$PARTITION`` in a batch script shifts every argument:
    the launcher stops with its usage instead of starting srun."""
    result, calls = _run(checkout, script, {}, args=LAUNCHERS[script][1:])
    assert result.returncode == 2 and calls == ''
    assert 'usage:' in result.stderr and 'got 3 arguments' in result.stderr
    result, calls = _run(
        checkout, script, {}, args=['', *LAUNCHERS[script][1:]])
    assert result.returncode == 2 and calls == ''
    assert "PARTITION ''" in result.stderr
