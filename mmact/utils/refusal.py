"""One line for every input a tool refuses.

The entry points of ``tools/`` run their ``main`` through :func:`run_tool`.
A file, a config or an argument a tool does not take ends the process with
exit status :data:`REFUSED_STATUS` and one line on stderr, ``mmact: <what
is wrong and what to do>``, without a traceback: the sentence is the whole
message. ``MMACT_DEBUG=1`` (:data:`DEBUG_VARIABLE`) prints the traceback
above that line.

A tool says what is a refusal in two ways: :class:`Refused` raised
anywhere, and errors of given types raised inside :func:`refusing` (the
checks a tool runs before its work: a missing file is a ``FileNotFoundError``
there, not a crash). Errors outside both keep their traceback: a failure
during the work is mmact's or a library's, not the user's input.
"""
import os
import pickle
import sys
import traceback
from contextlib import contextmanager
from typing import Any, Callable, Iterator, NoReturn, Optional, Tuple, Type

__all__ = [
    'DEBUG_VARIABLE', 'REFUSED_STATUS', 'INPUT_ERRORS', 'Refused', 'refusing',
    'one_line', 'run_tool'
]

#: Set to ``1``, a refusal prints its traceback above its line.
DEBUG_VARIABLE = 'MMACT_DEBUG'
#: The exit status of a refusal (argparse's own errors exit with 2).
REFUSED_STATUS = 1
#: What the checks of an input raise: a missing or unreadable file
#: (``OSError``), a value out of range or a corrupt file (``ValueError``),
#: an unknown name (``KeyError``), a config that is not Python
#: (``SyntaxError``), a checkpoint refused by the allow-list
#: (``pickle.UnpicklingError``).
INPUT_ERRORS: Tuple[Type[BaseException],
                    ...] = (OSError, ValueError, KeyError, SyntaxError,
                            pickle.UnpicklingError)

# a line ending in one of these reads on with a space, others with '; '
_CONTINUES = (':', ';', ',', '.', '?', '!', '(')


class Refused(Exception):
    """An input a tool does not take; ``str(error)`` says what is wrong and
    what to do, and is printed as the tool's last line."""


def one_line(message: Any) -> str:
    """``message`` (a text or an exception) as one line: its lines joined,
    with ``'; '`` where a line ends without punctuation.

    A ``KeyError``'s text is taken without the quotes ``str()`` adds; an
    exception without text is named by its type.

    Args:
        message (str | BaseException): What to say.
    """
    if isinstance(message, BaseException):
        error = message
        if isinstance(error, KeyError) and len(error.args) == 1 and \
                isinstance(error.args[0], str):
            message = error.args[0]
        else:
            message = str(error) or type(error).__name__
    parts = [p.strip() for p in str(message).splitlines() if p.strip()]
    line = parts[0] if parts else ''
    for part in parts[1:]:
        line += (' ' if line.endswith(_CONTINUES) else '; ') + part
    return line


@contextmanager
def refusing(*errors: Type[BaseException]) -> Iterator[None]:
    """Errors of these types raised inside are refusals of the input.

    Use it around the checks a tool runs before its work (or as a function
    decorator). :class:`Refused` passes through as it is.

    Args:
        *errors (type): Exception types; none given: :data:`INPUT_ERRORS`.

    Raises:
        Refused: With :func:`one_line` of the error, raised from it.
    """
    try:
        yield
    except Refused:
        raise
    except (errors or INPUT_ERRORS) as error:
        raise Refused(one_line(error)) from error


def _debug() -> bool:
    return os.environ.get(DEBUG_VARIABLE, '') not in ('', '0')


def run_tool(
    main: Callable[..., Optional[int]],
    *args: Any,
    refuse: Tuple[Type[BaseException], ...] = ()) -> NoReturn:
    """Run a tool's ``main`` and exit with the int it returns (0 for
    anything else: None, the figures a benchmark returns).

    A :class:`Refused` (or, with ``refuse``, an error of those types raised
    anywhere in ``main``) prints ``mmact: <message>`` as one line on stderr
    and exits with :data:`REFUSED_STATUS`; with ``MMACT_DEBUG=1`` the
    traceback comes first.

    Args:
        main (callable): The tool's main function.
        *args: Its arguments.
        refuse (tuple[type]): Error types that are refusals wherever they
            are raised in ``main``: for tools whose every step reads the
            user's input (a converter, an analysis of a checkpoint).
    """
    try:
        if refuse:
            with refusing(*refuse):
                status = main(*args)
        else:
            status = main(*args)
    except Refused as refusal:
        if _debug():
            traceback.print_exc()
        sys.stdout.flush()
        print(f'mmact: {one_line(refusal)}', file=sys.stderr, flush=True)
        sys.exit(REFUSED_STATUS)
    sys.exit(status if isinstance(status, int) else 0)
