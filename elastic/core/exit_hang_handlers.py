"""The controller's handlers of exits that hang (``--exit-timeout``, ``--exit-hang``). Pure.

The first exit 0 while others run starts the timer (:class:`StartExitTimer`); the
ranks still alive when it passes are killed as hung (:class:`KillExitHung`); once
they are reaped the attempt succeeds on evidence or is decided as a failure. The
rules are :mod:`elastic.core.exit_hangs`. :class:`ExitHangHandlers` is a layer of
:class:`elastic.core.controller.Controller`, which sets the attributes it declares
and decides after a failure.
"""

from __future__ import annotations

import abc

from elastic.core.attempts import Attempt, failure_fields
from elastic.core.draining import DrainReason, Draining
from elastic.core.events import EventName
from elastic.core.exit_hangs import hung_at_exit, reaped_hung, settle, starts_timer
from elastic.core.failures import Failure, WorkerExit
from elastic.core.machine import Phase
from elastic.core.messages import ExitHungKilled, ExitTimeoutPassed, KillExitHung, Outcome, StartExitTimer
from elastic.core.policy import ExitHang
from elastic.core.step_state import StepState

__all__ = ["ExitHangHandlers"]


class ExitHangHandlers(StepState, abc.ABC):
    """Times the ranks still running after a peer exited 0, kills them as hung, settles the attempt."""

    # Set by the controller's constructor.
    exit_timeout_s: float | None
    exit_hang: ExitHang

    @abc.abstractmethod
    def _decide_after(self, cause: Failure) -> None:
        """Restart or end after ``cause``: the controller's decision (it implements this)."""

    def _on_clean_exit(self, current: Attempt, exit: WorkerExit) -> None:
        """A rank exited 0 while others run: the first one starts the ``--exit-timeout`` clock."""
        if current.exit_hung_pending:
            current.exit_hung_pending.discard(exit.rank)  # it beat the kill
            self._settle_exit_hang(current)
            return
        if (
            self.draining is not None
            or self.phase not in (Phase.LAUNCHING, Phase.RUNNING)
            or not starts_timer(current, exit, self.exit_timeout_s)
        ):
            return
        assert self.exit_timeout_s is not None
        self._record(
            EventName.EXIT_TIMER_STARTED,
            rank=exit.rank,
            exit_timeout_s=self.exit_timeout_s,
            still_running=current.world_size - len(current.exited_ranks),
        )
        self._commands.append(StartExitTimer(current.number, exit.observed_at + self.exit_timeout_s))

    def _on_exit_timeout(self, seen: ExitTimeoutPassed) -> None:
        """Ranks still alive ``--exit-timeout`` after a peer exited 0 are hung at exit."""
        current = self._attempts[-1]
        if seen.attempt != current.number or self.phase is not Phase.RUNNING or self.draining is not None:
            return
        hung = hung_at_exit(current, self.exit_timeout_s)
        if hung is None:
            return
        alive, reason = hung
        self._record(EventName.EXIT_HANG_DETECTED, ranks=list(alive), reason=reason)
        self._commands.append(KillExitHung(current.number, alive, reason, self._now))

    def _on_exit_hung_killed(self, seen: ExitHungKilled) -> None:
        current = self._attempts[-1]
        if seen.attempt != current.number or not current.exit_hung or current.exit_hung_finished is not None:
            return
        current.exit_hung_finished = seen.finished
        self._record(EventName.EXIT_HUNG_KILLED, ranks=list(seen.ranks), declared_finished=sorted(seen.finished))
        self._settle_exit_hang(current)

    def _on_exit_hung_exit(self, current: Attempt, exit: WorkerExit) -> bool:
        """A rank killed as hung at exit was reaped; False when it ended some other way."""
        failure = reaped_hung(current, exit)
        if failure is None:
            return False
        self._record(EventName.WORKER_FAILED, **failure_fields(failure))
        self._settle_exit_hang(current)
        return True

    def _settle_exit_hang(self, current: Attempt) -> None:
        if self.draining is not None:
            return
        settled = settle(current, self.exit_hang)
        if isinstance(settled, Failure):
            self._decide_after(settled)
        elif settled is not None:
            self._drain(Draining(DrainReason.SUCCEEDED, Phase.DONE, Outcome.SUCCEEDED, settled))
