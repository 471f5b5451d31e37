"""The switches the code reads, from its source (no import): environment
variables read by Python (``os.environ`` / ``os.getenv``) and by the shell
scripts (``$NAME``, ``${NAME:-default}``), and the options of each
``argparse`` tool, with their defaults. The docs tests hold the pages to
them."""
import ast
import re
from pathlib import Path
from typing import Dict, Iterator, List, NamedTuple, Optional, Set, Tuple

__all__ = [
    'Read', 'environment_reads', 'tool_options', 'CODE_ROOTS', 'NO_DEFAULT'
]

#: Where the code that reads switches lives (tests read some too).
CODE_ROOTS = ('mmact', 'tools', 'tests', 'projects', 'Makefile', '.ci',
              'setup.py')
#: The default of a read that has none (``os.environ['X']``, ``$X``).
NO_DEFAULT = None
_SHELL_READ = re.compile(  # $NAME, ${NAME:-default}, make's $(NAME)
    r'\$[{(]?(?P<name>[A-Z_][A-Z0-9_]*)'
    r'(?:(?P<op>:?[-=+?])(?P<default>[^})]*))?')


class Read(NamedTuple):
    """Where the code reads a switch.

    Attributes:
        path (str): The file, relative to the repository root.
        line (int): Its line.
        default (str, optional): The value it takes when the switch is
            unset, as written in the code (a Python literal evaluated;
            other expressions as their source), or None.
    """
    path: str
    line: int
    default: Optional[str]


def _files(root: Path, suffixes: Tuple[str, ...],
           containing: str) -> Iterator[Tuple[str, str]]:
    for name in CODE_ROOTS:
        top = root / name
        found = [top] if top.is_file() else sorted(
            p for p in top.rglob('*') if p.is_file()) if top.is_dir() else []
        for path in found:
            if '__pycache__' in path.parts or not (path.suffix in suffixes or
                                                   (not path.suffix
                                                    and '' in suffixes)):
                continue
            text = path.read_text(errors='replace')
            if containing in text:
                yield path.relative_to(root).as_posix(), text


def _value(node: Optional[ast.AST]) -> Optional[str]:
    """A default as a string: a literal's value, else its source."""
    if node is None:
        return NO_DEFAULT
    try:
        return str(ast.literal_eval(node))
    except ValueError:
        return ast.unparse(node)


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute)
            and node.attr == 'environ') or (isinstance(node, ast.Name)
                                            and node.id == 'environ')


def _env_calls(
        nodes: List[ast.AST]
) -> Iterator[Tuple[ast.AST, Optional[ast.AST], int]]:
    """``(name node, default node, line)`` of every environment read."""
    for node in nodes:
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            getter = isinstance(func, ast.Attribute) and (
                (func.attr in ('get', 'setdefault', 'pop')
                 and _is_environ(func.value)) or func.attr == 'getenv')
            if getter:
                default = node.args[1] if len(node.args) > 1 else None
                yield node.args[0], default, node.lineno
        elif isinstance(node, ast.Subscript) and _is_environ(node.value):
            yield node.slice, None, node.lineno
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and \
                isinstance(node.ops[0], (ast.In, ast.NotIn)) and \
                _is_environ(node.comparators[0]):
            yield node.left, None, node.lineno


def _constants(tree: ast.AST) -> Dict[str, str]:
    """A module's names of string constants (``TRUST_FLAG =
    '--trust-checkpoint'``)."""
    return {
        target.id: node.value.value
        for node in getattr(tree, 'body', [])
        if isinstance(node, ast.Assign) and isinstance(
            node.value, ast.Constant) and isinstance(node.value.value, str)
        for target in node.targets if isinstance(target, ast.Name)
    }


def _python_reads(path: str, text: str) -> Iterator[Tuple[str, Read]]:
    tree = ast.parse(text)
    constants = _constants(tree)
    nodes = list(ast.walk(tree))
    functions = [n for n in nodes if isinstance(n, ast.FunctionDef)]
    loops: Dict[str, List[str]] = {}  # for NAME in ('A', 'B'): ...
    for node in nodes:
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) \
                and isinstance(node.iter, (ast.Tuple, ast.List)):
            loops[node.target.id] = [
                e.value for e in node.iter.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            ]
    readers: Dict[str, int] = {}  # function -> index of its name argument
    for name, default, line in _env_calls(nodes):
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            yield name.value, Read(path, line, _value(default))
        elif isinstance(name, ast.Name) and name.id in constants:
            yield constants[name.id], Read(path, line, _value(default))
        elif isinstance(name, ast.Name):
            for value in loops.get(name.id, []):
                yield value, Read(path, line, _value(default))
            for func in functions:
                params = [a.arg for a in func.args.args]
                if name.id in params and any(
                        n is name for n in ast.walk(func)):
                    readers[func.name] = params.index(name.id)
    for node in nodes if readers else []:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in readers:
            index = readers[node.func.id]
            if len(node.args) > index and isinstance(node.args[index],
                                                     ast.Constant):
                yield node.args[index].value, Read(path, node.lineno,
                                                   NO_DEFAULT)


def environment_reads(root: Path) -> Dict[str, List[Read]]:
    """Environment variable -> where the code reads it.

    Python reads are ``os.environ.get(NAME, default)``, ``os.getenv``,
    ``os.environ[NAME]``, ``NAME in os.environ``, a loop of such reads over
    a tuple of names, and a call of a function that reads the name its
    argument gives; shell reads (``.sh``, the Makefile, CI's script) are
    ``$NAME``, ``${NAME...}`` (``${NAME:-default}`` with its default) and
    make's ``$(NAME)``.

    Args:
        root (Path): The repository root.
    """
    reads: Dict[str, List[Read]] = {}
    for path, text in _files(root, ('.py', ), 'environ'):
        for name, read in _python_reads(path, text):
            reads.setdefault(name, []).append(read)
    for path, text in _files(root, ('.sh', ''), '$'):
        for m in _SHELL_READ.finditer(text):
            default = m['default'] if m['op'] in (':-', '-', ':=',
                                                  '=') else NO_DEFAULT
            line = text.count('\n', 0, m.start()) + 1
            reads.setdefault(m['name'], []).append(Read(path, line, default))
    return reads


def _options_of(tree: ast.AST) -> Dict[str, Dict[str, Optional[str]]]:
    """Enclosing function ('' for module level) -> option -> default, of
    every ``add_argument`` call of a module."""
    found: Dict[str, Dict[str, Optional[str]]] = {}
    constants = _constants(tree)
    scopes: List[Tuple[str, ast.AST]] = [('', tree)] + [
        (n.name, n) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
    ]
    for scope, node in scopes:
        for call in ast.walk(node):
            if not (isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr == 'add_argument'):
                continue
            keywords = {k.arg: k.value for k in call.keywords}
            action = _value(keywords.get('action'))
            default = _value(keywords.get('default'))
            if default is NO_DEFAULT and action == 'store_true':
                default = 'False'
            for arg in call.args:
                name = arg.value if isinstance(
                    arg, ast.Constant) else constants.get(
                        getattr(arg, 'id', None))
                if str(name).startswith('-'):
                    found.setdefault(scope, {})[name] = default
    return found


def tool_options(root: Path) -> Dict[str, Dict[str, Optional[str]]]:
    """Python file -> option -> its default (None: none), for every file
    that builds an ``argparse`` parser: its own ``add_argument`` calls and
    those of the functions of ``mmact/`` it calls by name that add
    arguments (``add_runner_arguments(parser)``, ``analysis_parser(...)``).

    Args:
        root (Path): The repository root.
    """
    per_file: Dict[str, Dict[str, Dict[str, Optional[str]]]] = {}
    called: Dict[str, Set[str]] = {}
    for path, text in _files(root, ('.py', ), 'parse'):
        tree = ast.parse(text)
        per_file[path] = _options_of(tree)
        called[path] = {
            n.func.id if isinstance(n.func, ast.Name) else n.func.attr
            for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name,
                                                               ast.Attribute))
        }
    helpers: Dict[str, Dict[str, Optional[str]]] = {
        scope: options
        for path, scopes in per_file.items() if path.startswith('mmact/')
        for scope, options in scopes.items() if scope
    }
    for path in per_file:  # helpers that call helpers
        for scope in set(per_file[path]) & set(helpers):
            for helper in called[path] & set(helpers) - {scope}:
                helpers[scope].update(helpers[helper])
    tools = {}
    for path, scopes in per_file.items():
        options: Dict[str, Optional[str]] = {}
        for helper in called[path] & set(helpers):
            options.update(helpers[helper])
        for scope_options in scopes.values():
            options.update(scope_options)
        if options:
            tools[path] = options
    return tools
