"""mmact.utils.StartUp: no collections while a tool starts up; one
collection, a freeze and the collector back once it is over, or the
collector back when the start-up fails."""
import gc
import weakref

import pytest

from mmact.utils import StartUp

pytestmark = pytest.mark.stack_independent  # Python's collector alone


class Node:
    """An object that can sit in a reference cycle."""

    def __init__(self) -> None:
        self.other = self


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_paused_then_collected_frozen_and_resumed(collector_on):
    with StartUp() as start_up:
        assert not gc.isenabled()
        garbage = Node()  # a cycle only the collector frees
        gone = weakref.ref(garbage)
        del garbage
        kept = [Node() for _ in range(100)]
        frozen_before = gc.get_freeze_count()
        start_up.over()
        assert gc.isenabled()
        assert gone() is None  # collected before the freeze, not frozen
        assert gc.get_freeze_count() >= frozen_before + len(kept)
        start_up.over()  # a second call changes nothing
        assert gc.isenabled()
    assert gc.isenabled()


def test_a_failed_start_up_resumes_the_collector(collector_on):
    with pytest.raises(RuntimeError, match='refused'):
        with StartUp():
            assert not gc.isenabled()
            raise RuntimeError('refused')
    assert gc.isenabled()


def test_a_paused_collector_stays_paused():
    was = gc.isenabled()
    gc.disable()
    try:
        with StartUp() as start_up:
            start_up.over()
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()
