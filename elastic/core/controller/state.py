"""What the controller and its parts share between observations, and how one decision is written. Pure.

The phase machine, the attempts, the drain under way, what is known of the
nodes, and the records and commands of the decision being made: every phase
change becomes a :class:`Record`, every drain a :class:`StopWorkers`, the end a
:class:`FinishRun`. The controller (:mod:`elastic.core.controller.controller`) and
the parts it is composed of (:mod:`elastic.core.controller.rank_signs`,
:mod:`elastic.core.controller.exit_hangs`, :mod:`elastic.core.controller.capacity`)
each hold this one :class:`ControllerState` and write the decision through it, so a
decision's records keep the order they were decided in.

Two things are decided here and nowhere else: how a drain begins (:meth:`ControllerState.drain`:
the step reached so far, the phase change with the drain's grace, computed once, the
stop) and an attempt's fate (:attr:`ControllerState.relaunches`: restarted when its drain
leads back to pending, as the journal's fold reads it from the relaunch).
"""

from __future__ import annotations

import signal
from dataclasses import replace

from elastic.core.controller.attempts import Attempt, failure_fields, run_root_cause
from elastic.core.controller.drain import Draining, Grace, drain_grace, exit_status
from elastic.core.controller.machine import Phase, PhaseMachine, Trigger
from elastic.core.events import EventName, Record
from elastic.core.failures import Failure
from elastic.core.messages import Command, Decision, FinishRun, Outcome, PlanAttempt, StopWorkers
from elastic.core.training.init_hang import longest_init_s
from elastic.core.training.startup import breakdown

__all__ = ["STARTUP_RANKS_LISTED", "ControllerState"]

STARTUP_RANKS_LISTED = 16  # ranks whose own start-up phases a startup_profiled record lists (and the slowest)


class ControllerState:
    """The run's shared state and the decision being written; the controller decides what goes in."""

    def __init__(
        self, *, grace_s: float, failure_grace_s: float, left_out: tuple[str, ...] = (),
        longest_init_s: float | None = None,
    ) -> None:
        self._grace_s = grace_s
        self._failure_grace_s = failure_grace_s
        self.draining: Draining | None = None
        self.outcome: Outcome | None = None
        self.left_out = left_out  # nodes no later attempt is placed on (stragglers', suspected nodes)
        self.longest_init_s = longest_init_s  # the run's longest distributed initialisation (--init-timeout auto)
        self.available_nodes: int | None = None  # usable nodes at placement or the scale watch's last look
        self._attempts: list[Attempt] = []  # the current one last; those before it are over
        self._records: list[Record] = []
        self._commands: list[Command] = []
        self._now = 0.0
        self._reason = ""
        self._fields: dict[str, object] = {}  # what the next phase change's record adds
        self._machine = PhaseMachine(self._on_phase_change)

    # -- queries ---------------------------------------------------------------------

    @property
    def now(self) -> float:
        """The journal's clock: the time every record of the decision is dated by."""
        return self._now

    @property
    def phase(self) -> Phase:
        return self._machine.phase

    @property
    def done(self) -> bool:
        return self.phase is Phase.DONE

    @property
    def current(self) -> Attempt | None:
        """The attempt under way (or the last one); None before the first."""
        return self._attempts[-1] if self._attempts else None

    @property
    def attempt(self) -> int:
        return self._attempts[-1].number if self._attempts else 0

    @property
    def before(self) -> Attempt | None:
        """The attempt before the current one (None: the current one is this driver's first)."""
        return self._attempts[-2] if len(self._attempts) > 1 else None

    @property
    def earlier_causes(self) -> list[Failure]:
        """The root causes of this driver's attempts before the current one, oldest first."""
        return [a.root_cause for a in self._attempts[:-1] if a.root_cause is not None]

    @property
    def relaunches(self) -> bool:
        """The current attempt's fate, decided here only: restarted when its drain leads back to pending.

        Every drain toward a relaunch (a failure restarted, a scale-up, a notice, a
        straggler) says so by its ``next_phase``; a drain redirected to end the run (a
        stop, a budget refused after a revised root cause, a crash loop) no longer does.
        """
        return self.draining is not None and self.draining.next_phase is Phase.PENDING

    @property
    def attempts(self) -> tuple[Attempt, ...]:
        """This driver's attempts, oldest first; only the last one still changes."""
        return tuple(self._attempts)

    @property
    def restarts(self) -> int:
        """Attempts that ended in a restart."""
        current = int(bool(self._attempts) and self.relaunches)
        return sum(1 for a in self._attempts[:-1] if a.restarted) + current

    @property
    def ranks_alive(self) -> int:
        """Ranks of the current attempt that started and have not exited."""
        if not self._attempts or self.phase in (Phase.PENDING, Phase.DONE):
            return 0
        return self._attempts[-1].alive

    # -- writing the decision --------------------------------------------------------

    def start_decision(self) -> None:
        """A new observation: nothing recorded or commanded yet."""
        self._records, self._commands = [], []

    def decision(self) -> Decision:
        """The decision written since :meth:`ControllerState.start_decision`."""
        return Decision(tuple(self._records), tuple(self._commands))

    def advance(self, at: float) -> None:
        """Move the journal's clock to ``at``, never back: the one clock every record is dated by."""
        self._now = max(self._now, at)

    def record(self, event: EventName, **fields: object) -> None:
        """A record of the current attempt, dated now."""
        self._records.append(Record(event, self._now, self.attempt, fields))

    def record_for(self, attempt: int, event: EventName, fields: dict[str, object]) -> None:
        """A record of another attempt than the current one (the next one's backoff, a dead driver's)."""
        self._records.append(Record(event, self._now, attempt, fields))

    def command(self, command: Command) -> None:
        self._commands.append(command)

    def open_attempt(self, number: int, *, restarted: bool | None = None) -> Attempt:
        """A new current attempt, no drain under way; the one before is over, its fate sealed:
        ``restarted`` when given (a world re-formed in place, with no drain to say it), else
        :attr:`relaunches`."""
        if self._attempts:
            self._attempts[-1].restarted = self.relaunches if restarted is None else restarted
        opened = Attempt(number=number, started_at=self._now)
        self._attempts.append(opened)
        self.draining = None
        return opened

    def start_attempt(self, number: int, delay_s: float = 0.0) -> None:
        """Open attempt ``number`` and have it planned after ``delay_s`` (a backoff)."""
        self.open_attempt(number)
        self._commands.append(PlanAttempt(number, delay_s, self.left_out, self.longest_init_s))

    def drain(self, draining: Draining) -> None:
        """Begin a drain: the step reached so far, then the phase change with the drain's
        grace (which ranks get how long, and why: computed once, here), then the stop."""
        current = self.current
        if current is not None and self.draining is None:
            self.journal_step_reached(current, force=True)
        self.draining = draining
        if current is not None and current.drain_started_at is None:
            current.drain_started_at = self._now
        grace = self._grace(draining)
        self.fire(Trigger.DRAIN, reason=draining.detail, next=draining.next_phase.value, **grace.fields())
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

    def end_instead(self, ending: Draining) -> None:
        """Drain to end the run; a drain for a restart ends it instead. A drain that
        already ends the run keeps its outcome (success stays success). Either way the
        drain is final: nothing heard later turns it into a relaunch."""
        if self.draining is None:
            self.drain(replace(ending, final=True))
        elif self.draining.next_phase is Phase.PENDING:
            self.draining = replace(ending, final=True)
        else:
            self.draining = replace(self.draining, final=True)

    def journal_step_reached(self, current: Attempt, *, force: bool) -> None:
        """The step reached, when due (:meth:`elastic.core.controller.attempts.AttemptSteps.reached_due`)."""
        reached = current.steps.reached_due(self._now, force=force)
        if reached is not None:
            # When the step was seen (a drain's record comes later than that): the ledger's.
            self.record(
                EventName.STEP_REACHED, step=reached.step, rank=reached.rank,
                seen_s_ago=round(max(0.0, self._now - reached.at), 6),
            )

    def journal_startup(self, current: Attempt, *, force: bool) -> None:
        """The attempt's start-up by phase, once: when every rank's is known, or (``force``, its end) with
        those that are. The median and slowest over all of them; each rank's for the first
        :data:`STARTUP_RANKS_LISTED` ranks and the slowest."""
        if current.startup_journaled or not current.startup:
            return
        self.longest_init_s = longest_init_s([{str(r): dict(p) for r, p in current.startup.items()}], self.longest_init_s)
        if not force and len(current.startup) < current.world_size:
            return
        found = breakdown((rank, dict(phases)) for rank, phases in current.startup.items())
        current.startup_journaled = True
        if found is None:
            return
        listed = sorted(current.startup)[:STARTUP_RANKS_LISTED]
        if found.slowest_rank not in listed:
            listed.append(found.slowest_rank)
        self.record(EventName.STARTUP_PROFILED, **found.to_dict(),
                    by_rank={str(rank): dict(current.startup[rank]) for rank in listed})

    def fire(self, trigger: Trigger, *, reason: str, **fields: object) -> None:
        """Move the phase machine; its ``phase_changed`` record holds ``reason`` and ``fields``."""
        self._reason, self._fields = reason, fields
        self._machine.fire(trigger)

    def finish(self) -> None:
        """End the run as the drain says: its outcome, exit status and root cause."""
        assert self.draining is not None
        outcome = self.draining.outcome
        assert outcome is not None
        cause = run_root_cause(self._attempts, outcome)
        status = self.draining.exit_status
        if status is None:
            status = exit_status(outcome, cause, self.draining.stop_signal)
        self.outcome = outcome
        self.fire(Trigger.FINISH, reason=self.draining.detail)
        self.record(
            EventName.RUN_FINISHED,
            outcome=outcome.value,
            exit_status=status,
            reason=self.draining.detail,
            root_cause={**failure_fields(cause, tail=False), "attempt": cause.attempt} if cause else None,
        )
        self._commands.append(FinishRun(outcome, status, cause, self.draining.detail))

    # -- internals -------------------------------------------------------------------

    def _grace(self, draining: Draining) -> Grace:
        return drain_grace(
            draining.reason,
            grace_period_s=self._grace_s,
            failure_grace_s=self._failure_grace_s,
            deadline_s=draining.grace_s,
        )

    def _on_phase_change(self, source: Phase, dest: Phase, trigger: Trigger) -> None:
        self.record(
            EventName.PHASE_CHANGED,
            source=source.value, dest=dest.value, trigger=trigger.value, reason=self._reason, **self._fields,
        )
