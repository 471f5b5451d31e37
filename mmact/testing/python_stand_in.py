"""A ``python`` for the shell scripts a test runs, served by forks of a
process that has imported the stack.

:func:`.tool_fork.run_python` forks a command the test starts itself; a
script under test (``tools/gpu/gpu_check.sh``'s dry run, a docs page's
commands) starts its own interpreters through ``$PYTHON`` or ``PATH``.
:class:`PythonStandIn` starts a *server*: a Python process, started with
the scripts' environment, that has done :func:`.tool_fork.import_stack`
and listens on a Unix socket. Its :attr:`~PythonStandIn.python` is a small
executable to put in ``PYTHON`` (or first on ``PATH``). Started as
``python SCRIPT ...``, ``python -m MODULE ...``, ``python -c CODE ...`` or
``python - ...``, it hands the server its arguments, working directory,
environment and standard streams (the descriptors themselves); the server
forks the command (:func:`.tool_fork.serve_child`) and reports its exit.
The stand-in relays the signals it receives to the command (holding those
that come before the server names it) and exits with its status, or dies
of its signal; when the stand-in is killed, the command is killed. Any
other form (options such as ``-u``), an environment that differs from the
server's in a variable other than :data:`ROUTINE` and the ``per_call``
names (variables read at import: ``MMACT_*``, ``TRITON_INTERPRET``,
``PYTHONPATH``), or no server: the stand-in ``exec``s the real
interpreter, so a script runs either way.
``MMACT_TEST_FORK=0``: :attr:`~PythonStandIn.python` is the real one.

The command's parent is the server, not the script's shell, and its process
group the server's: a signal to the script's group reaches the command
through the stand-in, not the processes the command starts. A launcher's
workers, whose parent is what they check, are started by torchrun with the
real interpreter (``sys.executable``), as is every process a command
starts itself.
"""
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .tool_fork import PER_TEST, import_stack, serve_child

__all__ = ['PythonStandIn', 'ROUTINE', 'write_stand_in']

#: Variables a shell sets for each command, which no import reads.
ROUTINE = PER_TEST + ('SHLVL', '_')

_SERVER = r'''
import os, sys
sys.path[:] = [p for p in sys.path if p not in ('', '.')]
started = dict(os.environ)  # before mmact's own imports
from mmact.testing.python_stand_in import serve
serve(started, *sys.argv[1:4], sys.argv[4:])
'''

# Stdlib only (``-I -S``: no site, no environment): it starts in
# milliseconds. The signals a script or test sends a command: relayed.
_CLIENT = r'''#!{python} -IS
# mmact.testing.python_stand_in: {python}, forked from a warm server
import json, os, signal, socket, sys
REAL, SOCKET = {python!r}, {socket!r}
RELAYED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
           signal.SIGUSR1, signal.SIGUSR2)
args = sys.argv[1:]


def real():
    signal.pthread_sigmask(signal.SIG_UNBLOCK, RELAYED)
    os.execv(REAL, [REAL, *args])


if not args or (args[0].startswith('-') and args[0] != '-'
                and (args[0] not in ('-c', '-m') or len(args) < 2)):
    real()
# held until the command's pid is known (the command may print before the
# server's reply comes), then relayed to it
signal.pthread_sigmask(signal.SIG_BLOCK, RELAYED)
conn = socket.socket(socket.AF_UNIX)
try:
    conn.connect(SOCKET)
    request = json.dumps(dict(argv=args, cwd=os.getcwd(),
                              env=dict(os.environ))).encode() + b'\n'
    socket.send_fds(conn, [request[:1]], [0, 1, 2])
    conn.sendall(request[1:])
except OSError:
    real()
replies = conn.makefile()
reply = json.loads(replies.readline() or '{{}}')
if 'pid' not in reply:
    real()
pid = reply['pid']
for sig in RELAYED:
    signal.signal(sig, lambda sig, _: os.kill(pid, sig))
signal.pthread_sigmask(signal.SIG_UNBLOCK, RELAYED)
status = json.loads(replies.readline())['status']
if status < 0:  # die of the command's signal, as the shell expects
    try:
        signal.signal(-status, signal.SIG_DFL)
    except (OSError, ValueError):  # SIGKILL, SIGSTOP: always the default
        pass
    os.kill(os.getpid(), -status)
    status = 128 - status
sys.exit(status)
'''


def write_stand_in(path: os.PathLike, socket_path: str) -> None:
    """Write an executable stand-in of this interpreter at ``path`` that
    asks the server at ``socket_path`` (the real interpreter when none
    listens there)."""
    Path(path).write_text(
        _CLIENT.format(python=sys.executable, socket=socket_path))
    os.chmod(path, 0o755)


def _differing(env: Dict[str, str], served: Dict[str, str],
               per_call: Sequence[str]) -> List[str]:
    skip = set(ROUTINE) | set(per_call)
    return sorted(
        k for k in set(env) | set(served)
        if k not in skip and env.get(k) != served.get(k))


def _read_request(conn: socket.socket) -> Tuple[dict, List[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    while not data.endswith(b'\n'):
        chunk = conn.recv(1 << 16)
        if not chunk:
            raise EOFError('the stand-in left mid-request')
        data += chunk
    return json.loads(data), fds


def _monitor(conn: socket.socket, log: str, started: Dict[str, str],
             import_env: Dict[str,
                              Optional[str]], per_call: Sequence[str]) -> None:
    """In a fork of the server, for one stand-in: fork its command (or
    refuse it), then report the command's exit; kill the command when the
    stand-in goes first."""
    request, fds = _read_request(conn)
    differ = _differing(request['env'], started, per_call)
    with open(log, 'a') as out:
        out.write(
            json.dumps(dict(argv=request['argv'], refused=differ)) + '\n')
    if differ:
        conn.sendall(json.dumps(dict(refused=differ)).encode() + b'\n')
        return
    pid = os.fork()
    if pid == 0:
        conn.close()
        serve_child(request, fds, import_env)
    for fd in fds:
        os.close(fd)
    exited, connected = os.pidfd_open(pid), _send(conn, dict(pid=pid))
    while connected and exited not in select.select([exited, conn], [], [])[0]:
        connected = not _gone(conn)
    if not connected:  # the stand-in went first
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if connected:
        _send(conn, dict(status=os.waitstatus_to_exitcode(status)))


def _send(conn: socket.socket, reply: dict) -> bool:
    """Send a reply to the stand-in; False when it is gone."""
    try:
        conn.sendall(json.dumps(reply).encode() + b'\n')
        return True
    except OSError:
        return False


def _gone(conn: socket.socket) -> bool:
    """Whether the stand-in closed its end (one killed before it read a
    reply resets the connection)."""
    try:
        return not conn.recv(1)
    except ConnectionResetError:
        return True


def serve(started: Dict[str, str], path: str, ready_fd: str, log: str,
          per_call: Sequence[str]) -> None:
    """The server's loop (:class:`PythonStandIn` starts it): import the
    stack, then one monitor process per connection.

    Args:
        started (dict): The environment the server started with.
        path (str): The socket's path.
        ready_fd (str): A descriptor to write ``ready`` to once listening.
        log (str): A file to append each request's arguments and verdict.
        per_call (Sequence[str]): Variables that may differ from the
            server's environment.
    """
    import_env = import_stack(started)
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # monitors reap themselves
    with os.fdopen(int(ready_fd), 'w') as ready:
        ready.write('ready\n')
    while True:
        conn, _ = server.accept()
        if os.fork() == 0:
            code = 1
            try:
                server.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _monitor(conn, log, started, import_env, per_call)
                code = 0
            finally:
                os._exit(code)
        conn.close()


class PythonStandIn:
    """A server and its stand-in interpreter, for one environment; a
    context manager (the server stops on exit).

    Args:
        env (dict): The environment of the scripts' interpreters, as they
            will start them (their exports included).
        folder (PathLike): Where the stand-in (``bin/python``), the request
            log and the server's output go (the socket: in a temporary
            folder).
        per_call (Sequence[str]): Variables of ``env`` that change between
            the scripts' commands and that no import reads (a port, a
            launcher's pid).
    """

    def __init__(self,
                 env: Dict[str, str],
                 folder: os.PathLike,
                 per_call: Sequence[str] = ()) -> None:
        self.folder = Path(folder)
        self._server = None
        if os.environ.get('MMACT_TEST_FORK', '1') == '0':
            self.python = sys.executable  # every command a fresh process
            self.log = self.folder / 'requests.jsonl'
            return
        (self.folder / 'bin').mkdir(parents=True, exist_ok=True)
        # a short path (a socket's is at most 107 bytes)
        self._socket_dir = tempfile.mkdtemp(prefix='mmact-python-')
        self.socket = os.path.join(self._socket_dir, 'sock')
        self.log = self.folder / 'requests.jsonl'
        self.python = str(self.folder / 'bin' / 'python')
        write_stand_in(self.python, self.socket)
        read, write = os.pipe()
        with open(self.folder / 'server.log', 'w') as errors:
            self._server = subprocess.Popen([
                sys.executable, '-c', _SERVER, self.socket,
                str(write),
                str(self.log), *per_call
            ],
                                            stdin=subprocess.DEVNULL,
                                            stdout=errors,
                                            stderr=errors,
                                            env=env,
                                            cwd='/',
                                            pass_fds=(write, ),
                                            start_new_session=True)
        os.close(write)
        with os.fdopen(read) as ready:
            if ready.readline().strip() != 'ready':
                raise RuntimeError('the python stand-in server did not start: '
                                   f'{self.folder / "server.log"}')

    def requests(self) -> List[dict]:
        """The requests so far: ``argv`` and the variables that made the
        stand-in start the real interpreter (``refused``, empty when
        forked)."""
        if not self.log.is_file():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def __enter__(self) -> 'PythonStandIn':
        return self

    def __exit__(self, *exc) -> None:
        if self._server is None:
            return
        os.killpg(self._server.pid, signal.SIGKILL)
        self._server.wait()
        shutil.rmtree(self._socket_dir, ignore_errors=True)
