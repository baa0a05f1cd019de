"""What the controller holds between observations, and how one step is written. Pure.

The phase machine, the attempts, the drain under way, and the records and
commands of the step being decided: every phase change becomes a
:class:`Record`, every drain a :class:`StopWorkers`, the end a :class:`FinishRun`.
"""

from __future__ import annotations

import signal
from dataclasses import replace

from elastic.core.controller.attempts import Attempt, AttemptSummary, failure_fields, run_root_cause
from elastic.core.controller.drain import DEFAULT_FAILURE_GRACE_S, Draining, Grace, drain_grace, exit_status
from elastic.core.events import EventName, Record
from elastic.core.controller.machine import Phase, PhaseMachine, Trigger
from elastic.core.messages import Command, FinishRun, Outcome, PlanAttempt, StopWorkers

__all__ = ["StepState"]


class StepState:
    """The run's state and the step being written; :class:`Controller` adds the decisions."""

    def __init__(self, *, grace_s: float, failure_grace_s: float = DEFAULT_FAILURE_GRACE_S) -> None:
        self.grace_s = grace_s
        self.failure_grace_s = failure_grace_s
        self.draining: Draining | None = None
        self.outcome: Outcome | None = None
        self._attempts: list[Attempt] = []
        self._ended: list[AttemptSummary] = []  # summaries of attempts before the current one
        self._records: list[Record] = []
        self._commands: list[Command] = []
        self._now = 0.0
        self.left_out: tuple[str, ...] = ()  # nodes no later attempt is placed on (stragglers')
        self._reason = ""
        self._machine = PhaseMachine(self._on_phase_change)

    # -- queries ---------------------------------------------------------------------

    @property
    def phase(self) -> Phase:
        return self._machine.phase

    @property
    def attempt(self) -> int:
        return self._attempts[-1].number if self._attempts else 0

    @property
    def attempts(self) -> tuple[AttemptSummary, ...]:
        if not self._attempts:
            return ()
        return (*self._ended, self._attempts[-1].summary())

    @property
    def restarts(self) -> int:
        """Attempts that ended in a restart."""
        return sum(1 for a in self._attempts if a.restarted)

    @property
    def ranks_alive(self) -> int:
        """Ranks of the current attempt that started and have not exited."""
        if not self._attempts or self.phase in (Phase.PENDING, Phase.DONE):
            return 0
        return self._attempts[-1].alive

    @property
    def done(self) -> bool:
        return self.phase is Phase.DONE

    # -- writing the step ------------------------------------------------------------

    def _start_attempt(self, number: int, delay_s: float = 0.0) -> None:
        if self._attempts:  # the one before is over: its summary no longer changes
            self._ended.append(self._attempts[-1].summary())
        self._attempts.append(Attempt(number=number, started_at=self._now))
        self.draining = None
        self._commands.append(PlanAttempt(number, delay_s, self.left_out))

    def _drain(self, draining: Draining) -> None:
        self.draining = draining
        if self._attempts and self._attempts[-1].drain_started_at is None:
            self._attempts[-1].drain_started_at = self._now
        self._fire(Trigger.DRAIN, reason=draining.detail)
        grace = self._grace(draining)
        self._commands.append(
            StopWorkers(
                attempt=self.attempt,
                # 0 is a valid choice (--preempt-signal none): no signal, the deadline, SIGKILL.
                signal=signal.SIGTERM if draining.stop_signal is None else draining.stop_signal,
                grace_s=grace.seconds,
                collateral=grace.collateral,
            )
        )

    def _end_instead(self, ending: Draining) -> None:
        """Drain to end the run; a drain for a restart ends it instead. A drain that
        already ends the run keeps its outcome (success stays success). Either way the
        drain is final: nothing heard later turns it into a relaunch."""
        if self.draining is None:
            self._drain(replace(ending, final=True))
        elif self.draining.next_phase is Phase.PENDING:
            self._attempts[-1].restarted = False
            self.draining = replace(ending, final=True)
        else:
            self.draining = replace(self.draining, final=True)

    def _grace(self, draining: Draining) -> Grace:
        return drain_grace(
            draining.reason,
            grace_period_s=self.grace_s,
            failure_grace_s=self.failure_grace_s,
            deadline_s=draining.grace_s,
        )

    def _fire(self, trigger: Trigger, *, reason: str) -> None:
        self._reason = reason
        self._machine.fire(trigger)

    def _on_phase_change(self, source: Phase, dest: Phase, trigger: Trigger) -> None:
        fields: dict[str, object] = {
            "source": source.value,
            "dest": dest.value,
            "trigger": trigger.value,
            "reason": self._reason,
        }
        if dest is Phase.DRAINING and self.draining is not None:
            fields["next"] = self.draining.next_phase.value
            fields.update(self._grace(self.draining).fields())  # which grace the ranks get, and why
        self._record(EventName.PHASE_CHANGED, **fields)

    def _advance(self, at: float) -> None:
        """Move the journal's clock to ``at``, never back: the one clock every record is dated by."""
        self._now = max(self._now, at)

    def _record(self, event: EventName, **fields: object) -> None:
        self._records.append(Record(event, self._now, self.attempt, fields))

    def _finish(self) -> None:
        """End the run as the drain says: its outcome, exit status and root cause."""
        assert self.draining is not None
        outcome = self.draining.outcome
        assert outcome is not None
        cause = run_root_cause(self._attempts, outcome)
        status = self.draining.exit_status
        if status is None:
            status = exit_status(outcome, cause, self.draining.stop_signal)
        self.outcome = outcome
        self._fire(Trigger.FINISH, reason=self.draining.detail)
        self._record(
            EventName.RUN_FINISHED,
            outcome=outcome.value,
            exit_status=status,
            reason=self.draining.detail,
            root_cause={**failure_fields(cause, tail=False), "attempt": cause.attempt} if cause else None,
        )
        self._commands.append(FinishRun(outcome, status, cause, self.draining.detail))
