"""The docs site: its API reference covers every registered component, its
pages stay small, and the benchmark pages describe the code and the machine
(current tables first, older figures in an archive)."""
import re
from pathlib import Path

from mmact.registry import registered_components

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / 'docs'


def pages():
    """Every page of the site's sources, the README and the configs' README
    (the generated model_zoo.md included when it was built)."""
    found = [
        path for path in DOCS.rglob('*.md') if '_build' not in path.parts
    ]
    return found + [REPO / 'README.md', REPO / 'configs/README.md']


def test_api_reference_lists_every_registered_component():
    listed = set(
        re.findall(r'^\.\. auto(?:class|function):: (\S+)$',
                   (DOCS / 'api.md').read_text(), re.M))
    registered = set(registered_components())
    assert len(registered) > 30
    assert registered - listed == set(), 'add them to docs/api.md'
    assert listed - registered == set(), 'no longer registered'


def test_no_page_is_over_20_kb():
    sizes = {
        path.relative_to(REPO).as_posix(): path.stat().st_size
        for path in pages()
    }
    assert len(sizes) > 15
    over = {
        name: size
        for name, size in sizes.items()
        if size > 20 * 1024
    }
    assert over == {}, 'split them into pages of one topic each'


def test_pages_describe_the_code_not_who_measured_when():
    process = re.compile(
        r'\b(this|same|previous|earlier|later|next) session|'
        r'\bthis round\b|\b(was|were) not lent\b|\bthis task\b|'
        r'\bwho had a GPU\b', re.I)
    for path in pages():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            assert not process.search(line), \
                f'{path.relative_to(REPO)}:{number}: {line}'


def test_benchmark_pages_open_with_current_tables_and_end_in_an_archive():
    """Each page names machine, commit, date and command before its
    Archive, the last section; the entry page links every page."""
    index = (DOCS / 'benchmarks/index.md').read_text()
    topics = sorted((DOCS / 'benchmarks').glob('*.md'))
    assert len(topics) >= 5
    for path in topics:
        if path.name == 'index.md':
            continue
        assert f'({path.name})' in index, path.name
        text = path.read_text()
        sections = re.findall(r'^## (.+)$', text, re.M)
        assert sections[-1] == 'Archive', path.name
        current = text[:text.index('\n## Archive\n')]
        for field in ('Machine', 'Commit', 'Date', 'Command'):
            assert re.search(rf'^- {field}', current, re.M), \
                (path.name, field)
