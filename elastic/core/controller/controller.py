"""The run's decisions: observations in, records and commands out. Pure: no I/O, no clock.

The :class:`Controller` dispatches each observation to a short handler. Its own
handlers are the life of an attempt: planned, launched, a worker's exit, the
drain, the relaunch, a resumed run, a stop. Handlers of one other job are layers
it inherits: an attempt's progress (:mod:`elastic.core.controller.progress`), exits
that hang (:mod:`elastic.core.controller.exit_hangs`) and nodes coming and going
(:mod:`elastic.core.controller.capacity`). The rules live in their own modules: the
attempt's bookkeeping (:mod:`elastic.core.controller.attempts`), drains and exit statuses
(:mod:`elastic.core.controller.drain`), the decision after a failure
(:mod:`elastic.core.controller.after_failure`), exit hangs (:mod:`elastic.core.controller.exit_hangs`),
the crash loop and backoff (:mod:`elastic.core.policy.crash_loop`), preemption notices
(:mod:`elastic.core.controller.capacity`) and stragglers (:mod:`elastic.core.training.stragglers`); the
state and step writing are :class:`elastic.core.controller.state.StepState`.
"""

from __future__ import annotations

import signal
from dataclasses import replace

from elastic.core.controller.after_failure import as_consequences, decide_after, node_loss_explains
from elastic.core.controller.attempts import COLLATERAL_LISTED, Attempt, AttemptSummary, failure_fields
from elastic.core.controller.capacity import CapacityHandlers
from elastic.core.controller.drain import (
    DEFAULT_FAILURE_GRACE_S,
    DrainReason,
    Draining,
    exit_status,
    failure_of_the_stop,
)
from elastic.core.controller.exit_hangs import ExitHangHandlers
from elastic.core.controller.machine import Phase, Trigger
from elastic.core.controller.progress import ProgressHandlers
from elastic.core.events import EventName, Record
from elastic.core.exit_codes import ExitCode
from elastic.core.failures import Failure, FailureKind, WorkerExit, classify, to_failure
from elastic.core.journal.fold import made_progress
from elastic.core.labels import plural, signal_name
from elastic.core.messages import (
    AttemptLaunched, AttemptPlanned, BackendFailed, ExitHungKilled, ExitTimeoutPassed, LaunchAttempt,
    NodesUnavailable, Observation, Outcome, PreemptionNoticed, Resumed, RunStarted, ScaleCheck, SignOfLife,
    Step, StepsSeen, StopRequested, WorkerExited, WorkersStopped,
)
from elastic.core.policy.crash_loop import NoProgressStreak, taken_over
from elastic.core.policy.restarts import ExitHang, RestartPolicy, ScaleUp
from elastic.core.rank_ends import rerun_warning
from elastic.core.training.stragglers import OnStraggler

__all__ = ["COLLATERAL_LISTED", "AttemptSummary", "Controller", "DrainReason", "Draining", "exit_status"]


class Controller(ProgressHandlers, ExitHangHandlers, CapacityHandlers):
    """Decides the run: feed it observations, carry out the commands it returns.

    Holds the phase machine, the attempts and the restart policy; never sleeps,
    spawns or logs. Every phase change becomes a :class:`Record` in the step.
    Its layers (progress, exit hangs, capacity: each on
    :class:`elastic.core.controller.state.StepState`) hold the handlers of one job
    each; it sets the attributes they declare and decides after a failure.
    """

    def __init__(
        self,
        policy: RestartPolicy,
        *,
        grace_s: float,
        failure_grace_s: float = DEFAULT_FAILURE_GRACE_S,
        tracks_progress: bool = False,
        max_no_progress: int | None = None,
        first_attempt: int = 0,
        scale_up: ScaleUp | None = None,
        exit_timeout_s: float | None = None,
        exit_hang: ExitHang = ExitHang.RESTART,
        min_nodes: int = 1,
        preempt_signal: int = signal.SIGTERM,
        on_straggler: OnStraggler = OnStraggler.WARN,
        left_out: tuple[str, ...] = (),
    ) -> None:
        super().__init__(grace_s=grace_s, failure_grace_s=failure_grace_s)
        self.min_nodes = min_nodes
        self.preempt_signal = preempt_signal  # 0: none (the notice file alone)
        self.on_straggler = on_straggler
        self.left_out = left_out  # a dead driver's stragglers' nodes stay out
        self._available_nodes: int | None = None  # usable nodes at the scale watch's last look
        self._first_attempt = first_attempt
        self.exit_timeout_s = exit_timeout_s
        self.exit_hang = exit_hang
        self.scale_up = scale_up or ScaleUp(enabled=False)
        self._last_grown_at: float | None = None
        self.policy = policy
        self.tracks_progress = tracks_progress
        self.max_no_progress = max_no_progress
        self._streak = NoProgressStreak()
        self.started_at: float | None = None
        self._stop_requests = 0

    # -- the one entry point ---------------------------------------------------------

    def handle(self, observation: Observation) -> Step:
        self._records, self._commands = [], []
        # One journal clock (_advance): observations come from many threads and nodes, and one
        # seen first can be handled later (a rank that exits while its launch is being reported,
        # a rank that prints before it); no record is dated before the one before it.
        if isinstance(observation, WorkerExited):
            self._advance(observation.exit.observed_at)
            self._on_worker_exit(observation.exit)
        elif isinstance(observation, SignOfLife):
            self._advance(observation.at)
            self._on_sign_of_life(observation)
        elif isinstance(observation, StepsSeen):
            self._on_steps_seen(observation)  # dates its first step before the report's time
        else:
            self._advance(observation.at)
            if isinstance(observation, RunStarted):
                self.started_at = observation.at
                if observation.resumed is not None:
                    self._on_resumed(observation.resumed)
                else:
                    self._start_attempt(self._first_attempt)
            elif isinstance(observation, AttemptPlanned):
                self._on_planned(observation)
            elif isinstance(observation, ScaleCheck):
                self._on_scale_check(observation)
            elif isinstance(observation, NodesUnavailable):
                self._on_nodes_unavailable(observation)
            elif isinstance(observation, AttemptLaunched):
                self._on_launched(observation)
            elif isinstance(observation, StopRequested):
                self._on_stop_requested(observation.signum)
            elif isinstance(observation, PreemptionNoticed):
                self._on_preemption_noticed(observation)
            elif isinstance(observation, WorkersStopped):
                self._on_workers_stopped(observation.attempt, observation.checkpoint_step)
            elif isinstance(observation, ExitTimeoutPassed):
                self._on_exit_timeout(observation)
            elif isinstance(observation, ExitHungKilled):
                self._on_exit_hung_killed(observation)
            elif isinstance(observation, BackendFailed):
                self._on_backend_failed(observation)
        return Step(tuple(self._records), tuple(self._commands))

    # -- handlers --------------------------------------------------------------------

    def _on_planned(self, seen: AttemptPlanned) -> None:
        current = self._attempts[-1]
        if seen.attempt != current.number or self.phase is not Phase.PENDING:
            return
        current.world_size = seen.world_size
        current.resume_step = seen.resume_step
        current.nodes = seen.nodes
        if seen.plan:
            self._record(EventName.ATTEMPT_STARTED, **seen.plan)
        self._fire(Trigger.LAUNCH, reason=f"{plural(seen.world_size, 'worker')} planned")
        self._commands.append(LaunchAttempt(seen.attempt))

    def _on_launched(self, seen: AttemptLaunched) -> None:
        current = self._attempts[-1]
        if seen.attempt != current.number or self.phase is not Phase.LAUNCHING:
            return
        current.launched_at = seen.at
        current.world_size = seen.world_size
        self._fire(Trigger.LAUNCHED, reason=f"{plural(seen.world_size, 'worker')} started")

    def _on_worker_exit(self, exit: WorkerExit) -> None:
        current = self._attempts[-1] if self._attempts else None
        if current is None or exit.attempt != current.number or self.done:
            return
        first_failure = current.cause
        current.exited_ranks.add(exit.rank)
        if exit.killed_at_grace is not None:
            current.note_grace_kill(exit)
        if exit.rank in current.exit_hung and self._on_exit_hung_exit(current, exit):
            return
        # A rank reaped as hung at exit is no failure until the kill's verdict: a rank the kill
        # was sent to whose end beat it (its own failure, its node lost) stands on its own and is
        # decided at once, in whichever order the ends arrive; no verdict then waits for it.
        failure_seen = first_failure is not None and first_failure.kind is not FailureKind.EXIT_HUNG
        if exit.succeeded and exit.declared_done:
            current.declared_done.add(exit.rank)
        kind = classify(
            exit, stop_sent=self.draining is not None, failure_seen=failure_seen, done_seen=bool(current.declared_done)
        )
        if kind is None:
            current.succeeded_ranks.add(exit.rank)
            self._record(EventName.WORKER_EXITED, rank=exit.rank, node=exit.node, exit_code=0)
            if self.phase is Phase.RUNNING and len(current.succeeded_ranks) == current.world_size:
                self._drain(
                    Draining(DrainReason.SUCCEEDED, Phase.DONE, Outcome.SUCCEEDED, "every worker exited 0")
                )
                return
            self._on_clean_exit(current, exit)
            return
        if kind is FailureKind.COLLATERAL and node_loss_explains(current.cause, exit, self.draining):
            self._revise_cause(current, to_failure(exit, FailureKind.NODE_LOST))
            return
        if kind is FailureKind.COLLATERAL and not current.list_collateral(exit.node):
            return
        failure = to_failure(exit, kind)
        current.add_failure(failure)
        self._record(EventName.WORKER_FAILED, **failure_fields(failure))
        if kind is FailureKind.COLLATERAL or self.draining is not None:
            return
        self._decide_after(failure)

    def _revise_cause(self, current: Attempt, lost: Failure) -> None:
        """Make the lost node the attempt's root cause, refund the charge and decide again."""
        previous = current.cause
        assert previous is not None and self.draining is not None
        current.failures = as_consequences(current.failures)
        current.cause = None
        current.add_failure(lost)
        self._record(EventName.WORKER_FAILED, **failure_fields(lost))
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
        self._decide_after(lost)

    def _decide_after(self, cause: Failure) -> None:
        """Restart or end after ``cause``: begins the drain, or redirects the one under way
        (a revised root cause; a refusal then is not journaled again)."""
        after = decide_after(self.policy, cause, self._now)
        self.policy = after.policy
        current = self._attempts[-1]
        current.charged = after.charged
        current.restarted = after.restart
        if self.draining is None:
            self._record(after.event, **after.fields)
            self._drain(after.draining())
            return
        if after.restart:
            self._record(after.event, **after.fields)
        self.draining = after.redirect(self.draining)

    def _on_stop_requested(self, signum: int) -> None:
        if self.done:
            return
        self._stop_requests += 1
        stop = Draining(
            DrainReason.STOP_REQUESTED, Phase.DONE, Outcome.STOPPED,
            f"launcher received {signal_name(signum)}", stop_signal=signum,
        )
        cause = self._attempts[-1].cause if self._attempts else None
        if failure_of_the_stop(self.draining, cause, self._now):
            assert cause is not None
            # The job is being stopped as a whole: the run is stopped (a rerun continues it), not failed.
            took = f"{cause.describe()} {self._now - cause.observed_at:.2f}s before, taken as part of the stop"
            self._record(EventName.STOP_REQUESTED, signal=signal_name(signum), count=self._stop_requests,
                         failure_taken=took)  # fmt: skip
            self.draining = replace(stop, detail=f"{stop.detail}; {took}", final=True)
            return
        self._record(EventName.STOP_REQUESTED, signal=signal_name(signum), count=self._stop_requests)
        self._end_instead(stop)

    def _on_backend_failed(self, seen: BackendFailed) -> None:
        """No exit can be heard any more: drain what can be reached and end the run."""
        if self.done:
            return
        self._record(EventName.BACKEND_FAILED, reason=seen.reason, requeue=seen.requeue)
        self._end_instead(
            Draining(
                DrainReason.FAILURE, Phase.DONE, Outcome.FAILED, seen.reason,
                exit_status=int(ExitCode.NODES_UNAVAILABLE if seen.requeue else ExitCode.INTERNAL_ERROR),
            )
        )

    # -- relaunching: the no-progress streak, backoff and crash loop -----------------

    def _backoff_s(self, number: int) -> float:
        """The wait before attempt ``number`` at the streak's level; journaled when there is one."""
        delay_s, level = self._streak.backoff(self.policy.backoff)
        if delay_s > 0:
            self._records.append(
                Record(EventName.BACKOFF_STARTED, self._now, number,
                       {"delay_s": round(delay_s, 3), "level": level})
            )
        return delay_s

    def _relaunch(self, ended: Attempt) -> None:
        """Back to pending: at once after progress, else after a backoff; or a crash loop."""
        detail = self._streak.crash_loop(self.tracks_progress, self.max_no_progress)
        if detail is not None:
            ended.restarted = False
            self._record(EventName.CRASH_LOOP_DETECTED, reason=detail)
            assert self.draining is not None
            self.draining = replace(
                self.draining, next_phase=Phase.DONE, outcome=Outcome.FAILED,
                detail=detail, exit_status=int(ExitCode.CRASH_LOOP),
            )
            self._finish()
            return
        delay_s = self._backoff_s(ended.number + 1)
        self._fire(Trigger.RELAUNCH, reason=self.draining.detail if self.draining else "")
        self._start_attempt(ended.number + 1, delay_s)

    def _on_resumed(self, resumed: Resumed) -> None:
        """Take over a dead driver's run: its streak goes on, the attempt it ran ended with it."""
        self._streak, progressed = taken_over(resumed, self.tracks_progress)
        if resumed.interrupted is not None:
            self._records.append(
                Record(EventName.WORKERS_STOPPED, self._now, resumed.interrupted, {
                    "checkpoint_step": resumed.checkpoint_step,
                    "made_progress": progressed,
                    "no_progress_streak": self._streak.count,
                    "reason": "its driver died",
                })
            )
        detail = self._streak.crash_loop(self.tracks_progress, self.max_no_progress)
        if detail is None:
            self._start_attempt(self._first_attempt, self._backoff_s(self._first_attempt))
            return
        self._attempts.append(Attempt(number=self._first_attempt, started_at=self._now))
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
        if self.draining.next_phase is Phase.PENDING and (
            progressed or self.draining.reason not in (DrainReason.PREEMPTION, DrainReason.STRAGGLER)
        ):  # an attempt cut short by a notice or a straggler is no sign of a crash loop
            self._streak = self._streak.ended(progressed)
        elif self.draining.outcome is Outcome.STOPPED and progressed:
            # A stopped run goes on when rerun: its last attempt's new checkpoint ends the streak
            # (being stopped is no sign of a crash loop either way).
            self._streak = self._streak.ended(progressed)
        if current.collateral_counted:
            counted = current.collateral_counted
            self._record(
                EventName.COLLATERAL_COUNTED,
                kind=FailureKind.COLLATERAL.value,
                count=sum(counted.values()),
                by_node=dict(counted),
                listed=current.collateral_listed,
            )
        killed: dict[str, object] = {}
        if current.grace_kill_count:  # ranks SIGKILLed at the grace's end, and how they held the signal
            killed = {
                "killed_at_grace": list(current.grace_kills),
                "killed_at_grace_count": current.grace_kill_count,
            }
        self._journal_step_reached(current, force=True)  # steps seen while draining
        warning = None
        if self.draining.next_phase is Phase.PENDING:
            best = current.steps.best
            warning = rerun_warning(current.number, checkpoint_step, None if best is None else best.step)
        self._record(
            EventName.WORKERS_STOPPED,
            checkpoint_step=checkpoint_step,
            made_progress=progressed,
            no_progress_streak=self._streak.count,
            **killed,
            **({"rerun_warning": warning} if warning else {}),
        )
        if self.draining.next_phase is Phase.PENDING:
            self._relaunch(current)
            return
        self._finish()
