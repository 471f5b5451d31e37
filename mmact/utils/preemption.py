"""Stop signals: SIGTERM / SIGUSR1 become a clean stop instead of a kill.

Slurm sends SIGTERM to every task of a job it preempts or cancels (and, with
``--signal=USR1@90``, SIGUSR1 ninety seconds before the time limit), then
SIGKILL after its grace period; torchrun forwards SIGTERM to its workers.
Python's default for both signals ends the process on the spot. The tools
install :data:`STOP_SIGNALS` at start: before training (and in
``tools/test.py``) a stop signal raises :class:`Preempted` where the process
is, so it exits cleanly with :data:`PREEMPTED_EXIT_CODE`; while training
(:class:`~mmact.engine.hooks.PreemptionHook`) the signal is only recorded,
and the ranks stop together at the next iteration boundary, after a
checkpoint.
"""
import signal
import threading
from typing import Callable, Dict, Optional, Sequence

__all__ = [
    'PREEMPTED_EXIT_CODE', 'DEFAULT_STOP_SIGNALS', 'Preempted', 'StopSignals',
    'STOP_SIGNALS', 'parse_signal'
]

#: Exit status of a run stopped by a stop signal (sysexits.h EX_TEMPFAIL:
#: "try again later"): resume it (``--resume``; requeued and restarted jobs
#: do by themselves).
PREEMPTED_EXIT_CODE = 75

#: The signals slurm and torchrun send before they kill.
DEFAULT_STOP_SIGNALS = ('SIGTERM', 'SIGUSR1')


class Preempted(BaseException):
    """The run stopped on a stop signal.

    A ``BaseException``, like ``KeyboardInterrupt``, so that no
    ``except Exception`` on the way swallows it.

    Args:
        signal_name (str): The signal that asked for the stop.
        message (str): What was and was not saved (empty: the tool says).
        checkpoint (str, optional): The checkpoint written on the way out.
    """

    def __init__(self,
                 signal_name: str,
                 message: str = '',
                 checkpoint: Optional[str] = None) -> None:
        super().__init__(f'stopped by {signal_name}' +
                         (f': {message}' if message else ''))
        self.signal_name = signal_name
        self.message = message
        self.checkpoint = checkpoint


def parse_signal(name: str) -> signal.Signals:
    """The signal called ``name`` (``'SIGTERM'``, ``'sigusr1'``).

    Raises:
        ValueError: ``name`` is no signal a process can handle; the message
            lists those.
    """
    try:
        sig = signal.Signals[name.upper()]
    except KeyError:
        sig = None
    if sig is None or sig in (signal.SIGKILL, signal.SIGSTOP):
        catchable = ', '.join(
            s.name for s in signal.Signals
            if s not in (signal.SIGKILL, signal.SIGSTOP))
        raise ValueError(f'stop signals: {name!r} is not a signal a process '
                         f'can handle; accepted: {catchable}') from None
    return sig


class StopSignals:
    """Handlers that turn stop signals into a stop request of this process.

    While not :attr:`deferred` a signal raises :class:`Preempted` at once
    (nothing to save yet: set-up, evaluation); while deferred it is only
    recorded in :attr:`received` for a hook to act on at a safe point. A
    second signal is recorded, never raised, once deferred: it cannot
    interrupt the checkpoint being written for the first.
    """

    def __init__(self) -> None:
        self.received: Optional[str] = None
        self.deferred = False
        self._previous: Dict[signal.Signals, Callable] = {}

    @property
    def installed(self) -> bool:
        """Whether the handlers are in place."""
        return bool(self._previous)

    def install(self, names: Sequence[str] = DEFAULT_STOP_SIGNALS) -> bool:
        """Handle ``names`` (replacing handlers installed earlier).

        Args:
            names (Sequence[str]): Signal names, e.g. ``('SIGTERM',
                'SIGUSR1')``; empty to handle none.

        Returns:
            bool: Whether handlers were installed (signals are handled only
            in the main thread; elsewhere this does nothing).

        Raises:
            ValueError: A name that is no signal a process can handle.
        """
        signals = [parse_signal(name) for name in names]
        if threading.current_thread() is not threading.main_thread():
            return False
        self.uninstall()
        for sig in signals:
            self._previous[sig] = signal.signal(sig, self._handle)
        return bool(signals)

    def uninstall(self) -> None:
        """Give the signals back the handlers they had."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def reset(self) -> None:
        """Forget a received signal and raise at once again."""
        self.received = None
        self.deferred = False

    def _handle(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.received is None:
            self.received = name
        if not self.deferred:
            self.deferred = True  # one Preempted, whatever follows
            raise Preempted(name)


#: The process's stop-signal handlers (one set per process).
STOP_SIGNALS = StopSignals()
