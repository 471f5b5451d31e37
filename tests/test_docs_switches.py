"""What the pages state about the code's switches, held to the code (read
from its source by :mod:`mmact.testing.code_switches`):

- every environment variable of mmact's own (``MMACT_*``, ``GPU_CHECK_*``)
  a page names is one the code reads, or a macro of its C++ sources;
- every ``NAME=value`` and ``$NAME`` names a variable the code reads or one
  of :data:`EXTERNAL_ENV` (with what reads it), and mmact's own take the
  value (:data:`ACCEPTS`: the code's own check where it has one);
- where a switch needs another, the page names both (:data:`NEEDS`);
- every ``--option`` of a code span is one of the tool the span names (its
  ``argparse`` parser) or of :data:`EXTERNAL_OPTIONS`;
- every default a page states (`` `name` (default 1.0) ``,
  `` `name=value` (default) ``) is the code's: :data:`DEFAULTS` says where
  the code sets it, the code's reads find the rest.

Each finding names the page, the line and what the code has.
"""
import ast
import contextlib
import functools
import os
import re
from pathlib import Path
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional

import pytest

from mmact.testing.code_switches import environment_reads, tool_options
from mmact.testing.doc_blocks import (SHELL_LANGUAGES, doc_pages,
                                      shell_commands)

REPO = Path(__file__).resolve().parents[1]
#: the prefixes of mmact's own environment variables
OWN = ('MMACT_', 'GPU_CHECK_')
#: variables the pages set for other programs -> what reads them
EXTERNAL_ENV = {
    'ATEN_CPU_CAPABILITY': "torch: the vector ISA of its CPU kernels",
    'FORCE_CUDA': "mmcv's setup.py: build the CUDA ops",
    'MMCV_WITH_OPS': "mmcv's setup.py: build the compiled ops",
    'MALLOC_MMAP_THRESHOLD_': 'glibc malloc',
    'MALLOC_TOP_PAD_': 'glibc malloc',
    'MALLOC_TRIM_THRESHOLD_': 'glibc malloc',
}
#: options of other programs the pages name
EXTERNAL_OPTIONS = {
    'pip': {
        '--no-binary', '--no-build-isolation', '--no-cache-dir', '--no-deps',
        '--index-url', '--target'
    },
    'pytest': {'--dist', '--durations'},
    'torchrun': {'--max-restarts', '--rdzv-id', '--nproc_per_node'},
    'srun': {'--signal'},
    'mim': {'--model'},
    # the authors' training scripts (GitHub kostas1515/AGLU)
    'AGLU': {'--bias-weight-decay', '--lr', '--classif_norm'},
}
#: a launcher -> the tool it runs (the options are the tool's)
LAUNCHED = {
    'dist_train.sh': 'tools/train.py',
    'slurm_train.sh': 'tools/train.py',
    'dist_test.sh': 'tools/test.py',
    'slurm_test.sh': 'tools/test.py',
}


class Statement(NamedTuple):
    """A code span of a page, or a command of its shell blocks.

    Attributes:
        page (str): The page.
        line (int): Its line.
        text (str): The span or the command.
        unit (str): The paragraph, table row or command it is part of.
        command (bool): A command of a shell block.
    """
    page: str
    line: int
    text: str
    unit: str
    command: bool = False

    @property
    def where(self) -> str:
        return f'{self.page}:{self.line}'


_FENCE = re.compile(r'^```(\w*)[^\n]*\n.*?^```', re.M | re.S)
_SPAN = re.compile(r'`([^`\n]+)`')
_ENV = re.compile(r'(?<![\w$/.-])(?P<dollar>\$\{?)?'
                  r'(?P<name>[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+_?)\}?'
                  r'(?:=(?P<value>"[^"]*"|\'[^\']*\'|[^\s`;,)]*))?')
_OPTION = re.compile(r'(?<![\w-])--[a-z][\w-]*')


def statements(page: str, text: str) -> List[Statement]:
    """The code spans of ``text``'s prose, each with its paragraph (a table
    row: the row), and the commands of its shell blocks."""
    found = []
    prose = _FENCE.sub(lambda m: '\n' * m.group(0).count('\n'), text)
    for paragraph in re.finditer(r'(?:[^\n]+\n?)+', prose):
        start = paragraph.start()
        for row in ([paragraph.group(0)]
                    if not paragraph.group(0).startswith('|') else
                    paragraph.group(0).splitlines(keepends=True)):
            for span in _SPAN.finditer(row):
                line = prose.count('\n', 0, start + span.start()) + 1
                found.append(Statement(page, line, span.group(1), row))
            start += len(row)
    for block in _FENCE.finditer(text):
        if block.group(1) not in SHELL_LANGUAGES:
            continue
        line = text.count('\n', 0, block.start()) + 1
        body = block.group(0).split('\n', 1)[1]
        for command in shell_commands(body):
            words = [f'{k}={v}' for k, v in command.env.items()]
            words += command.argv
            offset = body[:body.find(words[0])].count('\n') + 1
            found.append(
                Statement(page, line + offset, ' '.join(words),
                          ' '.join(words), True))
    return found


@functools.lru_cache(maxsize=None)
def page_statements() -> List[Statement]:
    pages = doc_pages(REPO) + sorted(REPO.glob('projects/*/README.md'))
    return [
        s for page in pages for s in statements(
            page.relative_to(REPO).as_posix(), page.read_text())
    ]


@functools.lru_cache(maxsize=None)
def code_reads() -> Dict[str, list]:
    return environment_reads(REPO)


@functools.lru_cache(maxsize=None)
def code_options() -> Dict[str, Dict[str, Optional[str]]]:
    return tool_options(REPO)


def _macros() -> set:
    return {
        m
        for path in (REPO / 'mmact/ops/csrc').glob('*')
        for m in re.findall(r'^#\s*define\s+(\w+)', path.read_text(), re.M)
    }


def unknown_variables(found: List[Statement], reads: Dict,
                      macros: set) -> Dict[str, str]:
    """``page:line`` -> the variable a page names that nothing reads."""
    wrong = {}
    own = sorted(n for n in reads if n.startswith(OWN))
    for s in found:
        for m in _ENV.finditer(s.text):
            name = m['name']
            named = name.startswith(
                OWN) or m['value'] is not None or m['dollar'] is not None
            if not named or name in reads or name in EXTERNAL_ENV or (
                    name.startswith(OWN) and name in macros):
                continue
            wrong[s.where] = (f'{name}: the code reads no such variable' +
                              (f' (it reads {own})' if name.startswith(OWN)
                               else ' (or add it to EXTERNAL_ENV)'))
    return wrong


def _set_environment(values: Dict[str, Optional[str]]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@contextlib.contextmanager
def _environment(**values: Optional[str]) -> Iterator[None]:
    """``os.environ`` with ``values`` set (None: unset), restored after."""
    old = {k: os.environ.get(k) for k in values}
    try:
        _set_environment(values)
        yield
    finally:
        _set_environment(old)


def _backends_take(name: str) -> Callable[[str], Optional[str]]:
    """The check :func:`mmact.ops.backends.configure_from_env` makes of
    ``name``'s value (a setting this machine cannot run is a value it
    takes)."""

    def check(value: str) -> Optional[str]:
        from mmact.ops import backends
        with backends.using(), _environment(**{name: value}):
            try:
                backends.configure_from_env()
            except ValueError as error:
                return str(error)
            except RuntimeError:
                pass
        return None

    return check


def _one_of(values: Callable[[], List[str]],
            several: bool = False) -> Callable[[str], Optional[str]]:
    """A value of ``values()`` (with ``several``: words that each are)."""

    def check(value: str) -> Optional[str]:
        taken = values()
        given = value.split() if several else [value]
        ok = given and all(v in taken for v in given)
        return None if ok else f'the code takes {taken}'

    return check


def _any(value: str) -> Optional[str]:
    return None


def _cpu_isas() -> List[str]:
    from mmact.ops import cpu_build
    return list(cpu_build.ISAS)


def _setup_env_stacks() -> List[str]:
    script = (REPO / 'tools/setup_env.sh').read_text()
    cases = script[script.index('case "$STACK" in'):script.index('esac')]
    return [s for s in re.findall(r'^\s+([\w.]+)\)', cases, re.M)]


def _gpu_check_parts() -> List[str]:
    script = (REPO / 'tools/gpu/gpu_check.sh').read_text()
    table = script[script.index('PART_TABLE=('):]
    return re.findall(r'^\s+"(\w+) \w+"$', table[:table.index('\n)')], re.M)


def _gpu_check_dry_run() -> List[str]:
    script = (REPO / 'tools/gpu/gpu_check.sh').read_text()
    return re.findall(r'GPU_CHECK_DRY_RUN:-\}" == (\w+)', script)


def _test_fork_off() -> List[str]:
    source = (REPO / 'mmact/testing/tool_fork.py').read_text()
    return re.findall(r"'MMACT_TEST_FORK', '\w+'\) == '(\w+)'", source)


def _device(value: str) -> Optional[str]:
    import torch
    try:
        torch.device(value)
    except RuntimeError as error:
        return str(error)
    return None


#: mmact's variables -> the check of a value a page gives (None: taken)
ACCEPTS: Dict[str, Callable[[str], Optional[str]]] = {
    'MMACT_TRITON': _backends_take('MMACT_TRITON'),
    'MMACT_DISABLE_CPU_KERNEL': _backends_take('MMACT_DISABLE_CPU_KERNEL'),
    'MMACT_COMPOSITE': _backends_take('MMACT_COMPOSITE'),
    'MMACT_CUDA_KERNELS': _backends_take('MMACT_CUDA_KERNELS'),
    'MMACT_CPU_ISA': _one_of(_cpu_isas),
    'MMACT_STACK': _one_of(_setup_env_stacks),
    'MMACT_TEST_DEVICE': _device,
    'MMACT_DEBUG': _any,
    'MMACT_TEST_FORK': _one_of(_test_fork_off),
    'MMACT_CACHE_DIR': _any,
    'MMACT_VENV': _any,
    'MMACT_WHEELS': _any,
    'GPU_CHECK_DRY_RUN': _one_of(_gpu_check_dry_run),
    'GPU_CHECK_PARTS': _one_of(_gpu_check_parts, several=True),
}


def refused_values(found: List[Statement], reads: Dict) -> Dict[str, str]:
    """``page:line`` -> a value a page gives one of mmact's variables that
    the code refuses (with the values it takes)."""
    wrong = {}
    for s in found:
        for m in _ENV.finditer(s.text):
            name, value = m['name'], (m['value'] or '').strip('"\'')
            if m['value'] is None or name not in reads or value in ('...', ''):
                continue
            if name not in ACCEPTS:
                if name.startswith(OWN):
                    wrong[s.where] = (f'{name}={value}: no check of its '
                                      'values; add it to ACCEPTS')
                continue
            refusal = ACCEPTS[name](value)
            if refusal:
                wrong[s.where] = f'{name}={value}: {refusal}'
    return wrong


#: ``NAME=value`` -> the variable the code needs with it
NEEDS = {'MMACT_TRITON=1': 'TRITON_INTERPRET=1'}


def missing_companions(found: List[Statement]) -> Dict[str, str]:
    """``page:line`` -> a switch stated without the one it needs in the
    same paragraph, table row or command (a row of ``MMACT_TRITON`` that
    describes its value ``1`` states ``MMACT_TRITON=1``)."""
    wrong = {}
    for s in found:
        for switch, needed in NEEDS.items():
            name, value = switch.split('=')
            states = s.text == switch or re.search(
                rf'(?<![\w$]){switch}(?!\w)',
                s.text) or (s.text == name and s.unit.startswith('|')
                            and f'`{value}`' in s.unit)
            if states and needed not in s.unit:
                wrong[s.where] = f'{switch} needs {needed}: say so there'
    return wrong


def _program(words: List[str]) -> Optional[str]:
    """The tool (a Python file) or other program a span runs."""
    options = code_options()
    for i, word in enumerate(words):
        if word == '-m' and i + 1 < len(words):
            module = words[i + 1].replace('.', '/') + '.py'
            return module if module in options else words[i + 1]
        if word.endswith('.py'):
            if word in options:
                return word
            named = [p for p in options if p.endswith('/' + word)]
            return named[0] if len(named) == 1 else word
        if word.rsplit('/', 1)[-1] in LAUNCHED:
            return LAUNCHED[word.rsplit('/', 1)[-1]]
        if word in EXTERNAL_OPTIONS:
            return word
    return None


def unknown_options(found: List[Statement]) -> Dict[str, str]:
    """``page:line`` -> an option of a code span that the tool it names
    (or, without one, no tool and no other program) has."""
    options = code_options()
    everything = {o for opts in options.values() for o in opts}
    everything |= {o for opts in EXTERNAL_OPTIONS.values() for o in opts}
    wrong = {}
    for s in found:
        if s.command:  # test_docs_commands runs the tool's own parser
            continue
        named = _OPTION.findall(s.text)
        if not named:
            continue
        program = _program(s.text.split())
        has = options.get(program, EXTERNAL_OPTIONS.get(program))
        if has is None and program is not None:
            wrong[s.where] = f'{program}: no such tool'
            continue
        for option in named:
            if option not in (everything if has is None else has):
                wrong[s.where] = (f'{option}: no option of '
                                  f'{program or "any tool"}' +
                                  (f' (it has {sorted(has)})' if has else ''))
    return wrong


def _literal(path: Path, node: ast.AST) -> object:
    """A default's value: a literal, or a module constant of ``path`` or of
    the module it imports the name from."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        if not isinstance(node, ast.Name):
            raise
    for stmt in ast.parse(path.read_text()).body:
        if isinstance(stmt, ast.Assign) and any(
                getattr(t, 'id', None) == node.id for t in stmt.targets):
            return _literal(path, stmt.value)
        if isinstance(stmt, ast.ImportFrom) and stmt.level and any(
                a.name == node.id for a in stmt.names):
            base = path.parents[stmt.level - 1]
            return _literal(base / (stmt.module.replace('.', '/') + '.py'),
                            node)
    raise LookupError(f'{path}: no constant {node.id}')


def _parameter(path: str, owner: str, name: str) -> Callable[[], object]:
    """The default of parameter ``name`` of function or class ``owner`` of
    ``path`` (a class's ``__init__``, or a base class's of that file),
    read from the source."""

    def default():
        tree = ast.parse((REPO / path).read_text())
        defs = {
            n.name: n
            for n in tree.body
            if isinstance(n, (ast.ClassDef, ast.FunctionDef))
        }
        todo = [owner]
        while todo:
            node = defs[todo.pop(0)]
            functions = [node] if isinstance(node, ast.FunctionDef) else [
                n for n in node.body
                if isinstance(n, ast.FunctionDef) and n.name == '__init__'
            ]
            for function in functions:
                args = function.args
                positional = args.args[len(args.args) - len(args.defaults):]
                pairs = list(zip(positional, args.defaults)) + list(
                    zip(args.kwonlyargs, args.kw_defaults))
                for arg, value in pairs:
                    if arg.arg == name:
                        return _literal(REPO / path, value)
            if isinstance(node, ast.ClassDef):
                todo += [
                    b.id for b in node.bases
                    if isinstance(b, ast.Name) and b.id in defs
                ]
        raise LookupError(f'{path}: {owner} has no parameter {name}')

    return default


def _dict_default(path: str, key: str) -> Callable[[], object]:
    """The default of ``.get(key, d)`` / ``.pop(key, d)`` in ``path``."""

    def default():
        tree = ast.parse((REPO / path).read_text())
        [value] = {
            ast.literal_eval(node.args[1])
            for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr in (
                'get', 'pop') and len(node.args) == 2 and isinstance(
                    node.args[0], ast.Constant) and node.args[0].value == key
        }
        return value

    return default


def _unset_cache_dir() -> str:
    from mmact.ops.cpu_build import default_cache_dir
    with _environment(MMACT_CACHE_DIR=None):
        return default_cache_dir()


def _shell_default(name: str) -> Callable[[], object]:

    def default():
        [value] = {r.default for r in code_reads()[name] if r.default}
        return value

    return default


#: a name whose default a page states -> the code's default
DEFAULTS: Dict[str, Callable[[], object]] = {
    '$MMACT_CACHE_DIR':
    _unset_cache_dir,
    'tolerance':
    _parameter('mmact/models/utils/swap.py', 'swap_activations', 'tolerance'),
    'num_parameters':
    _parameter('mmact/models/activations/apa.py', 'AGLU', 'num_parameters'),
    'sigma':
    _parameter('mmact/models/activations/iglu.py', 'IGLU', 'sigma'),
    'mlp_layout':
    _parameter('mmact/models/activations/fles.py', 'FleS', 'mlp_layout'),
    'recompute_act':
    _parameter('mmact/models/backbones/act_res_backbone.py', 'ActResNetMixin',
               'recompute_act'),
    'paramwise_cfg.activation_decay_mult':
    _dict_default('mmact/engine/optimizers/activation_constructor.py',
                  'activation_decay_mult'),
    # dist_train.sh's MAX_RESTARTS, passed to torchrun's --max-restarts
    '--max-restarts':
    _shell_default('MAX_RESTARTS'),
}
_VALUE = r'(?:`[^`\n]+`|\*\*[^*\n]+\*\*|-?\d[\w.+-]*|True|False|None)'
#: `` `name` (default VALUE`` / `` `name`, default VALUE``
_NAME_THEN_DEFAULT = re.compile(r'`(?P<name>[^`\n]+)`[^`.;:\n]{0,25}?'
                                r'\bdefault:?\s+(?P<value>' + _VALUE + ')')
#: `` `name=value` (default)`` / `` by default (`name=value` ``
_ASSIGNED_DEFAULT = re.compile(
    r'`(?P<name>[\w.$-]+)=(?P<value>[^`\n]+)`\s*\((?:the\s+)?default\b'
    r'|\bby default\s+\(`(?P<name2>[\w.$-]+)=(?P<value2>[^`\n]+)`')


def stated_defaults(text: str) -> Iterator[tuple]:
    """``(line, name, value)`` of every default a page states."""
    prose = _FENCE.sub(lambda m: '\n' * m.group(0).count('\n'), text)
    for m in _NAME_THEN_DEFAULT.finditer(prose):
        yield prose.count('\n', 0, m.start()) + 1, m['name'], m['value']
    for m in _ASSIGNED_DEFAULT.finditer(prose):
        yield (prose.count('\n', 0, m.start()) + 1, m['name']
               or m['name2'], m['value'] or m['value2'])


def _code_default(name: str) -> Callable[[], object]:
    """Where the code sets ``name``'s default: :data:`DEFAULTS`, else the
    one default the code's reads of that variable or option give."""
    if name in DEFAULTS:
        return DEFAULTS[name]
    variable = name.lstrip('$')
    found = {r.default for r in code_reads().get(variable, []) if r.default}
    found |= {
        opts[name]
        for opts in code_options().values() if opts.get(name) is not None
    }
    if len(found) == 1:
        return lambda: found.copy().pop()
    raise LookupError(f'no single place in the code sets the default of '
                      f'{name} ({sorted(found)}): add it to DEFAULTS')


def _same(stated: str, code: object) -> bool:
    stated = stated.strip('`*').strip().strip('\'"')
    try:
        return float(stated) == float(code)
    except (TypeError, ValueError):
        return stated == str(code) or os.path.expanduser(stated) == str(code)


def wrong_defaults(page: str, text: str) -> Dict[str, str]:
    """``page:line`` -> a default the page states that is not the code's,
    with the code's."""
    wrong = {}
    for line, name, value in stated_defaults(text):
        try:
            code = _code_default(name)()
        except LookupError as error:
            wrong[f'{page}:{line}'] = str(error)
            continue
        if not _same(value, code):
            wrong[f'{page}:{line}'] = (f'{name}: the page says {value}, the '
                                       f"code's default is {code!r}")
    return wrong


def test_wrong_switches_options_and_defaults_are_found():
    """A page that names a variable nothing reads, gives one a value the
    code refuses, states a switch without the one it needs, names an
    option its tool lacks or a default the code does not have fails with
    the page, the line and what the code has."""
    page = ('Set `MMACT_TRITONN=1` or `MMACT_TRITON=2`; `MMACT_TRITON=1` '
            'runs on the CPU.\n\n'
            '`tools/train.py --ampp` trains, `MMACT_HD` is a macro.\n'
            '`tolerance` (default 0.05), `sigma` (default 1.0);\n'
            '`SIGNAL_LEAD` (default 60).\n')
    found = statements('docs/x.md', page)
    reads = code_reads()
    assert unknown_variables(found, reads, _macros()) == {
        'docs/x.md:1':
        'MMACT_TRITONN: the code reads no such variable (it reads '
        f'{sorted(n for n in reads if n.startswith(OWN))})'
    }
    refused = refused_values(found, reads)
    assert list(refused) == ['docs/x.md:1']
    assert refused['docs/x.md:1'].startswith("MMACT_TRITON=2: MMACT_TRITON="
                                             "'2': use 1")
    assert missing_companions(found) == {
        'docs/x.md:1': 'MMACT_TRITON=1 needs TRITON_INTERPRET=1: say so there'
    }
    wrong = unknown_options(found)
    assert list(wrong) == ['docs/x.md:3']
    assert wrong['docs/x.md:3'].startswith(
        "--ampp: no option of tools/train.py (it has ['--amp',")
    assert wrong_defaults('docs/x.md', page) == {
        'docs/x.md:4':
        "tolerance: the page says 0.05, the code's default is "
        '0.01',
        'docs/x.md:5':
        "SIGNAL_LEAD: the page says 60, the code's default "
        "is '90'",
    }


def test_pages_name_the_variables_the_code_reads():
    found = page_statements()
    assert len(found) > 1000
    assert unknown_variables(found, code_reads(), _macros()) == {}


def test_pages_give_values_the_code_takes():
    assert refused_values(page_statements(), code_reads()) == {}


def test_switches_that_need_another_say_so():
    assert missing_companions(page_statements()) == {}


def test_each_needed_switch_is_what_the_code_asks_for(monkeypatch):
    """Without its companion the code refuses the switch, naming the
    companion (on any Triton: the interpreter's availability is the
    machine's, not the page's)."""
    from mmact.ops import backends
    monkeypatch.setattr(backends, 'triton_version', lambda: (3, 0))
    monkeypatch.setattr(backends, 'triton_interpreter_available', lambda: True)
    for switch, needed in NEEDS.items():
        name, value = switch.split('=')
        without = {name: value, needed.split('=')[0]: None}
        with backends.using(), _environment(**without):
            with pytest.raises(RuntimeError, match=needed):
                backends.configure_from_env()
        with backends.using(), _environment(
                **dict(without, **dict([needed.split('=')]))):
            backends.configure_from_env()


def test_pages_name_options_their_tools_have():
    assert unknown_options(page_statements()) == {}


def test_pages_state_the_code_defaults():
    pages = doc_pages(REPO) + sorted(REPO.glob('projects/*/README.md'))
    wrong = {}
    for page in pages:
        wrong.update(
            wrong_defaults(
                page.relative_to(REPO).as_posix(), page.read_text()))
    assert wrong == {}


def test_registries_name_what_the_code_reads():
    """No entry outlives the code it describes."""
    reads = code_reads()
    assert set(ACCEPTS) - set(reads) == set()
    assert set(EXTERNAL_ENV) & set(reads) == set(), 'the code reads them'
    for name, default in DEFAULTS.items():
        default()  # the code still sets it where the entry says
