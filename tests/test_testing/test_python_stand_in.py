"""mmact.testing.python_stand_in: the stand-in runs a command as the real
interpreter would (the four forms, streams, exit code, environment,
signals), forked when its environment is the server's and with the real
interpreter otherwise."""
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from mmact.testing.python_stand_in import PythonStandIn, write_stand_in

SCRIPT = textwrap.dedent('''
    import json, os, sys
    print(json.dumps(dict(argv=sys.argv, cwd=os.getcwd(), path0=sys.path[0],
                          name=__name__, stdin=sys.stdin.read(),
                          value=os.environ.get('STAND_IN_VALUE'))))
    print('to stderr', file=sys.stderr)
    sys.exit(3)
''')
# prints a line once its handler is in place, then waits for a signal
WAITS = textwrap.dedent('''
    import os, signal, sys, time
    if sys.argv[1] == 'handled':
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
    print(os.getpid(), flush=True)
    time.sleep(120)
''')


@pytest.fixture(scope='module')
def stand_in(tmp_path_factory):
    folder = tmp_path_factory.mktemp('stand_in')
    (folder / 'tool.py').write_text(SCRIPT)
    (folder / 'waits.py').write_text(WAITS)
    (folder / 'pkg').mkdir()
    (folder / 'pkg' / '__main__.py').write_text(SCRIPT)
    (folder / 'pkg' / '__init__.py').write_text('')
    env = dict(os.environ, STAND_IN_VALUE='served')
    with PythonStandIn(env, folder / 'server', per_call=('PER_CALL', )) as s:
        s.env, s.dir = env, folder
        yield s


def run(python, args, env, cwd, stdin='in'):
    return subprocess.run([python, *args],
                          cwd=cwd,
                          env=env,
                          input=stdin,
                          capture_output=True,
                          text=True,
                          timeout=120)


@pytest.mark.parametrize('form', ['script', '-m', '-c', '-'])
def test_each_form_as_the_real_interpreter(stand_in, form):
    args = {
        'script': [str(stand_in.dir / 'tool.py'), 'a b', 'c'],
        '-m': ['-m', 'pkg', 'a b', 'c'],
        '-c': ['-c', SCRIPT, 'a b', 'c'],
        '-': ['-', 'a b', 'c'],
    }[form]
    stdin = SCRIPT if form == '-' else 'in'
    served = run(stand_in.python, args, stand_in.env, stand_in.dir, stdin)
    real = run(sys.executable, args, stand_in.env, stand_in.dir, stdin)
    assert served.returncode == real.returncode == 3
    assert served.stderr == real.stderr == 'to stderr\n'
    assert served.stdout == real.stdout
    assert json.loads(served.stdout)['value'] == 'served'
    assert stand_in.requests()[-1] == dict(argv=args, refused=[])


def test_imports_change_the_environment_as_in_a_fresh_process(stand_in):
    code = ('import json, os; from mmact.testing import tool_fork; '
            'tool_fork.import_stack(dict(os.environ)); '
            'print(json.dumps(dict(os.environ)))')
    served = run(stand_in.python, ['-c', code], stand_in.env, stand_in.dir)
    real = run(sys.executable, ['-c', code], stand_in.env, stand_in.dir)
    assert stand_in.requests()[-1]['refused'] == []
    assert json.loads(served.stdout) == json.loads(real.stdout)


def test_another_environment_runs_the_real_interpreter(stand_in):
    script = [str(stand_in.dir / 'tool.py')]
    other = dict(stand_in.env, STAND_IN_VALUE='other', PER_CALL='1')
    out = run(stand_in.python, script, other, stand_in.dir)
    assert json.loads(out.stdout)['value'] == 'other'
    assert stand_in.requests()[-1]['refused'] == ['STAND_IN_VALUE']
    # a per-call variable alone: forked, with the command's value
    code = 'import os; print(os.environ["PER_CALL"])'
    per_call = dict(stand_in.env, PER_CALL='2')
    assert run(stand_in.python, ['-c', code], per_call,
               stand_in.dir).stdout == '2\n'
    assert stand_in.requests()[-1]['refused'] == []
    # an option of the interpreter's: the real one, not asked
    count = len(stand_in.requests())
    assert run(stand_in.python, ['-u', *script], stand_in.env,
               stand_in.dir).returncode == 3
    assert len(stand_in.requests()) == count


def _waiting(stand_in, how):
    proc = subprocess.Popen(
        [stand_in.python, str(stand_in.dir / 'waits.py'), how],
        env=stand_in.env,
        stdout=subprocess.PIPE,
        text=True)
    pid = int(proc.stdout.readline())
    assert pid != proc.pid  # forked by the server
    return proc, pid


def _assert_ends(pid):
    """The command ``pid`` ends within 30 s (its stand-in is gone)."""
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    pytest.fail(f'the command {pid} outlived its stand-in')


@pytest.mark.parametrize('how,code', [('handled', 7),
                                      ('default', -signal.SIGTERM)])
def test_signals_reach_the_command(stand_in, how, code):
    proc, _ = _waiting(stand_in, how)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == code


def test_a_signal_before_the_servers_reply_is_relayed(tmp_path):
    """A signal that reaches the stand-in before the server's reply names
    the command (which may already run and print) is held, then relayed to
    the command; the stand-in exits with the command's status."""
    path = str(tmp_path / 'server.sock')
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
    python = tmp_path / 'python'
    write_stand_in(python, path)
    command = subprocess.Popen(
        [sys.executable, '-c', 'import time; time.sleep(60)'])
    client = subprocess.Popen([str(python), '-c', 'pass'])
    conn, _ = server.accept()
    _, fds, _, _ = socket.recv_fds(conn, 1, 3)  # the streams: unused here
    for fd in fds:
        os.close(fd)
    client.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert client.poll() is None  # held, not the stand-in's death
    conn.sendall(json.dumps(dict(pid=command.pid)).encode() + b'\n')
    assert command.wait(timeout=30) == -signal.SIGTERM
    conn.sendall(json.dumps(dict(status=3)).encode() + b'\n')
    assert client.wait(timeout=30) == 3
    conn.close()
    server.close()


def test_a_killed_stand_in_takes_the_command_with_it(stand_in):
    proc, pid = _waiting(stand_in, 'default')
    proc.kill()
    proc.wait(timeout=60)
    _assert_ends(pid)


def test_a_stand_in_gone_before_the_reply_takes_the_command(stand_in):
    """A stand-in killed before it read the server's reply (its end resets
    the connection) takes the command with it too."""
    out_r, out_w = os.pipe()
    conn = socket.socket(socket.AF_UNIX)
    conn.connect(stand_in.socket)
    request = json.dumps(
        dict(
            argv=[str(stand_in.dir / 'waits.py'), 'default'],
            cwd=str(stand_in.dir),
            env=stand_in.env)).encode() + b'\n'
    socket.send_fds(conn, [request[:1]], [0, out_w, 2])
    conn.sendall(request[1:])
    os.close(out_w)
    with os.fdopen(out_r) as out:
        pid = int(out.readline())
    time.sleep(0.5)  # the reply arrives, unread
    conn.close()
    _assert_ends(pid)


def test_no_server_runs_the_real_interpreter(tmp_path):
    python = tmp_path / 'python'
    write_stand_in(python, str(tmp_path / 'no_server'))
    code = 'import sys; print(sys.argv)'
    out = run(python, ['-c', code, 'x'], dict(os.environ), tmp_path)
    assert out.stdout == "['-c', 'x']\n"
