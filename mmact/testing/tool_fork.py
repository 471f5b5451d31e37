"""Tool runs for tests, forked from a process that has imported the stack.

A test that runs ``python tools/train.py ...`` spends about half of a
seconds-long run importing torch, mmengine, mmdet, mmpretrain and mmact.
:func:`run_python` runs the same command in a process forked from a
*zygote*: a Python process, started with the command's environment, that has
done those imports and nothing else (no torch operator, so no thread pool
exists to fork), and answers each ``mmdet::`` config look-up once
(:mod:`.package_configs`). The child takes the command's working directory,
standard streams and ``sys.argv``, runs the script as ``__main__``
(``runpy``), its ``atexit`` functions, and exits with the script's code, as
the interpreter would.

A zygote serves only commands whose environment equals the one it was
started with (:data:`PER_TEST` and the call's ``per_call`` names aside):
variables read at import time (the ``MMACT_*`` switches, ``TORCH_*``,
``PYTHONWARNINGS``) then hold as in a fresh process. Another environment
starts another zygote. ``start_new_session`` puts the child in a session and
process group of its own, as ``subprocess``'s does: a signal it sends its
group (``os.killpg(0, ...)``) reaches it alone. A test of what a
fresh interpreter does (import-time output, a registry before ``import
mmact``) or of a launcher keeps ``subprocess``. ``MMACT_TEST_FORK=0`` runs
every command as a fresh process.
"""
import atexit
import contextlib
import gc
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from .package_configs import remember_package_configs

__all__ = ['run_python', 'PER_TEST', 'STACK', 'import_stack', 'serve_child']

#: Variables that change from test to test and that no import reads.
PER_TEST = ('PYTEST_CURRENT_TEST', 'PWD', 'OLDPWD')
#: Zygotes kept alive at once (the oldest is stopped).
MAX_ZYGOTES = 2

#: What the tools import: a zygote imports these and nothing else.
STACK = ('torch', 'torchvision', 'mmengine.runner', 'mmcv.ops', 'mmdet.models',
         'mmpretrain.models', 'mmact')

_SERVER = r'''
import sys
sys.path[:] = [p for p in sys.path if p not in ('', '.')]
import json, os
started = dict(os.environ)  # before mmact's own imports
from mmact.testing.tool_fork import import_stack, serve_child
import_env = import_stack(started)
out = os.fdopen(int(sys.argv[1]), 'w')
out.write('ready\n')
out.flush()
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        serve_child(request, import_env=import_env)
    out.write(json.dumps(dict(pid=pid)) + '\n')
    out.flush()
    _, status = os.waitpid(pid, 0)
    out.write(json.dumps(dict(status=os.waitstatus_to_exitcode(status))) +
              '\n')
    out.flush()
'''


def import_stack(started: Dict[str, str]) -> Dict[str, Optional[str]]:
    """Import :data:`STACK`; a package absent here is the command's to
    report, as a fresh process would.

    Args:
        started (dict): The environment the process started with.

    Returns:
        dict: What the imports did to ``os.environ`` (opencv's
        ``LD_LIBRARY_PATH``, an inductor cache folder, ...): the values
        they set, None for a variable they removed.
    """
    import importlib
    for name in STACK:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    with contextlib.suppress(ImportError):  # the same answers, once
        remember_package_configs()
    # the imports live as long as the process: out of the collector's reach,
    # a child's collections walk only what it allocates, and leave the
    # shared pages unwritten (copy-on-write)
    gc.freeze()
    return {
        k: os.environ.get(k)
        for k in set(started) | set(os.environ)
        if started.get(k) != os.environ.get(k)
    }


def serve_child(request: dict,
                fds: Optional[Sequence[int]] = None,
                import_env: Optional[Dict[str, Optional[str]]] = None) -> None:
    """In the forked child: become the requested command and exit.

    Args:
        request (dict): ``argv`` (the interpreter's arguments: ``SCRIPT
            ...``, ``-m MODULE ...``, ``-c CODE ...`` or ``- ...``), ``cwd``,
            ``env``, ``new_session`` and, unless ``fds`` is given, the paths
            of the ``stdin``, ``stdout`` and ``stderr`` files.
        fds (Sequence[int], optional): Descriptors of the standard
            streams.
        import_env (dict, optional): What the imports did to the
            environment (:func:`import_stack`), done again to the command's.
    """
    import traceback
    code = 1
    try:
        if request.get('new_session'):
            os.setsid()
        os.chdir(request['cwd'])
        os.environ.clear()
        os.environ.update(request['env'])
        for name, value in (import_env or {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if fds is None:
            modes = (('stdin', os.O_RDONLY), ('stdout', os.O_WRONLY),
                     ('stderr', os.O_WRONLY))
            fds = [os.open(request[name], mode) for name, mode in modes]
        for fd, source in enumerate(fds):
            os.dup2(source, fd)
        for source in set(fds) - {0, 1, 2}:
            os.close(source)
        _run_main(request['argv'])
        code = 0
    except SystemExit as stop:
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _run_main(argv: Sequence[str]) -> None:
    """Run ``python *argv``'s main module, with its ``sys.argv`` and
    ``sys.path[0]``."""
    import runpy
    if argv[0] in ('-c', '-'):
        sys.argv = [argv[0], *argv[2 if argv[0] == '-c' else 1:]]
        sys.path.insert(0, '')
        source = argv[1] if argv[0] == '-c' else sys.stdin.read()
        name = '<string>' if argv[0] == '-c' else '<stdin>'
        exec(compile(source, name, 'exec'), dict(__name__='__main__'))
    elif argv[0] == '-m':
        sys.argv = ['-m', *argv[2:]]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(argv[1], run_name='__main__', alter_sys=True)
    else:
        script = os.path.abspath(argv[0])
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(script))
        runpy.run_path(script, run_name='__main__')


class _Zygote:

    def __init__(self, env: Dict[str, str]):
        read, self._write_fd = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, '-c', _SERVER,
             str(self._write_fd)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd='/',
            pass_fds=(self._write_fd, ),
            text=True)
        os.close(self._write_fd)
        self.replies = read
        if self._line(None) != 'ready':
            raise RuntimeError('the tool zygote did not start: run with '
                               'MMACT_TEST_FORK=0 to see the error')

    def _line(self, timeout: Optional[float]) -> Optional[str]:
        """The next reply line, unbuffered (so that select sees what is
        left); None after ``timeout`` seconds without one."""
        line = b''
        while not line.endswith(b'\n'):
            ready, _, _ = select.select([self.replies], [], [], timeout)
            if not ready:
                return None
            byte = os.read(self.replies, 1)
            if not byte:
                return line.decode()
            line += byte
        return line.decode().strip()

    def run(self, request: dict, timeout: Optional[float]) -> int:
        self.proc.stdin.write(json.dumps(request) + '\n')
        self.proc.stdin.flush()
        pid = json.loads(self._line(None))['pid']
        reply = self._line(timeout)
        if reply is None:
            os.kill(pid, signal.SIGKILL)
            self._line(None)
            raise subprocess.TimeoutExpired(request['argv'], timeout)
        return json.loads(reply)['status']

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        os.close(self.replies)


_zygotes: Dict[str, _Zygote] = {}


def _key(env: Dict[str, str], per_call: Sequence[str]) -> str:
    return json.dumps(
        sorted((k, v) for k, v in env.items()
               if k not in PER_TEST and k not in per_call))


@atexit.register
def _stop_all() -> None:
    for zygote in _zygotes.values():
        zygote.stop()
    _zygotes.clear()


def _zygote(env: Dict[str, str], per_call: Sequence[str] = ()) -> _Zygote:
    key = _key(env, per_call)
    if key not in _zygotes:
        while len(_zygotes) >= MAX_ZYGOTES:
            _zygotes.pop(next(iter(_zygotes))).stop()
        _zygotes[key] = _Zygote(env)
    return _zygotes[key]


def run_python(args: Sequence,
               cwd: Optional[os.PathLike] = None,
               env: Optional[Dict[str, str]] = None,
               timeout: Optional[float] = None,
               input: Optional[str] = None,
               per_call: Sequence[str] = (),
               start_new_session: bool = False) -> subprocess.CompletedProcess:
    """``subprocess.run([sys.executable, *args], capture_output=True,
    text=True, ...)``, the command forked from a zygote of its environment.

    Args:
        args (Sequence): A script and its arguments, or ``'-c', code, ...``.
        cwd (PathLike, optional): Its working directory (default: this
            process's).
        env (dict, optional): Its environment (default: this process's).
        timeout (float, optional): Seconds before it is killed and
            ``subprocess.TimeoutExpired`` is raised.
        input (str, optional): Its standard input.
        per_call (Sequence[str]): Variables of ``env`` that no import
            reads (a test probe's switches, a port): commands that differ
            only in them share a zygote.
        start_new_session (bool): Run it in a new session (``setsid``),
            as ``subprocess.run(..., start_new_session=True)``.

    Returns:
        subprocess.CompletedProcess: ``returncode`` (minus the signal's
        number when one ended it), ``stdout`` and ``stderr`` as text.
    """
    argv: List[str] = [str(a) for a in args]
    env = dict(os.environ if env is None else env)
    cwd = str(cwd or os.getcwd())
    if os.environ.get('MMACT_TEST_FORK', '1') == '0':
        return subprocess.run([sys.executable, *argv],
                              cwd=cwd,
                              env=env,
                              input=input,
                              capture_output=True,
                              text=True,
                              timeout=timeout,
                              start_new_session=start_new_session)
    with tempfile.TemporaryDirectory(prefix='mmact_fork_') as tmp:
        files = {name: Path(tmp, name) for name in ('in', 'out', 'err')}
        files['in'].write_text(input or '')
        for name in ('out', 'err'):
            files[name].touch()
        request = dict(
            argv=argv,
            cwd=cwd,
            env=env,
            stdin=str(files['in']),
            stdout=str(files['out']),
            stderr=str(files['err']),
            new_session=start_new_session)
        code = _zygote(env, per_call).run(request, timeout)
        return subprocess.CompletedProcess([sys.executable, *argv], code,
                                           files['out'].read_text(),
                                           files['err'].read_text())
