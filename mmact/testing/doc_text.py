"""The pages and the code's own words as the docs tests read them: the
headings of a page and their anchors, its prose with the code blanked, and
the text a reader sees in source files (string literals joined as Python
joins them, comments), each with its line."""
import ast
import io
import re
import tokenize
from pathlib import Path
from typing import Iterator, List, NamedTuple, Tuple

__all__ = [
    'SourceText', 'headings', 'anchor', 'blank_code', 'line_of',
    'source_texts', 'SOURCE_ROOTS'
]

#: What :func:`source_texts` reads: files and folders of the repository.
SOURCE_ROOTS = ('README.md', 'Makefile', 'setup.cfg', 'setup.py',
                'MANIFEST.in', '.ci', 'configs', 'docs', 'mmact', 'projects',
                'tools', 'tests')
_SUFFIXES = ('.py', '.md', '.sh', '.yml', '.yaml', '.cfg', '.txt', '.in')
_FENCE = re.compile(r'^```.*?^```', re.M | re.S)


class SourceText(NamedTuple):
    """A piece of text of a file.

    Attributes:
        path (str): The file, relative to the repository root.
        line (int): The line the text starts on.
        text (str): The text (a Python string as it reads once joined, a
            block of comments without their ``#``, or a whole page).
    """
    path: str
    line: int
    text: str

    def line_at(self, pos: int) -> int:
        """The file's line of ``text[pos]``."""
        return self.line + self.text.count('\n', 0, pos)


def blank_code(text: str) -> str:
    """``text`` with its code blocks and code spans blanked (lines kept)."""
    text = _FENCE.sub(lambda m: '\n' * m.group(0).count('\n'), text)
    return re.sub(r'`[^`\n]*`', '', text)


def line_of(text: str, pos: int) -> int:
    """The line (from 1) of ``text[pos]``."""
    return text.count('\n', 0, pos) + 1


def _rendered(title: str) -> str:
    """A heading as it reads: no code ticks, emphasis or escapes."""
    title = re.sub(r'\\(.)', r'\1', title.replace('`', ''))
    return ' '.join(title.replace('**', '').split())


def headings(text: str) -> List[str]:
    """The titles of a markdown page's headings (outside code blocks), as
    they read."""
    text = _FENCE.sub(lambda m: '\n' * m.group(0).count('\n'), text)
    return [
        _rendered(m.group(1))
        for m in re.finditer(r'^#{1,6}\s+(.+?)\s*#*$', text, re.M)
    ]


def anchor(title: str) -> str:
    """The anchor of a heading (GitHub's and MyST's
    ``myst_heading_anchors`` slug): lower case, punctuation dropped,
    spaces as hyphens."""
    return re.sub(r'[^\w\- ]', '', title.strip().lower()).replace(' ', '-')


def _python_texts(path: str, source: str) -> Iterator[SourceText]:
    nodes = list(ast.walk(ast.parse(source)))
    parts = {
        id(v)
        for node in nodes if isinstance(node, ast.JoinedStr)
        for v in node.values
    }
    for node in nodes:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in parts:
            yield SourceText(path, node.lineno, node.value)
        elif isinstance(node, ast.JoinedStr):
            text = ''.join(
                v.value if isinstance(v, ast.Constant) else '{}'
                for v in node.values)
            yield SourceText(path, node.lineno, text)
    block: List[str] = []
    start = last = 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        row = token.start[0]
        if block and row != last + 1:
            yield SourceText(path, start, '\n'.join(block))
            block = []
        if not block:
            start = row
        block.append(token.string.lstrip('#').strip())
        last = row
    if block:
        yield SourceText(path, start, '\n'.join(block))


def source_texts(
    root: Path, containing: Tuple[str, ...] = ('', )) -> Iterator[SourceText]:
    """The text of every file of :data:`SOURCE_ROOTS` (the docs' build
    folder left out): pages whole, Python as its strings and comments,
    other files with the ``#`` of their comment lines dropped.

    Args:
        root (Path): The repository root.
        containing (tuple[str]): Read only the files that hold one of these
            strings (parsing every Python file takes seconds).
    """
    files: List[Path] = []
    for name in SOURCE_ROOTS:
        top = root / name
        if top.is_file():
            files.append(top)
        elif top.is_dir():
            files += sorted(
                p for p in top.rglob('*') if p.is_file() and (
                    p.suffix in _SUFFIXES or p.parent.name == '.ci')
                and '_build' not in p.parts and '__pycache__' not in p.parts)
    for path in files:
        name = path.relative_to(root).as_posix()
        text = path.read_text(errors='replace')
        if not any(s in text for s in containing):
            continue
        if path.suffix == '.py':
            yield from _python_texts(name, text)
        elif path.suffix == '.md':
            yield SourceText(name, 1, text)
        else:
            yield SourceText(name, 1,
                             re.sub(r'^[ \t]*#+[ \t]?', '', text, flags=re.M))
