"""The docs site: its API reference covers every registered component, its
pages stay small, and the benchmark pages describe the code and the machine
(current tables first, each with the code it measured that changed after its
commit, older figures in an archive)."""
import functools
import re
import subprocess
from pathlib import Path

from mmact.registry import registered_components
from mmact.testing.doc_text import blank_code

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


#: how a page was written, not what the code does: phrases (not words:
#: "round" is a benchmark word here, "session" a code word in
#: ``InferenceSession``), matched across line breaks
PROCESS = re.compile(
    '|'.join(
        phrase.replace(' ', r'\s+') for phrase in [
            r'\b(?:(?:was|were|is|are) )?(?:not )?(?:run|ran|measured|'
            r'verified|tested|reproduced|available|printed) here\b',
            r'\d (?:s|ms|min) here\b',
            r'\bbeside other work\b',
            r'\bwhere (?:they|it) (?:was|were) written\b',
            r'\b(?:on|of|in) this machine\b',
            r'\bin this run\b',
            r'\bthe other run\b',
            r'\bearlier runs?\b',
            r'\bused to\b',
            r'\byet\b',
            r'\bnow\b(?! and then)',
            r'\bsince [0-9a-f]{7,40}\b',
            r'\bas of [0-9a-f]{7,40}\b',
            r'\bhas run since\b',
            r'\bthis round\b',
            r'\b(?:was|were) not lent\b',
            r'\bthis task\b',
            r'\bwho had a GPU\b',
        ]), re.I)
#: a session (of whoever wrote the page) outside code spans and blocks
SESSION = re.compile(r'\bsessions?\b', re.I)
#: an issue of this project's tracker: a reader cannot follow it (another
#: project's issue, "mmdet issue #11205", "open-mmlab/mmdetection#11398",
#: names where it lives)
ISSUE = re.compile(r'(?<![\w/&])#\d+\b')


def process_talk(text: str) -> list:
    """``(line, phrase)`` of every process phrase of a page."""
    code_blanked = blank_code(text)
    found = [(m, text) for m in PROCESS.finditer(text)]
    found += [(m, code_blanked) for m in SESSION.finditer(code_blanked)]
    found += [(m, code_blanked) for m in ISSUE.finditer(code_blanked)
              if not re.search(r'\b(?!mmact\b)\w+\s+issue\s+$',
                               code_blanked[:m.start()])]
    return sorted((source.count('\n', 0, m.start()) + 1,
                   ' '.join(m.group(0).split()))
                  for m, source in found)


def test_process_phrases_are_found():
    """The scan finds each kind of phrase it looks for, across a line
    break, and leaves code words and other projects' issues alone."""
    page = (
        'These lines were not run here\n(no GPU). It took 14 min beside\n'
        'other work, measured on this machine; not run on a GPU yet.\n'
        'The figures of 6ebc2b9 hold since a34c700. Done in issue (#48) '
        'in the previous session.\n'
        '`session = onnxruntime.InferenceSession(path)`, mmdet issue '
        '#11205, open-mmlab/mmdetection#11398, five rounds of 1,000, '
        'now and then slower.\n')
    assert process_talk(page) == [(1, 'were not run here'),
                                  (2, 'beside other work'),
                                  (3, 'on this machine'), (3, 'yet'),
                                  (4, '#48'), (4, 'session'),
                                  (4, 'since a34c700')]


def test_pages_describe_the_code_not_how_it_was_written():
    """Every page says what the code does and what the tests cover, in the
    present tense; history lives in git, measurements carry their machine,
    commit, date and command."""
    found = {
        f'{path.relative_to(REPO)}:{line}': phrase
        for path in pages() for line, phrase in process_talk(path.read_text())
    }
    assert found == {}


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


#: what changed after a measured commit, in the measured code:
#: ``- Changed after 537b3f1: the Triton rows (874ff35), ...``
CHANGED = re.compile(
    r'^- Changed after (?P<commit>[0-9a-f]{7,40}):(?P<what>.*(?:\n  .*)*)',
    re.M)
#: the list item naming a section's measured commit(s)
COMMIT_ITEM = re.compile(r'^- (?:Commits?\b|Machine, commit)(?:.*)(?:\n  .*)*',
                         re.M)
SHA = re.compile(r'\b[0-9a-f]{7,40}\b')


def unstated_changes(page: str, text: str, after) -> dict:
    """``page:line`` -> what is missing, for each section of a page's
    current figures (before its Archive) that names the commit it measured
    without a ``- Changed after <that commit>:`` item, or with one that
    cites no commit after it (``nothing ...`` when nothing changed) or a
    commit ``after(measured, cited)`` denies, or a path that is not in the
    repository."""
    current = text.split('\n## Archive\n')[0]
    starts = [0] + [m.start() for m in re.finditer(r'^#', current, re.M)]
    found = {}
    for start, end in zip(starts, starts[1:] + [len(current)]):
        section = current[start:end]
        items = list(COMMIT_ITEM.finditer(section))
        measured = [s for m in items for s in SHA.findall(m.group(0))]
        changes = list(CHANGED.finditer(section))
        for item in items[:1]:
            line = current.count('\n', 0, start + item.start()) + 1
            if not any(c['commit'] in measured for c in changes):
                found[f'{page}:{line}'] = (
                    f'figures of {measured[0]} without a "- Changed after '
                    f'{measured[0]}:" item naming the code they measured '
                    'that changed after it, with the commits (or "nothing")')
        for change in changes:
            line = current.count('\n', 0, start + change.start()) + 1
            what = ' '.join(change['what'].split())
            cited = SHA.findall(what)
            wrong = [c for c in cited if not after(change['commit'], c)]
            missing = [
                p for p in re.findall(r'`([\w.-]+/[\w./*-]+)`', what)
                if not list(REPO.glob(p))
            ]
            if not cited and not what.startswith('nothing'):
                found[f'{page}:{line}'] = 'name the commit of each change'
            elif wrong or missing:
                found[f'{page}:{line}'] = (
                    f'not commits after {change["commit"]}: {wrong}; '
                    f'not in the repository: {missing}')
    return found


@functools.lru_cache(maxsize=None)
def git_after(older: str, newer: str) -> bool:
    """Whether commit ``newer`` comes after ``older`` in HEAD's history."""
    run = functools.partial(subprocess.run, cwd=REPO, capture_output=True)
    return older != newer and all(
        run(['git', 'merge-base', '--is-ancestor', a, b]).returncode == 0
        for a, b in ((older, newer), (newer, 'HEAD')))


def test_unstated_changes_are_found():
    """A current figure without the changes after its commit, or with a
    change cited by a commit that is not after it, fails with the page and
    the line; an Archive's figures need none."""
    page = ('# Page\n\n## A\n\n- Machine: m.\n- Commit: aaaaaaa.\n\n'
            '## B\n\n- Commit: bbbbbbb / ccccccc.\n'
            '- Changed after ccccccc: the kernels (ddddddd), `tools/x.py`\n'
            '  (eeeeeee).\n\n'
            '## C\n\n- Commit: fffffff.\n- Changed after fffffff: nothing.\n'
            '\n## Archive\n\n- Commit: 9999999.\n')
    later = {('ccccccc', 'ddddddd')}
    assert unstated_changes('p.md', page, lambda a, b: (a, b) in later) == {
        'p.md:6': 'figures of aaaaaaa without a "- Changed after aaaaaaa:" '
        'item naming the code they measured that changed after it, with '
        'the commits (or "nothing")',
        'p.md:11': "not commits after ccccccc: ['eeeeeee']; not in the "
        "repository: ['tools/x.py']",
    }


def test_current_figures_say_what_changed_after_their_commit():
    """Each benchmark page's current figures name the code they measured
    that changed after their commit, each change with its commit."""
    found = {}
    for path in sorted((DOCS / 'benchmarks').glob('*.md')):
        found.update(
            unstated_changes(
                path.relative_to(REPO).as_posix(), path.read_text(),
                git_after))
    assert found == {}
