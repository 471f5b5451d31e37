"""Which tests' outcomes can depend on the stack, and the check of the rule.

CI runs the suite on two stacks (torch 2.14 / Triton 3.8 / numpy 2 and
torch 2.1 / Triton 2.1 / numpy < 2, the same mmengine, mmdet, mmpretrain and
mmcv versions on both). The second run (``make test-torch2.1``) leaves out
the tests marked ``stack_independent``. The rule: a test's outcome can
depend on the stack, and it must not carry the mark, when

* its module imports a package of the stack or a part of mmact that reads
  it (:data:`STACK_MODULES`) at its top level, or the test function does
  in its body (:func:`stack_imports`); or
* while its fixtures are set up and it runs, it runs a torch operator (any
  ``aten`` operator, factories included), calls a function of numpy's
  namespace (``numpy``, ``numpy.random``, ``numpy.linalg``) or starts a
  process other than ``bash -n`` / ``make -n`` (:class:`StackUse`);
  imports aside: a module's top-level code runs in whichever test imports
  it first.

Everything else (reading docs pages, config files of the pinned mmdet /
mmpretrain, argument parsers) runs once, on the default stack.
``tests/conftest.py`` holds every marked test to the rule as it runs, and
fails it naming what it used.
"""
import ast
import functools
import inspect
import subprocess
import sys
import threading
from types import ModuleType
from typing import Callable, List, Optional

__all__ = ['STACK_MODULES', 'READ_ONLY_COMMANDS', 'stack_imports', 'StackUse']

#: Modules whose behaviour differs between the stacks: the stack's packages
#: and the parts of mmact that branch on them.
STACK_MODULES = ('torch', 'torchvision', 'triton', 'numpy', 'mmcv',
                 'mmact.compat', 'mmact.ops')
#: Commands that read files and run nothing: a shell script's syntax check
#: and make's dry run (the Makefile has no ``$(shell ...)``).
READ_ONLY_COMMANDS = (('bash', '-n'), ('make', '-n'))
# The numpy namespaces whose functions count as a use.
_NUMPY_NAMESPACES = ('numpy', 'numpy.random', 'numpy.linalg')
_MAX_USES = 5


def _is_stack_module(name: str) -> bool:
    return any(name == m or name.startswith(m + '.') for m in STACK_MODULES)


def _imported(tree: ast.AST, top_level_only: bool) -> List[str]:
    nodes = (ast.iter_child_nodes(tree) if top_level_only else ast.walk(tree))
    names = []
    for node in nodes:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.append(node.module or '')
            # ``from mmact import ops`` imports mmact.ops
            names += [f'{node.module}.{a.name}' for a in node.names]
    return names


def stack_imports(module: ModuleType,
                  function: Optional[Callable] = None) -> List[str]:
    """The modules of :data:`STACK_MODULES` a test module imports at its
    top level, and ``function`` (the test) in its body.

    Args:
        module: the test module.
        function: the test function, or None for the module alone.

    Returns:
        The imported names, in source order, each once.
    """
    found = _imported(ast.parse(inspect.getsource(module)), True)
    if function is not None:
        source = inspect.cleandoc('\n' + inspect.getsource(function))
        found += _imported(ast.parse(source), False)
    return list(dict.fromkeys(n for n in found if _is_stack_module(n)))


def _importing() -> bool:
    """Whether the caller runs inside an import: a module's top-level code,
    run once per process by whichever test imports it first, is not that
    test's use (the rule would depend on the order tests run in)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith('<frozen importlib'):
            return True
        frame = frame.f_back
    return False


class _Recorded:
    """A numpy function that records its calls and attribute reads
    (``np.add.reduce``) before it runs them."""

    def __init__(self, function, name: str, record: Callable[[str], None]):
        self._function, self._name, self._record = function, name, record
        # the function's own (numpy.ma, first imported inside, copies them)
        self.__doc__ = function.__doc__

    def __call__(self, *args, **kwargs):
        self._record(f'numpy function {self._name}')
        return self._function(*args, **kwargs)

    def __getattr__(self, attr: str):
        self._record(f'numpy function {self._name}')
        return getattr(self._function, attr)


class StackUse:
    """Records what the code run inside it uses of the stack: torch
    operators, numpy functions and started processes.

    Example:
        >>> with StackUse() as use:
        ...     parse_some_config()
        >>> use.found  # [] when nothing of the stack ran
    """

    def __init__(self) -> None:
        self.found: List[str] = []
        self._patched: list = []
        self._mode = None
        self._popen_init = None
        self._lock = threading.Lock()

    def _record(self, what: str) -> None:
        if _importing():
            return
        with self._lock:
            if what not in self.found and len(self.found) < _MAX_USES:
                self.found.append(what)

    def __enter__(self) -> 'StackUse':
        self._patch_numpy()
        self._watch_processes()
        self._watch_torch()
        return self

    def __exit__(self, *exc) -> None:
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        subprocess.Popen.__init__ = self._popen_init
        for namespace, name, value in reversed(self._patched):
            setattr(namespace, name, value)
        self._patched.clear()

    def _watch_torch(self) -> None:
        if 'torch' not in sys.modules:
            return
        from torch.utils._python_dispatch import TorchDispatchMode
        record = self._record

        class Operators(TorchDispatchMode):

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                record(f'torch operator {func}')
                return func(*args, **(kwargs or {}))

        self._mode = Operators()
        self._mode.__enter__()

    def _watch_processes(self) -> None:
        # os.system and the os.exec / spawn family are not used by tests;
        # subprocess (run, Popen, check_output) covers how they start one
        self._popen_init = init = subprocess.Popen.__init__
        record = self._record

        @functools.wraps(init)
        def watched(popen, args, *rest, **kwargs):
            words = [args] if isinstance(args, str) else [str(a) for a in args]
            if tuple(words[:2]) not in READ_ONLY_COMMANDS:
                record(f'process {" ".join(words)[:120]}')
            init(popen, args, *rest, **kwargs)

        subprocess.Popen.__init__ = watched
        # a command forked by a warm zygote (tool_fork) starts no Popen
        fork = sys.modules.get('mmact.testing.tool_fork')
        if fork is not None:
            run = fork._Zygote.run

            @functools.wraps(run)
            def forked(zygote, request, timeout):
                record(f'process (forked) {" ".join(request["argv"])[:110]}')
                return run(zygote, request, timeout)

            self._patched.append((fork._Zygote, 'run', run))
            fork._Zygote.run = forked

    def _patch_numpy(self) -> None:
        for module_name in _NUMPY_NAMESPACES:
            namespace = sys.modules.get(module_name)
            if namespace is None:
                continue
            for name, value in list(vars(namespace).items()):
                if (name.startswith('_') or isinstance(value, type)
                        or isinstance(value, ModuleType)
                        or not callable(value)):
                    continue
                self._patched.append((namespace, name, value))
                setattr(
                    namespace, name,
                    _Recorded(value, f'{module_name}.{name}', self._record))
