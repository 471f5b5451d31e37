"""mmact.testing.tool_fork: a command forked from a zygote behaves as the
same command in a fresh interpreter (argv, cwd, environment, streams, exit
code, atexit, timeout), and another environment gets another zygote."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from mmact.testing import tool_fork
from mmact.testing.tool_fork import run_python

SCRIPT = textwrap.dedent('''
    import atexit, json, os, sys
    atexit.register(lambda: print('atexit ran'))
    print(json.dumps(dict(argv=sys.argv[1:], cwd=os.getcwd(),
                          path0=sys.path[0], name=__name__,
                          value=os.environ.get('FORK_TEST_VALUE'),
                          stdin=sys.stdin.read())))
    print('to stderr', file=sys.stderr)
    sys.exit(int(sys.argv[1]))
''')


@pytest.fixture
def script(tmp_path):
    path = tmp_path / 'tool.py'
    path.write_text(SCRIPT)
    (tmp_path / 'cwd').mkdir()
    return path


def env(value='a'):
    return dict(os.environ, FORK_TEST_VALUE=value)


def test_same_as_a_fresh_process(script):
    args = [script, '3', 'x y']
    cwd = script.parent / 'cwd'
    forked = run_python(args, cwd=cwd, env=env(), input='in', timeout=120)
    fresh = subprocess.run([sys.executable, *map(str, args)],
                           cwd=cwd,
                           env=env(),
                           input='in',
                           capture_output=True,
                           text=True,
                           timeout=120)
    assert forked.returncode == fresh.returncode == 3
    assert forked.stdout == fresh.stdout
    assert forked.stderr == fresh.stderr == 'to stderr\n'
    assert '"argv": ["3", "x y"]' in forked.stdout
    assert f'"path0": "{script.parent}"' in forked.stdout
    assert '"name": "__main__"' in forked.stdout
    assert forked.stdout.endswith('atexit ran\n')


def test_environment_code_and_errors(script):
    first = run_python([script, '0'], env=env(), timeout=120)
    assert first.returncode == 0 and '"value": "a"' in first.stdout
    zygotes = dict(tool_fork._zygotes)
    # another environment: another zygote, the value its child sees
    other = run_python([script, '0'], env=env('b'), timeout=120)
    assert '"value": "b"' in other.stdout
    assert len(tool_fork._zygotes) == min(
        len(zygotes) + 1, tool_fork.MAX_ZYGOTES)
    code = ('import sys; print(sys.argv[1:]); '
            "raise ValueError('bad')")
    failed = run_python(['-c', code, 'q'], env=env(), timeout=120)
    assert failed.returncode == 1 and failed.stdout == "['q']\n"
    assert 'ValueError: bad' in failed.stderr
    said = run_python(['-c', 'raise SystemExit("stop here")'],
                      env=env(),
                      timeout=120)
    assert (said.returncode, said.stderr) == (1, 'stop here\n')
    killed = run_python(
        ['-c', 'import os, signal; os.kill(os.getpid(), signal.SIGTERM)'],
        env=env(),
        timeout=120)
    assert killed.returncode == -signal.SIGTERM


def test_timeout_kills_the_child_and_the_zygote_serves_on(script):
    with pytest.raises(subprocess.TimeoutExpired):
        run_python(['-c', 'import time; time.sleep(60)'], env=env(), timeout=1)
    assert run_python([script, '5'], env=env(), timeout=120).returncode == 5


def test_fork_off_runs_a_fresh_process(script, monkeypatch):
    monkeypatch.setenv('MMACT_TEST_FORK', '0')
    monkeypatch.setattr(tool_fork, '_zygote', None)  # never reached
    done = run_python([script, '2'], env=env(), input='z', timeout=120)
    assert done.returncode == 2 and '"stdin": "z"' in done.stdout


def test_per_call_variables_share_a_zygote(script):
    """Variables named per_call may differ between calls served by one
    zygote; each child sees its own values."""
    seen = []
    for value in ('p', 'q'):
        done = run_python([script, '0'],
                          env=env(value),
                          per_call=('FORK_TEST_VALUE', ),
                          timeout=120)
        assert f'"value": "{value}"' in done.stdout
        seen.append(tool_fork._zygote(env(value), ('FORK_TEST_VALUE', )))
    assert seen[0] is seen[1]
    assert tool_fork._zygote(env('p')) is not seen[0]  # without per_call


def test_new_session_keeps_group_signals_to_the_child(script):
    """start_new_session: the child leads a session and group of its own,
    so a signal to its group (a stop probe's os.killpg) spares the zygote,
    which serves the next call."""
    # (the group signal only where the child leads it: a failure here must
    # not signal the test's own group)
    code = ('import os, signal, sys\n'
            'alone = os.getsid(0) == os.getpid() == os.getpgid(0)\n'
            'print(alone)\n'
            'sys.stdout.flush()\n'
            'if alone:\n'
            '    os.killpg(os.getpgid(0), signal.SIGTERM)\n')
    done = run_python(['-c', code],
                      env=env(),
                      start_new_session=True,
                      timeout=120)
    assert (done.returncode, done.stdout) == (-signal.SIGTERM, 'True\n')
    shared = run_python(
        ['-c', 'import os; print(os.getpgid(0) == os.getpid())'],
        env=env(),
        timeout=120)
    assert (shared.returncode, shared.stdout) == (0, 'False\n')
    assert run_python([script, '4'], env=env(), timeout=120).returncode == 4
