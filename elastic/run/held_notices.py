"""A notice signal that comes while the launcher starts is held, not fatal: the hold, and its release.

SIGUSR1's default action ends the process, and a spot notice or Slurm's
``--signal=B:USR1@N`` may come at any moment, also in the second or more the
launcher spends importing itself and starting its backend. So ``python -m elastic``
holds SIGUSR1 before it imports anything else, the command line holds the notice
signal it chose (``--notice-signal``) once the flags are read, and the driver's
relay (:class:`elastic.run.signals.SignalRelay`) takes what was held as a notice.
A signal held that turns out not to be the notice signal (another subcommand, or
``--notice-signal`` names another) is released: its old handler is put back and,
if it came, it is raised again, so it does what it would have done. Once the run has ended, a
notice changes nothing, and :func:`ignore_after_run` keeps one from killing the launcher on its
way out (Python puts each signal it handled back to its default action as it finalises, so a
notice in the last moments would turn an exit 75, "requeue me", into death by SIGUSR1).

Imports nothing of elastic: it runs before the rest of the launcher is loaded.
"""

from __future__ import annotations

import os
import signal
import threading

__all__ = ["EARLY_NOTICE_SIGNAL", "held", "hold_notices", "ignore_after_run", "release_notice"]

EARLY_NOTICE_SIGNAL = signal.SIGUSR1  # --notice-signal's default, held before the flags are read

held: list[int] = []  # notice signals that came before the driver's relay took over
_before: dict[int, object] = {}  # each held signal's handler before the hold
_blocked: set[int] = set()  # held signals the launcher was started with blocked


def hold_notices(signum: int) -> None:
    """From now on ``signum`` is kept for the relay, not given its default action; a launcher started
    with it blocked (which keeps a notice pending through the exec and the interpreter's start, the
    one moment no handler can be there) has it unblocked, so the pending one is kept too. Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.signal(signum, lambda received, _frame: held.append(received))
    _before.setdefault(signum, previous)
    if signum in signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum}):
        _blocked.add(signum)


def release_notice(signum: int) -> None:
    """Undo :func:`hold_notices` for a signal that is not the notice signal after all: its old
    handler back, and the signal raised again if it came meanwhile. Main thread only."""
    if threading.current_thread() is not threading.main_thread() or signum not in _before:
        return
    previous = _before.pop(signum)
    signal.signal(signum, previous)  # type: ignore[arg-type]
    if signum in _blocked:  # blocked again, as it came: one that came meanwhile stays pending
        _blocked.discard(signum)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signum})
    if signum in held:
        held[:] = [other for other in held if other != signum]
        os.kill(os.getpid(), signum)


def ignore_after_run(signum: int) -> None:
    """The run has ended (its exit status decided): ``signum`` is ignored from now on. Main thread only."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signum, signal.SIG_IGN)
