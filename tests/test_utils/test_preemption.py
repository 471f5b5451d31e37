"""mmact.utils.preemption: stop signals raise before training, are recorded
while training."""
import os
import signal
import threading

import pytest

from mmact.engine.hooks import PreemptionHook
from mmact.utils.preemption import Preempted, StopSignals, parse_signal


@pytest.fixture
def stop_signals():
    handlers = StopSignals()
    yield handlers
    handlers.uninstall()


def test_names_are_read_and_bad_ones_refused():
    assert parse_signal('sigusr1') is signal.SIGUSR1
    for name in ('SIGKILL', 'SIGTERMX'):
        with pytest.raises(ValueError, match=f"'{name}'.*accepted: .*SIGTERM"):
            parse_signal(name)
    with pytest.raises(ValueError, match='SIGSTOP'):
        PreemptionHook(signals=['SIGTERM', 'SIGSTOP'])


def test_a_signal_raises_where_it_lands_until_deferred(stop_signals):
    previous = signal.getsignal(signal.SIGUSR1)
    assert stop_signals.install(['SIGUSR1'])
    with pytest.raises(Preempted, match='stopped by SIGUSR1') as stop:
        os.kill(os.getpid(), signal.SIGUSR1)
    assert stop.value.signal_name == 'SIGUSR1'
    assert stop.value.checkpoint is None
    # one Preempted: a second signal while the first unwinds is recorded
    os.kill(os.getpid(), signal.SIGUSR1)
    stop_signals.uninstall()
    assert signal.getsignal(signal.SIGUSR1) is previous


def test_deferred_signals_are_only_recorded(stop_signals):
    stop_signals.install(['SIGUSR1', 'SIGTERM'])
    stop_signals.deferred = True
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGUSR1)
    assert stop_signals.received == 'SIGTERM'  # the first one
    stop_signals.reset()
    assert stop_signals.received is None and not stop_signals.deferred


def test_only_the_main_thread_installs(stop_signals):
    installed = []
    thread = threading.Thread(
        target=lambda: installed.append(stop_signals.install(['SIGUSR1'])))
    thread.start()
    thread.join()
    assert installed == [False] and not stop_signals.installed
