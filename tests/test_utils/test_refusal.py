"""mmact.utils.refusal: a refusal is one ``mmact: ...`` line on stderr and
exit status 1; ``MMACT_DEBUG=1`` adds the traceback; other errors keep
theirs."""
import pickle

import pytest

from mmact.utils.refusal import (DEBUG_VARIABLE, INPUT_ERRORS, REFUSED_STATUS,
                                 Refused, one_line, refusing, run_tool)

# messages and exit statuses of plain Python functions
pytestmark = pytest.mark.stack_independent


def test_one_line_joins_the_lines_of_a_message():
    text = ('Pretrained checkpoints do not exist:\n  a.pth (model.init_cfg)\n'
            '  b.pth (neck.init_cfg)\nTrain the backbone first.\n\n')
    assert one_line(text) == (
        'Pretrained checkpoints do not exist: a.pth (model.init_cfg); '
        'b.pth (neck.init_cfg); Train the backbone first.')
    assert one_line(ValueError('one\ntwo.')) == 'one; two.'


def test_one_line_of_errors_without_quotes_or_text():
    assert one_line(KeyError('AGLUU is not in the registry')) == \
        'AGLUU is not in the registry'
    assert one_line(KeyError(3)) == '3'
    assert one_line(ValueError()) == 'ValueError'


@pytest.mark.parametrize('error', [
    FileNotFoundError('no such file'),
    ValueError('bad value'),
    KeyError('no such key'),
    SyntaxError('not python'),
    pickle.UnpicklingError('refused global'),
])
def test_refusing_turns_input_errors_into_refusals(error):
    assert isinstance(error, INPUT_ERRORS)
    with pytest.raises(Refused) as refused:
        with refusing():
            raise error
    assert refused.value.__cause__ is error
    assert str(refused.value) == one_line(error)


def test_refusing_leaves_other_errors_and_takes_named_types():
    with pytest.raises(RuntimeError):
        with refusing():
            raise RuntimeError('a bug, not the input')
    with pytest.raises(Refused, match='held'):
        with refusing(RuntimeError):
            raise RuntimeError('held')
    with pytest.raises(ValueError):  # only the types named
        with refusing(RuntimeError):
            raise ValueError('x')
    original = Refused('as it is')
    with pytest.raises(Refused) as refused:
        with refusing():
            raise original
    assert refused.value is original


def test_refusing_decorates_a_function():

    @refusing()
    def check(path):
        raise FileNotFoundError(f'{path} does not exist')

    with pytest.raises(Refused, match='x.pth does not exist'):
        check('x.pth')
    with pytest.raises(Refused):  # a second call: a new context
        check('x.pth')


def _exit(capsys, *args, **kwargs):
    with pytest.raises(SystemExit) as stopped:
        run_tool(*args, **kwargs)
    captured = capsys.readouterr()
    return stopped.value.code, captured.out, captured.err


def test_run_tool_prints_one_line_and_exits_1(capsys, monkeypatch):
    monkeypatch.delenv(DEBUG_VARIABLE, raising=False)

    def main(name):
        print('working')
        raise Refused(f'{name}: no\nsuch file')

    code, out, err = _exit(capsys, main, 'cfg.py')
    assert code == REFUSED_STATUS == 1
    assert out == 'working\n'
    assert err == 'mmact: cfg.py: no; such file\n'


@pytest.mark.parametrize('value', ['1', 'yes'])
def test_debug_variable_prints_the_traceback_first(capsys, monkeypatch, value):
    monkeypatch.setenv(DEBUG_VARIABLE, value)

    def main():
        with refusing():
            raise FileNotFoundError('cfg.py does not exist')

    code, _, err = _exit(capsys, main)
    lines = err.splitlines()
    assert code == 1 and lines[0] == 'Traceback (most recent call last):'
    assert 'FileNotFoundError: cfg.py does not exist' in err
    assert lines[-1] == 'mmact: cfg.py does not exist'
    monkeypatch.setenv(DEBUG_VARIABLE, '0')
    assert _exit(capsys, main)[2] == 'mmact: cfg.py does not exist\n'


def test_run_tool_exit_status_and_refuse(capsys):
    assert _exit(capsys, lambda: 3)[0] == 3
    assert _exit(capsys, lambda: None)[0] == 0
    assert _exit(capsys, lambda: {'figures': 1})[0] == 0  # a benchmark's

    def main():
        raise ValueError('--num-bins must be >= 1, got 0')

    code, _, err = _exit(capsys, main, refuse=INPUT_ERRORS)
    assert (code, err) == (1, 'mmact: --num-bins must be >= 1, got 0\n')
    with pytest.raises(ValueError):  # without refuse: a crash, traceback
        run_tool(main)
