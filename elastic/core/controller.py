"""The run's decisions: observations in, records and commands out. Pure: no I/O, no clock."""

from __future__ import annotations

import enum
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from elastic.core.events import EventName, Record
from elastic.core.exit_codes import ExitCode
from elastic.core.fold import made_progress
from elastic.core.failures import (
    Failure,
    FailureKind,
    WorkerExit,
    classify,
    root_cause,
    signal_name,
    to_failure,
)
from elastic.core.machine import Phase, PhaseMachine, Trigger
from elastic.core.messages import (
    AttemptLaunched,
    AttemptPlanned,
    BackendFailed,
    Command,
    ExitHungKilled,
    ExitTimeoutPassed,
    FinishRun,
    KillExitHung,
    LaunchAttempt,
    NodesUnavailable,
    Observation,
    Outcome,
    PlanAttempt,
    Resumed,
    RunStarted,
    ScaleCheck,
    StartExitTimer,
    Step,
    StopRequested,
    StopWorkers,
    WorkerExited,
    WorkersStopped,
)
from elastic.core.policy import BudgetName, ExitHang, RestartPolicy, ScaleUp

__all__ = [
    "COLLATERAL_LISTED",
    "AttemptSummary",
    "Controller",
    "DrainReason",
    "Draining",
    "exit_status",
]

# Collateral failures of one attempt recorded one by one; the rest are counted per
# node and recorded once, when the drain ends (a 1,000-node group has 7,999).
COLLATERAL_LISTED = 16


# -- the states' reasons ---------------------------------------------------------------


class DrainReason(enum.Enum):
    SUCCEEDED = "succeeded"
    FAILURE = "failure"
    STOP_REQUESTED = "stop_requested"
    SCALE_UP = "scale_up"


@dataclass(frozen=True)
class Draining:
    """Why the group is being drained and where the run goes next."""

    reason: DrainReason
    next_phase: Phase
    outcome: Outcome | None
    detail: str
    stop_signal: int | None = None
    exit_status: int | None = None  # overrides the root cause's status


@dataclass(frozen=True)
class AttemptSummary:
    """What one attempt amounted to (the report's rows)."""

    attempt: int
    started_at: float
    launched_at: float | None
    ended_at: float | None
    world_size: int
    failures: tuple[Failure, ...]
    root_cause: Failure | None
    restarted: bool
    resume_step: int | None = None
    checkpoint_step: int | None = None
    drain_started_at: float | None = None  # the end of its running phase, if it ran
    # Collateral failures beyond the first COLLATERAL_LISTED, counted per node, not in ``failures``.
    collateral_counted: Mapping[str, int] = field(default_factory=dict)

    @property
    def collateral(self) -> int:
        """Every collateral failure of the attempt: listed and counted."""
        listed = sum(1 for f in self.failures if f.kind is FailureKind.COLLATERAL)
        return listed + sum(self.collateral_counted.values())

    def running_s(self, now: float) -> float:
        """Time in the running phase: from launch to the start of the drain (or ``now``)."""
        if self.launched_at is None:
            return 0.0
        end = self.drain_started_at if self.drain_started_at is not None else now
        return max(0.0, end - self.launched_at)


@dataclass
class _Attempt:
    number: int
    started_at: float
    launched_at: float | None = None
    drain_started_at: float | None = None
    ended_at: float | None = None
    world_size: int = 0
    succeeded_ranks: set[int] = field(default_factory=set)
    exited_ranks: set[int] = field(default_factory=set)
    failures: list[Failure] = field(default_factory=list)
    restarted: bool = False
    resume_step: int | None = None
    checkpoint_step: int | None = None
    nodes: int = 0
    charged: BudgetName | None = None  # the budget this attempt's restart was charged to
    cause: Failure | None = None  # root_cause(failures), kept as failures come in
    collateral_listed: int = 0
    collateral_counted: dict[str, int] = field(default_factory=dict)  # node -> failures not listed

    def add_failure(self, failure: Failure) -> None:
        """Append a failure and keep the root cause current without a scan."""
        self.failures.append(failure)
        self.cause = root_cause((failure,) if self.cause is None else (self.cause, failure))

    # --exit-timeout: the first rank that exited 0 and when; the ranks then killed as
    # hung at exit, those not yet reaped, and those that had declared themselves done.
    exit_timer_from: tuple[int, float] | None = None
    exit_hung: set[int] = field(default_factory=set)
    exit_hung_pending: set[int] = field(default_factory=set)
    exit_hung_finished: frozenset[int] | None = None

    def summary(self) -> AttemptSummary:
        return AttemptSummary(
            attempt=self.number,
            started_at=self.started_at,
            launched_at=self.launched_at,
            ended_at=self.ended_at,
            world_size=self.world_size,
            failures=tuple(self.failures),
            root_cause=self.cause,
            restarted=self.restarted,
            resume_step=self.resume_step,
            checkpoint_step=self.checkpoint_step,
            drain_started_at=self.drain_started_at,
            collateral_counted=dict(self.collateral_counted),
        )


def exit_status(outcome: Outcome, cause: Failure | None, stop_signal: int | None) -> int:
    """DESIGN §10: 0; 128+N when stopped by signal N; else the root cause's own status."""
    if outcome is Outcome.SUCCEEDED:
        return 0
    if outcome is Outcome.STOPPED:
        return 128 + (stop_signal or signal.SIGTERM)
    return cause.exit_status if cause is not None else 1


class Controller:
    """Decides the run: feed it observations, carry out the commands it returns.

    Holds the phase machine, the attempts and the restart policy; never sleeps,
    spawns or logs. Every phase change becomes a :class:`Record` in the step.
    """

    def __init__(
        self,
        policy: RestartPolicy,
        *,
        grace_s: float,
        tracks_progress: bool = False,
        max_no_progress: int | None = None,
        first_attempt: int = 0,
        scale_up: ScaleUp | None = None,
        exit_timeout_s: float | None = None,
        exit_hang: ExitHang = ExitHang.RESTART,
    ) -> None:
        self._first_attempt = first_attempt
        self.exit_timeout_s = exit_timeout_s
        self.exit_hang = exit_hang
        self.scale_up = scale_up or ScaleUp(enabled=False)
        self._last_grown_at: float | None = None
        self.policy = policy
        self.grace_s = grace_s
        self.tracks_progress = tracks_progress
        self.max_no_progress = max_no_progress
        self._failures_in_a_row = 0
        self.draining: Draining | None = None
        self.outcome: Outcome | None = None
        self.started_at: float | None = None
        self._attempts: list[_Attempt] = []
        self._ended: list[AttemptSummary] = []  # summaries of attempts before the current one
        self._stop_requests = 0
        self._records: list[Record] = []
        self._commands: list[Command] = []
        self._now = 0.0
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
        current = self._attempts[-1]
        return max(0, current.world_size - len(current.exited_ranks))

    @property
    def done(self) -> bool:
        return self.phase is Phase.DONE

    # -- the one entry point ---------------------------------------------------------

    def handle(self, observation: Observation) -> Step:
        self._records, self._commands = [], []
        if isinstance(observation, RunStarted):
            self._now = observation.at
            self.started_at = observation.at
            if observation.resumed is not None:
                self._on_resumed(observation.resumed)
            else:
                self._start_attempt(self._first_attempt)
        elif isinstance(observation, AttemptPlanned):
            self._now = observation.at
            self._on_planned(observation)
        elif isinstance(observation, ScaleCheck):
            self._now = observation.at
            self._on_scale_check(observation)
        elif isinstance(observation, NodesUnavailable):
            self._now = observation.at
            self._on_nodes_unavailable(observation)
        elif isinstance(observation, AttemptLaunched):
            self._now = observation.at
            self._on_launched(observation)
        elif isinstance(observation, WorkerExited):
            self._now = observation.exit.observed_at
            self._on_worker_exit(observation.exit)
        elif isinstance(observation, StopRequested):
            self._now = observation.at
            self._on_stop_requested(observation.signum)
        elif isinstance(observation, WorkersStopped):
            self._now = observation.at
            self._on_workers_stopped(observation.attempt, observation.checkpoint_step)
        elif isinstance(observation, ExitTimeoutPassed):
            self._now = observation.at
            self._on_exit_timeout(observation)
        elif isinstance(observation, ExitHungKilled):
            self._now = observation.at
            self._on_exit_hung_killed(observation)
        elif isinstance(observation, BackendFailed):
            self._now = observation.at
            self._on_backend_failed(observation)
        return Step(tuple(self._records), tuple(self._commands))

    # -- handlers --------------------------------------------------------------------

    def _start_attempt(self, number: int, delay_s: float = 0.0) -> None:
        if self._attempts:  # the one before is over: its summary no longer changes
            self._ended.append(self._attempts[-1].summary())
        self._attempts.append(_Attempt(number=number, started_at=self._now))
        self.draining = None
        self._commands.append(PlanAttempt(number, delay_s))

    def _on_planned(self, seen: AttemptPlanned) -> None:
        current = self._attempts[-1]
        if seen.attempt != current.number or self.phase is not Phase.PENDING:
            return
        current.world_size = seen.world_size
        current.resume_step = seen.resume_step
        current.nodes = seen.nodes
        if seen.plan:
            self._record(EventName.ATTEMPT_STARTED, **seen.plan)
        self._fire(Trigger.LAUNCH, reason=f"{seen.world_size} workers planned")
        self._commands.append(LaunchAttempt(seen.attempt))

    def _on_scale_check(self, seen: ScaleCheck) -> None:
        current = self._attempts[-1]
        if seen.attempt != current.number or self.phase is not Phase.RUNNING or self.draining:
            return
        new_checkpoint = made_progress(current.resume_step, seen.checkpoint_step)
        if not self.scale_up.should_grow(
            now=self._now,
            nodes=current.nodes,
            available=seen.available_nodes,
            new_checkpoint=new_checkpoint,
            last_grown_at=self._last_grown_at,
        ):
            return
        self._last_grown_at = self._now
        grow_to = min(seen.available_nodes, self.scale_up.max_nodes)
        detail = f"scale up from {current.nodes} to {grow_to} nodes after checkpoint {seen.checkpoint_step}"
        self._record(EventName.SCALE_UP_SCHEDULED, reason=detail, nodes=current.nodes, to=grow_to)
        current.restarted = True
        self._drain(Draining(DrainReason.SCALE_UP, Phase.PENDING, None, detail))

    def _on_nodes_unavailable(self, seen: NodesUnavailable) -> None:
        if seen.attempt != self.attempt or self.phase is not Phase.PENDING:
            return
        self._drain(
            Draining(
                DrainReason.FAILURE, Phase.DONE, Outcome.FAILED,
                f"needed at least {seen.needed} nodes, {seen.seen} available",
                exit_status=int(ExitCode.NODES_UNAVAILABLE),
            )
        )

    def _on_launched(self, seen: AttemptLaunched) -> None:
        current = self._attempts[-1]
        if seen.attempt != current.number or self.phase is not Phase.LAUNCHING:
            return
        current.launched_at = seen.at
        current.world_size = seen.world_size
        self._fire(Trigger.LAUNCHED, reason=f"{seen.world_size} workers started")

    def _on_worker_exit(self, exit: WorkerExit) -> None:
        current = self._attempts[-1] if self._attempts else None
        if current is None or exit.attempt != current.number or self.done:
            return
        first_failure = current.cause
        current.exited_ranks.add(exit.rank)
        if exit.rank in current.exit_hung and self._on_exit_hung_exit(current, exit):
            return
        kind = classify(
            exit, stop_sent=self.draining is not None, failure_seen=first_failure is not None
        )
        if kind is None:
            current.succeeded_ranks.add(exit.rank)
            self._record(EventName.WORKER_EXITED, rank=exit.rank, node=exit.node, exit_code=0)
            if (
                self.phase is Phase.RUNNING
                and len(current.succeeded_ranks) == current.world_size
            ):
                self._drain(
                    Draining(DrainReason.SUCCEEDED, Phase.DONE, Outcome.SUCCEEDED,
                             "every worker exited 0")
                )
                return
            self._on_clean_exit(current, exit)
            return
        if kind is FailureKind.COLLATERAL and self._node_loss_explains(current, exit):
            self._revise_cause(current, to_failure(exit, FailureKind.NODE_LOST))
            return
        failure = to_failure(exit, kind)
        if kind is FailureKind.COLLATERAL:
            if current.collateral_listed >= COLLATERAL_LISTED:
                counted = current.collateral_counted
                counted[exit.node] = counted.get(exit.node, 0) + 1
                return
            current.collateral_listed += 1
        current.add_failure(failure)
        self._record(EventName.WORKER_FAILED, **_failure_fields(failure))
        if kind is FailureKind.COLLATERAL or self.draining is not None:
            return
        self._decide_after(failure)

    def _node_loss_explains(self, current: _Attempt, exit: WorkerExit) -> bool:
        """Whether a node found lost while draining explains the failure that began it.

        A machine that vanishes is noticed late (Ray declares it dead only after
        its health checks fail), while its peers fail at once, when their
        collective breaks. Those peers' failures were the consequence.
        """
        cause = current.cause
        return (
            exit.node_lost is not None
            and self.draining is not None
            and self.draining.reason is DrainReason.FAILURE
            and cause is not None
            and cause.kind in _PEER_FAILURE_KINDS
            and cause.node != exit.node
        )

    def _revise_cause(self, current: _Attempt, lost: Failure) -> None:
        """Make the lost node the attempt's root cause and decide the restart again."""
        previous = current.cause
        assert previous is not None and self.draining is not None
        current.failures = [
            f if f.kind is FailureKind.COLLATERAL else replace(f, kind=FailureKind.COLLATERAL)
            for f in current.failures
        ]
        current.cause = None
        current.add_failure(lost)
        self._record(EventName.WORKER_FAILED, **_failure_fields(lost))
        refunded = current.charged
        if refunded is not None:
            self.policy = self.policy.refunded(refunded)
        self._record(
            EventName.ROOT_CAUSE_REVISED,
            previous=previous.describe(),
            revised=lost.describe(),
            refunded=refunded.value if refunded else None,
            reason="its node was lost; the earlier failure was a consequence",
        )
        decision, self.policy = self.policy.decide(lost, self._now)
        current.restarted = decision.restart
        current.charged = decision.budget if decision.restart else None
        if decision.restart:
            self._record(
                EventName.RESTART_SCHEDULED,
                reason=decision.reason,
                budget=decision.budget.value if decision.budget else None,
                remaining=(
                    self.policy.budget(decision.budget).remaining(self._now)
                    if decision.budget else None
                ),
            )
            self.draining = replace(
                self.draining, next_phase=Phase.PENDING, outcome=None, detail=lost.describe()
            )
        else:
            self.draining = replace(
                self.draining, next_phase=Phase.DONE, outcome=Outcome.FAILED,
                detail=f"{lost.describe()}; {decision.reason}",
            )

    def _decide_after(self, cause: Failure) -> None:
        decision, self.policy = self.policy.decide(cause, self._now)
        self._attempts[-1].charged = decision.budget if decision.restart else None
        if decision.restart:
            budget = decision.budget
            self._record(
                EventName.RESTART_SCHEDULED,
                reason=decision.reason,
                budget=budget.value if budget else None,
                remaining=self.policy.budget(budget).remaining(self._now) if budget else None,
            )
            self._attempts[-1].restarted = True
            self._drain(Draining(DrainReason.FAILURE, Phase.PENDING, None, cause.describe()))
            return
        event = (
            EventName.BUDGET_EXHAUSTED
            if decision.budget is not None
            else EventName.RESTART_REFUSED
        )
        self._record(
            event,
            reason=decision.reason,
            budget=decision.budget.value if decision.budget else None,
        )
        self._drain(
            Draining(DrainReason.FAILURE, Phase.DONE, Outcome.FAILED,
                     f"{cause.describe()}; {decision.reason}")
        )

    def _on_stop_requested(self, signum: int) -> None:
        if self.done:
            return
        self._stop_requests += 1
        self._record(
            EventName.STOP_REQUESTED,
            signal=signal_name(signum),
            count=self._stop_requests,
        )
        stopped = Draining(
            DrainReason.STOP_REQUESTED, Phase.DONE, Outcome.STOPPED,
            f"launcher received {signal_name(signum)}", stop_signal=signum,
        )
        if self.draining is None:
            self._drain(stopped)
        elif self.draining.next_phase is Phase.PENDING:
            # Already tearing down for a restart: finish instead of relaunching.
            self._attempts[-1].restarted = False
            self.draining = stopped

    def _on_backend_failed(self, seen: BackendFailed) -> None:
        """No exit can be heard any more: drain what can be reached and end the run."""
        if self.done:
            return
        self._record(EventName.BACKEND_FAILED, reason=seen.reason, requeue=seen.requeue)
        failed = Draining(
            DrainReason.FAILURE, Phase.DONE, Outcome.FAILED, seen.reason,
            exit_status=int(ExitCode.NODES_UNAVAILABLE if seen.requeue else ExitCode.INTERNAL_ERROR),
        )
        if self.draining is None:
            self._drain(failed)
        elif self.draining.next_phase is Phase.PENDING:
            # Tearing down for a restart that cannot happen: end instead. A drain
            # that already ends the run keeps its outcome (success stays success).
            self._attempts[-1].restarted = False
            self.draining = failed

    def _count_end(self, progressed: bool) -> None:
        """An attempt ended toward a relaunch: the streak (and backoff level) goes on or restarts."""
        self._failures_in_a_row = 0 if progressed else self._failures_in_a_row + 1

    def _crash_loop(self) -> str | None:
        """The crash loop's detail when ``--max-no-progress`` attempts in a row ended without progress."""
        if (
            not self.tracks_progress
            or self.max_no_progress is None
            or self._failures_in_a_row < self.max_no_progress
        ):
            return None
        return (
            f"crash loop: {self._failures_in_a_row} attempts in a row ended without a "
            f"newer checkpoint (--max-no-progress {self.max_no_progress})"
        )

    def _backoff_s(self, number: int) -> float:
        """The wait before attempt ``number``: none after progress (or the first failure), else
        the backoff at the streak's level; journaled when there is one."""
        level = self._failures_in_a_row - 1
        delay_s = self.policy.backoff.delay_s(level) if level > 0 else 0.0
        if delay_s > 0:
            self._records.append(
                Record(EventName.BACKOFF_STARTED, self._now, number,
                       {"delay_s": round(delay_s, 3), "level": level})
            )
        return delay_s

    def _relaunch(self, ended: _Attempt) -> None:
        """Back to pending: at once after progress, else after a backoff; or a crash loop."""
        detail = self._crash_loop()
        if detail is not None:
            ended.restarted = False
            self._record(EventName.CRASH_LOOP_DETECTED, reason=detail)
            assert self.draining is not None
            self.draining = replace(
                self.draining,
                next_phase=Phase.DONE,
                outcome=Outcome.FAILED,
                detail=detail,
                exit_status=int(ExitCode.CRASH_LOOP),
            )
            self._finish()
            return
        delay_s = self._backoff_s(ended.number + 1)
        self._fire(Trigger.RELAUNCH, reason=self.draining.detail if self.draining else "")
        self._start_attempt(ended.number + 1, delay_s)

    def _on_resumed(self, resumed: Resumed) -> None:
        """Take over a dead driver's run: its streak goes on, the attempt it ran ended with it."""
        self._failures_in_a_row = resumed.no_progress_streak
        if resumed.interrupted is not None:
            progressed = self.tracks_progress and made_progress(
                resumed.interrupted_resume_step, resumed.checkpoint_step
            )
            self._count_end(progressed)
            self._records.append(
                Record(EventName.WORKERS_STOPPED, self._now, resumed.interrupted, {
                    "checkpoint_step": resumed.checkpoint_step,
                    "made_progress": progressed,
                    "no_progress_streak": self._failures_in_a_row,
                    "reason": "its driver died",
                })
            )
        detail = self._crash_loop()
        if detail is None:
            self._start_attempt(self._first_attempt, self._backoff_s(self._first_attempt))
            return
        self._attempts.append(_Attempt(number=self._first_attempt, started_at=self._now))
        self._record(EventName.CRASH_LOOP_DETECTED, reason=detail)
        self._drain(
            Draining(DrainReason.FAILURE, Phase.DONE, Outcome.FAILED, detail,
                     exit_status=int(ExitCode.CRASH_LOOP))
        )

    def _on_workers_stopped(self, attempt: int, checkpoint_step: int | None) -> None:
        current = self._attempts[-1]
        if attempt != current.number or self.phase is not Phase.DRAINING:
            return
        assert self.draining is not None
        current.ended_at = self._now
        current.checkpoint_step = checkpoint_step
        progressed = self.tracks_progress and made_progress(current.resume_step, checkpoint_step)
        if self.draining.next_phase is Phase.PENDING:
            self._count_end(progressed)
        if current.collateral_counted:
            counted = current.collateral_counted
            self._record(
                EventName.COLLATERAL_COUNTED,
                kind=FailureKind.COLLATERAL.value,
                count=sum(counted.values()),
                by_node=dict(counted),
                listed=current.collateral_listed,
            )
        self._record(
            EventName.WORKERS_STOPPED,
            checkpoint_step=checkpoint_step,
            made_progress=progressed,
            no_progress_streak=self._failures_in_a_row,
        )
        if self.draining.next_phase is Phase.PENDING:
            self._relaunch(current)
            return
        self._finish()

    def _finish(self) -> None:
        assert self.draining is not None
        outcome = self.draining.outcome
        assert outcome is not None
        cause = None if outcome is Outcome.SUCCEEDED else self._run_root_cause()
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
            root_cause={**_failure_fields(cause, tail=False), "attempt": cause.attempt} if cause else None,
        )
        self._commands.append(FinishRun(outcome, status, cause, self.draining.detail))

    # -- exit hangs (--exit-timeout) -------------------------------------------------

    def _on_clean_exit(self, current: _Attempt, exit: WorkerExit) -> None:
        """A rank exited 0 while others run: the first one starts the ``--exit-timeout`` clock."""
        if current.exit_hung_pending:
            current.exit_hung_pending.discard(exit.rank)  # it beat the kill
            self._settle_exit_hang(current)
            return
        if (
            self.exit_timeout_s is None
            or current.exit_timer_from is not None
            or self.draining is not None
            or self.phase not in (Phase.LAUNCHING, Phase.RUNNING)
        ):
            return
        current.exit_timer_from = (exit.rank, exit.observed_at)
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
        if (
            seen.attempt != current.number
            or self.phase is not Phase.RUNNING
            or self.draining is not None
            or current.exit_timer_from is None
            or current.exit_hung
        ):
            return
        alive = tuple(r for r in range(current.world_size) if r not in current.exited_ranks)
        if not alive:
            return
        reason = (
            f"still running {self.exit_timeout_s:g} s after rank {current.exit_timer_from[0]} exited 0"
        )
        current.exit_hung = set(alive)
        current.exit_hung_pending = set(alive)
        self._record(EventName.EXIT_HANG_DETECTED, ranks=list(alive), reason=reason)
        self._commands.append(KillExitHung(current.number, alive, reason, self._now))

    def _on_exit_hung_killed(self, seen: ExitHungKilled) -> None:
        current = self._attempts[-1]
        if (
            seen.attempt != current.number
            or not current.exit_hung
            or current.exit_hung_finished is not None
        ):
            return
        current.exit_hung_finished = seen.finished
        self._record(
            EventName.EXIT_HUNG_KILLED,
            ranks=list(seen.ranks),
            declared_finished=sorted(seen.finished),
        )
        self._settle_exit_hang(current)

    def _on_exit_hung_exit(self, current: _Attempt, exit: WorkerExit) -> bool:
        """A rank killed as hung at exit was reaped; False when it ended some other way."""
        if exit.hung is None or exit.node_lost is not None or exit.launch_error is not None:
            return False
        failure = to_failure(exit, FailureKind.EXIT_HUNG)
        current.add_failure(failure)
        self._record(EventName.WORKER_FAILED, **_failure_fields(failure))
        current.exit_hung_pending.discard(exit.rank)
        self._settle_exit_hang(current)
        return True

    def _settle_exit_hang(self, current: _Attempt) -> None:
        """Once every rank killed as hung at exit is reaped: success on evidence, else ``--exit-hang``.

        The evidence is each such rank's own word that it finished; with
        ``--exit-hang succeed``, a peer's exit 0 is taken as enough.
        """
        if (
            current.exit_hung_pending
            or current.exit_hung_finished is None
            or self.draining is not None
        ):
            return
        hung = [f for f in current.failures if f.kind is FailureKind.EXIT_HUNG]
        if not hung:
            return  # each exited 0 before the kill: the last exit 0 finished the run
        killed = (
            f"{_rank_list(f.rank for f in hung)} hung at exit and "
            f"{'was' if len(hung) == 1 else 'were'} killed"
        )
        unfinished = [f for f in hung if f.rank not in current.exit_hung_finished]
        if not unfinished:
            detail = f"finished; {killed}"
        elif self.exit_hang is ExitHang.SUCCEED:
            assert current.exit_timer_from is not None
            detail = (
                f"finished (--exit-hang succeed: rank {current.exit_timer_from[0]} exited 0); "
                f"{killed}"
            )
        else:
            self._decide_after(min(unfinished, key=lambda f: (f.observed_at, f.rank)))
            return
        self._drain(Draining(DrainReason.SUCCEEDED, Phase.DONE, Outcome.SUCCEEDED, detail))

    # -- helpers ---------------------------------------------------------------------

    def _run_root_cause(self) -> Failure | None:
        """The last attempt's root cause: that is what ended the run."""
        for attempt in reversed(self._attempts):
            if attempt.cause is not None:
                return attempt.cause
        return None

    def _drain(self, draining: Draining) -> None:
        self.draining = draining
        if self._attempts and self._attempts[-1].drain_started_at is None:
            self._attempts[-1].drain_started_at = self._now
        self._fire(Trigger.DRAIN, reason=draining.detail)
        self._commands.append(
            StopWorkers(
                attempt=self.attempt,
                signal=draining.stop_signal or signal.SIGTERM,
                grace_s=self.grace_s,
            )
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
        self._record(EventName.PHASE_CHANGED, **fields)

    def _record(self, event: EventName, **fields: object) -> None:
        self._records.append(Record(event, self._now, self.attempt, fields))


# Failures a healthy rank shows when a peer's machine vanishes mid-collective.
_PEER_FAILURE_KINDS = frozenset(
    {FailureKind.EXITED, FailureKind.CRASHED, FailureKind.KILLED, FailureKind.TERMINATED}
)


def _rank_list(ranks: Iterable[int]) -> str:
    """``rank 1`` or ``ranks 1, 3``."""
    numbers = sorted(set(ranks))
    return ("rank " if len(numbers) == 1 else "ranks ") + ", ".join(map(str, numbers))


def _failure_fields(failure: Failure, *, tail: bool = True) -> dict[str, object]:
    """A failure as journaled: enough for the fold to give it back whole (``log_tail``: journal only)."""
    fields: dict[str, object] = {
        "kind": failure.kind.value,
        "rank": failure.rank,
        "node": failure.node,
        "exit_code": failure.exit_code,
        "signal": failure.signal_name,
        "message": failure.message,
        "signal_number": failure.signal,
    }
    if tail and failure.log_tail:
        fields["log_tail"] = list(failure.log_tail)
    return fields

