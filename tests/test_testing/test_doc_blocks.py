"""mmact.testing.doc_blocks: how a docs page's shell block splits into the
commands the docs tests check."""
import pytest

from mmact.testing.doc_blocks import shell_commands

pytestmark = pytest.mark.stack_independent


def test_chains_environment_and_continuations():
    commands = shell_commands('# a comment\n'
                              'A=1 make env && python tools/x.py \\\n'
                              '    --out "a b"\n')
    assert [(c.env, c.argv) for c in commands] == [
        ({
            'A': '1'
        }, ['make', 'env']),
        ({}, ['python', 'tools/x.py', '--out', 'a b']),
    ]


def test_a_one_line_loop_is_its_body():
    (command, ) = shell_commands(
        'for i in $(seq 10); do python tools/g.py --json g_$i.json; done')
    assert command.argv == ['python', 'tools/g.py', '--json', 'g_$i.json']
