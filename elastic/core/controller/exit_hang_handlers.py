"""The controller's handlers of exits that hang (``--exit-timeout``, ``--exit-hang``). Pure.

The first exit 0 while others run starts the timer (:class:`StartExitTimer`); the
ranks still alive and silent when it passes are killed as hung (:class:`KillExitHung`),
those still working are left running and the timer is set again for them; once every
rank has ended the attempt succeeds on evidence or is decided as a failure. The
rules are :mod:`elastic.core.controller.exit_hangs`. :class:`ExitHangHandlers` is a layer of
:class:`elastic.core.controller.controller.Controller`, which sets the attributes it declares
and decides after a failure.
"""

from __future__ import annotations

import abc

from elastic.core.controller.attempts import Attempt, failure_fields
from elastic.core.controller.drain import DrainReason, Draining
from elastic.core.events import EventName
from elastic.core.controller.exit_hangs import check_exit_timeout, judge_killed, reaped_hung, settle, starts_timer
from elastic.core.failures import Failure, WorkerExit
from elastic.core.controller.machine import Phase
from elastic.core.messages import ExitHungKilled, ExitTimeoutPassed, KillExitHung, Outcome, StartExitTimer
from elastic.core.policy.restarts import ExitHang
from elastic.core.rank_ends import Finished, HungRank
from elastic.core.controller.state import StepState

__all__ = ["ExitHangHandlers"]

_SIGNS_JOURNALED = 16  # spared ranks whose latest sign a record holds (all are in its ranks)
_JUDGED_JOURNALED = 16  # killed ranks whose judgement a record holds (all are in its ranks)


def _judged_fields(seen: HungRank, finished: Finished | None) -> dict[str, object]:
    """One killed rank's judgement as the ``exit_hung_killed`` record holds it."""
    return {
        "finished": finished is not None,
        "evidence": None if finished is None else finished.evidence.value,
        "why": None if finished is None else finished.why,
        "frame": seen.frame,
        "error": seen.error,
    }


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
        if current.exit_hung:
            self._settle_exit_hang(current)  # it beat the kill, or it was left working and is done
            return
        if self.draining is not None or self.phase not in (Phase.LAUNCHING, Phase.RUNNING):
            return
        deadline_at = starts_timer(current, exit, self.exit_timeout_s)
        if deadline_at is None:
            return
        assert self.exit_timeout_s is not None
        self._record(
            EventName.EXIT_TIMER_STARTED,
            rank=exit.rank,
            exit_timeout_s=self.exit_timeout_s,
            still_running=current.world_size - len(current.exited_ranks),
        )
        self._commands.append(StartExitTimer(current.number, deadline_at))

    def _on_exit_timeout(self, seen: ExitTimeoutPassed) -> None:
        """Ranks still alive ``--exit-timeout`` after a peer exited 0 and silent as long are hung
        at exit; those with a later sign of life are looked at again when they could be."""
        current = self._attempts[-1]
        if seen.attempt != current.number or self.phase is not Phase.RUNNING or self.draining is not None:
            return
        check = check_exit_timeout(current, self.exit_timeout_s, seen.silences, seen.at)
        if check is None:
            return
        if check.hung:
            current.exit_kill_at = self._now
            self._record(EventName.EXIT_HANG_DETECTED, ranks=list(check.hung), reason=check.reason)
            self._commands.append(KillExitHung(current.number, check.hung, check.reason, self._now))
        if check.recheck_at is not None:
            signs = {
                str(s.rank): {"sign": s.sign, "silent_s": round(s.silent_s, 3)}
                for s in check.spared[:_SIGNS_JOURNALED]
            }
            self._record(
                EventName.EXIT_HANG_SPARED,
                ranks=[s.rank for s in check.spared],
                reason=check.spared_reason,
                signs=signs,
                recheck_in_s=round(check.recheck_at - seen.at, 3),
            )
            self._commands.append(StartExitTimer(current.number, check.recheck_at))

    def _on_exit_hung_killed(self, seen: ExitHungKilled) -> None:
        current = self._attempts[-1]
        if seen.attempt != current.number or not current.exit_hung_unheard.intersection(seen.ranks):
            return
        current.exit_hung_unheard.difference_update(seen.ranks)
        judged = judge_killed(current, seen.seen)
        self._record(
            EventName.EXIT_HUNG_KILLED,
            ranks=list(seen.ranks),
            declared_finished=sorted(h.rank for h in seen.seen if h.declared_done),
            # Each killed rank's evidence that it finished (None: none), and where its stack was.
            judged={str(h.rank): _judged_fields(h, judged.get(h.rank)) for h in seen.seen[:_JUDGED_JOURNALED]},
        )
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
