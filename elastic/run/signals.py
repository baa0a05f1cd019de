"""The driver's stop and notice signals: handlers installed and restored, each relayed as an observation."""

from __future__ import annotations

import queue
import signal
import threading
from collections.abc import Callable
from types import FrameType

from elastic.core.labels import signal_name
from elastic.core.messages import Observation, PreemptionNoticed, StopRequested
from elastic.node.clock import Clock
from elastic.run.held_notices import held

__all__ = ["STOP_SIGNALS", "SignalRelay"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

class SignalRelay:
    """Turns SIGTERM, SIGINT and SIGHUP into :class:`StopRequested` observations, and the
    notice signal (``--notice-signal``, SIGUSR1 by default) into :class:`PreemptionNoticed`.

    The first signal sets ``stop_requested`` (which cuts a backoff or a wait for
    nodes short) and queues the observation; a second Ctrl-C also kills the
    workers at once, with no more grace. A notice to the launcher says the whole job
    is going (Slurm's ``--signal=B:USR1@N`` before the time limit): it ends the run too,
    once the ranks have saved, so it also cuts a wait short.
    """

    def __init__(
        self,
        observations: queue.SimpleQueue[Observation],
        stop_requested: threading.Event,
        kill_workers: Callable[[], None],
        clock: Clock,
        notice_signal: int | None = None,
    ) -> None:
        self._observations = observations
        self._notice_signal = notice_signal
        self._stop_requested = stop_requested
        self._kill_workers = kill_workers
        self._clock = clock
        self._claimed = False
        self._interrupts = 0

    def install(self) -> Callable[[], None]:
        """Handle the stop signals (from the main thread only); returns what restores the old ones."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {signum: signal.signal(signum, self._on_signal) for signum in self._signals()}
        self._claimed = True
        if self._notice_signal is not None and self._notice_signal in held:
            held.clear()
            self._on_signal(self._notice_signal, None)  # it came while the launcher started

        def restore() -> None:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

        return restore

    def claim(self) -> None:
        """Take the signals back after something else (starting Ray) installed its own handlers."""
        if self._claimed:
            for signum in self._signals():
                signal.signal(signum, self._on_signal)

    def _signals(self) -> tuple[int, ...]:
        notice = () if self._notice_signal is None else (self._notice_signal,)
        return (*STOP_SIGNALS, *notice)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._stop_requested.set()
        if signum == self._notice_signal:
            source = f"signal {signal_name(signum)}"
            self._observations.put(PreemptionNoticed(source, self._clock.monotonic()))
            return
        if signum == signal.SIGINT:
            self._interrupts += 1
            if self._interrupts > 1:  # a second Ctrl-C: no more grace
                self._kill_workers()
        self._observations.put(StopRequested(signum, self._clock.monotonic()))
