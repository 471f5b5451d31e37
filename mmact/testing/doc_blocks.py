"""The shell blocks and Python snippets of the documentation, as tests see
them: where each is, its commands, and what each command names."""
import re
import shlex
from pathlib import Path
from typing import Dict, Iterator, List, NamedTuple

__all__ = [
    'DocBlock', 'Command', 'doc_pages', 'doc_blocks', 'shell_commands',
    'SHELL_LANGUAGES'
]

SHELL_LANGUAGES = ('bash', 'shell', 'sh', 'console')
_FENCE = re.compile(r'^```(\w+)[^\n]*\n(.*?)^```', re.M | re.S)
_ENV = re.compile(r'^[A-Z_][A-Z0-9_]*=')
#: A one-line loop, ``for x in ...; do BODY; done``: its body is the command.
_LOOP = re.compile(r'^\s*for\s+\w+\s+in\s+[^;]*;\s*do\s+(.*?);?\s*done\s*$')


class DocBlock(NamedTuple):
    """A fenced code block of a page.

    Attributes:
        page (str): The page, relative to the repository root.
        line (int): Line of the opening fence.
        language (str): The fence's language.
        text (str): The block's content.
    """
    page: str
    line: int
    language: str
    text: str

    @property
    def name(self) -> str:
        """``page:line``, a test id."""
        return f'{self.page}:{self.line}'


class Command(NamedTuple):
    """One command of a shell block.

    Attributes:
        env (dict): ``NAME=value`` assignments before the program.
        argv (list[str]): The program and its arguments, ``$(...)`` kept
            as one word.
    """
    env: Dict[str, str]
    argv: List[str]


def doc_pages(root: Path) -> List[Path]:
    """The README, configs/README.md and every page of the docs site."""
    pages = [root / 'README.md', root / 'configs' / 'README.md']
    pages += sorted(
        p for p in (root / 'docs').rglob('*.md') if '_build' not in p.parts)
    return [p for p in pages if p.is_file()]


def doc_blocks(root: Path) -> Iterator[DocBlock]:
    """Every fenced block of :func:`doc_pages`.

    Args:
        root (Path): The repository root.
    """
    for page in doc_pages(root):
        text = page.read_text()
        for match in _FENCE.finditer(text):
            yield DocBlock(
                str(page.relative_to(root)),
                text.count('\n', 0, match.start()) + 1, match.group(1),
                match.group(2))


def _logical_lines(text: str) -> Iterator[str]:
    """Lines with backslash continuations joined, comments dropped."""
    pending = ''
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.endswith('\\'):
            pending += line[:-1] + ' '
            continue
        line = pending + line
        pending = ''
        if line.strip() and not line.lstrip().startswith('#'):
            yield line


def _words(line: str) -> List[str]:
    """``shlex`` words, with ``$(...)`` substitutions kept whole and
    comments dropped."""
    subs: List[str] = []

    def keep(match: re.Match) -> str:
        subs.append(match.group(0))
        return f'__SUB{len(subs) - 1}__'

    line = re.sub(r'\$\([^)]*\)', keep, line)
    words = shlex.split(line, comments=True)
    return [
        re.sub(r'__SUB(\d+)__', lambda m: subs[int(m.group(1))], w)
        for w in words
    ]


def shell_commands(text: str) -> List[Command]:
    """The commands of a shell block (``&&`` chains split, a one-line
    ``for`` loop's body in place of the loop).

    Args:
        text (str): The block's content.
    """
    commands = []
    for line in _logical_lines(text):
        loop = _LOOP.match(line)
        for part in re.split(r'\s&&\s', loop[1] if loop else line):
            words = _words(part)
            env: Dict[str, str] = {}
            while words and _ENV.match(words[0]):
                key, value = words.pop(0).split('=', 1)
                env[key] = value
            if words:
                commands.append(Command(env, words))
    return commands
