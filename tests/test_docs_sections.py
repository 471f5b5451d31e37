"""Pointers to a section of a page, in the pages and in the code's own words
(error messages, docstrings, comments of the Makefile and configs): a
pointer ``README, "Install and the two commands"`` and a link
``get_started.md#kernels-and-their-switches`` name a heading the page
has."""
import re
from pathlib import Path
from typing import Dict, List

from mmact.testing.doc_text import (SourceText, anchor, headings, source_texts)

REPO = Path(__file__).resolve().parents[1]

#: ``PAGE, "Section"`` (the README by its name, other pages by path)
POINTER = re.compile(r'(?P<page>\bREADME(?:\.md)?|\b[\w./-]+\.md),\s+'
                     r'"(?P<title>[^"]{1,120}?)"')
#: ``page.md §5``: a numbered section of the page or of its sub-pages
#: (``docs/design.md §5`` is ``docs/design/environment.md``, "5. Environment")
NUMBERED = re.compile(
    r'(?P<page>\b[\w./-]+\.md)\s+§\s*(?P<number>\d+(?:\.\d+)*)')
#: ``page.md#anchor`` (a markdown link, or a path in a message)
LINK = re.compile(r'(?:\]\((?P<link>[^)#\s]*)|(?P<path>\b[\w./-]+\.md))'
                  r'#(?P<anchor>[\w-]+)')


def _page(name: str, source: str, root: Path) -> Path:
    """The page a pointer of ``source`` names: a link is relative to its
    page, a path in code to the repository root (``README``: the
    README)."""
    if name in ('', 'README'):
        return root / source if name == '' else root / 'README.md'
    for base in (root / Path(source).parent, root, root / 'docs'):
        if (base / name).is_file():
            return (base / name).resolve()
    return root / name


def broken_pointers(texts: List[SourceText], root: Path) -> Dict[str, str]:
    """``path:line`` -> what is wrong, for every pointer of ``texts`` to a
    page or section that does not exist (with the sections it has)."""
    found = {}
    sections: Dict[Path, List[str]] = {}

    def check(text: SourceText, pos: int, page: Path, title: str,
              by_anchor: bool) -> None:
        where = f'{text.path}:{text.line_at(pos)}'
        if not page.is_file():
            found[where] = f'no page {page.relative_to(root)}'
            return
        if page not in sections:
            sections[page] = headings(page.read_text())
        names = sections[page]
        if title in ([anchor(t) for t in names] if by_anchor else names):
            return
        shown = [anchor(t) for t in names] if by_anchor else names
        found[where] = (f'{page.relative_to(root)} has no section '
                        f'{title!r}; its sections: {shown}')

    for text in texts:
        for m in NUMBERED.finditer(text.text):
            page = _page(m['page'], text.path, root)
            numbers = [
                title.split()[0].rstrip('.')
                for path in [page, *sorted(page.with_suffix('').glob('*.md'))]
                if path.is_file() for title in headings(path.read_text())
            ]
            if m['number'] not in numbers:
                found[f'{text.path}:{text.line_at(m.start())}'] = (
                    f'{m["page"]} and its sub-pages have no section '
                    f'{m["number"]}; their numbers: '
                    f'{sorted(n for n in numbers if n[0].isdigit())}')
        for m in POINTER.finditer(text.text):
            check(text, m.start(), _page(m['page'], text.path, root),
                  ' '.join(m['title'].replace('`', '').split()), False)
        for m in LINK.finditer(text.text):
            name = m['path'] if m['link'] is None else m['link']
            if name.startswith(('http:', 'https:')):
                continue
            check(text, m.start(), _page(name, text.path, root), m['anchor'],
                  True)
    return found


def test_a_pointer_to_a_missing_section_is_found(tmp_path):
    """A pointer in a message, a comment or a page to a section the page
    lacks fails with the file, the line and the sections the page has;
    existing sections pass, across a line break too."""
    (tmp_path / 'README.md').write_text('# Tool\n\n## Install and use\n\n'
                                        '```\n## not a heading\n```\n')
    (tmp_path / 'docs').mkdir()
    (tmp_path / 'docs/guide.md').write_text(
        '# Guide\n\nSee [use](../README.md#install-and-use), '
        '[x](../README.md#install) and\n(README, "Install and\nuse").\n')
    (tmp_path / 'tool.py').write_text(
        '"""Tool."""\n# the users\' stack (README,\n# "Install")\n'
        "ERROR = (f'{1} (see README, '\n         '\"Supported versions\")')\n"
        "OTHER = 'docs/missing.md, \"Any\"'\n"
        "# the stacks (docs/guide.md §2; docs/guide.md §3)\n")
    (tmp_path / 'docs/guide').mkdir()
    (tmp_path / 'docs/guide/part.md').write_text('# 2. Part\n')
    texts = [
        SourceText(p, 1, (tmp_path / p).read_text())
        for p in ('README.md', 'docs/guide.md')
    ]
    from mmact.testing.doc_text import _python_texts
    texts += list(_python_texts('tool.py', (tmp_path / 'tool.py').read_text()))
    has = "its sections: ['Tool', 'Install and use']"
    assert broken_pointers(texts, tmp_path) == {
        'docs/guide.md:3':
        "README.md has no section 'install'; its sections:"
        " ['tool', 'install-and-use']",
        'tool.py:2':
        f"README.md has no section 'Install'; {has}",
        'tool.py:4':
        f"README.md has no section 'Supported versions'; {has}",
        'tool.py:6':
        'no page docs/missing.md',
        'tool.py:7':
        'docs/guide.md and its sub-pages have no section 3; '
        "their numbers: ['2']",
    }


def test_every_pointer_names_a_section_that_exists():
    """Every ``PAGE, "Section"`` pointer and ``page.md#anchor`` link of the
    pages, the code, the Makefile, the configs and the tests."""
    own = Path(__file__).relative_to(REPO).as_posix()  # broken on purpose
    texts = [t for t in source_texts(REPO, ('.md', 'README')) if t.path != own]
    assert {'Makefile', 'mmact/compat.py', 'README.md',
            'configs/README.md'} <= {t.path
                                     for t in texts}
    assert broken_pointers(texts, REPO) == {}
