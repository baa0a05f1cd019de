"""The run's decisions: observations in, records and commands out. Pure: no I/O, no clock.

:meth:`Controller.handle` is the one entry: it moves the journal's clock to the
observation's time and hands it to its handler, looked up by the observation's
type in one table. The controller is composed, not layered: it holds the shared
state and the writing of a decision (:class:`elastic.core.controller.state.ControllerState`)
and four parts built with that state and their own settings, each the handlers
of one job: what the ranks show while they run (:class:`elastic.core.controller.rank_signs.RankSigns`),
exits that hang (:class:`elastic.core.controller.exit_hangs.ExitHangs`), nodes
coming and going (:class:`elastic.core.controller.capacity.Capacity`) and the spares of
``--spares`` with whether a failure is repaired in place
(:class:`elastic.core.controller.in_place.InPlaceRepair`; the controller closes the attempt and
opens the re-formed one, as the life of an attempt is its own). Its own handlers
are the life of an attempt: planned, launched, a worker's exit, the decision after
a failure (the restart policy's, :meth:`elastic.core.policy.restarts.RestartPolicy.decide`,
applied here, unless the failure repeats the attempt before's), the drain's end and the
relaunch, a resumed run, a stop. The parts
return what only the controller decides (a failure to decide a restart on); the
rest they write into the decision themselves. The rules live in their own modules: the
attempt's bookkeeping and root cause (:mod:`elastic.core.controller.attempts`), why a rank
failed and what follows from it (:mod:`elastic.core.diagnosis`), drains
and exit statuses (:mod:`elastic.core.controller.drain`), the crash loop and backoff
(:mod:`elastic.core.policy.crash_loop`); the settings are
:class:`elastic.core.controller.settings.ControllerSettings`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from elastic.core.controller.attempts import COLLATERAL_LISTED, Attempt, failure_fields
from elastic.core.controller.capacity import Capacity
from elastic.core.controller.drain import DrainReason, Draining, exit_status, failure_of_the_stop
from elastic.core.controller.exit_hangs import ExitHangs, reaped_hung
from elastic.core.controller.in_place import InPlaceRepair, lost_while_reforming
from elastic.core.controller.machine import Phase, Trigger
from elastic.core.controller.rank_signs import RankSigns
from elastic.core.controller.settings import ControllerSettings
from elastic.core.controller.state import ControllerState
from elastic.core.diagnosis.causes import is_symptom, read_exit, silent_ranks
from elastic.core.diagnosis.repeats import identical_again
from elastic.core.diagnosis.teardown import teardown_fields
from elastic.core.events import EventName
from elastic.core.evidence import past_startup
from elastic.core.exit_codes import ExitCode
from elastic.core.failures import Failure, FailureKind, to_failure
from elastic.core.inplace.fallback import reform_deadline_s
from elastic.core.inplace.reform import Reform
from elastic.core.journal.fold import made_progress
from elastic.core.journal.folded import DRIVER_DIED
from elastic.core.labels import plural, signal_name
from elastic.core.messages import (
    Adopted, AttemptLaunched, AttemptPlanned, BackendFailed, Decision, ExitHungKilled, ExitTimeoutPassed, LaunchAttempt,
    NodesUnavailable, Observation, Outcome, PreemptionNoticed, PreflightRan, ReformDeadlinePassed, ReformFailed,
    Resumed, RunStarted, ScaleCheck, HelperEnded, SignOfLife, SparesStarted, StepsSeen, StopRequested, WatchReform,
    WorkerExited, WorkersStopped, WorldReformed,
)
from elastic.core.policy.crash_loop import NoProgressStreak, taken_over
from elastic.core.policy.restarts import Decision as RestartDecision, ExitHang, RestartPolicy
from elastic.core.rank_ends import rerun_warning
from elastic.core.verdicts import ExitContext, judge_exit

__all__ = [
    "COLLATERAL_LISTED", "Controller", "ControllerSettings", "DrainReason", "Draining",
    "exit_status",
]


class Controller:
    """Decides the run: feed it observations, carry out the commands it returns.

    Holds the restart policy, the crash-loop streak and, through its
    :class:`ControllerState`, the phase machine and the attempts; never sleeps, spawns or
    logs. Every phase change becomes a :class:`elastic.core.events.Record` in the decision.
    """

    def __init__(self, policy: RestartPolicy, settings: ControllerSettings) -> None:
        self.settings = settings
        self.policy = policy
        self._streak = NoProgressStreak()
        self._stop_requests = 0
        self._resumed_cause: Failure | None = None  # a dead driver's last root cause (recovery)
        self._state = state = ControllerState(
            grace_s=settings.grace_s, failure_grace_s=settings.failure_grace_s, left_out=settings.left_out,
            longest_init_s=settings.longest_init_s,
        )
        self._rank_signs = RankSigns(state, on_straggler=settings.on_straggler, min_nodes=settings.min_nodes)
        self._exit_hangs = ExitHangs(state, timeout_s=settings.exit_timeout_s, on_hang=settings.exit_hang)
        self._capacity = Capacity(
            state, min_nodes=settings.min_nodes, preempt_signal=settings.preempt_signal,
            scale_up=settings.scale_up, grace_s=settings.grace_s,
        )
        self._in_place = InPlaceRepair(state, spares=settings.spares)
        # Each observation's handler, by its type: the controller's own or one of its parts'.
        self._handlers: dict[type[Any], Callable[[Any], None]] = {
            RunStarted: self._on_run_started,
            AttemptPlanned: self._on_planned,
            AttemptLaunched: self._on_launched,
            WorkerExited: self._on_worker_exited,
            WorkersStopped: self._on_workers_stopped,
            StopRequested: self._on_stop_requested,
            BackendFailed: self._on_backend_failed,
            SignOfLife: self._rank_signs.on_sign_of_life,
            StepsSeen: self._rank_signs.on_steps_seen,
            ExitTimeoutPassed: self._exit_hangs.on_exit_timeout,
            ExitHungKilled: self._on_exit_hung_killed,
            ScaleCheck: self._capacity.on_scale_check,
            NodesUnavailable: self._capacity.on_nodes_unavailable,
            PreflightRan: self._on_preflight_ran,
            PreemptionNoticed: self._capacity.on_preemption_noticed,
            SparesStarted: self._in_place.on_spares_started,
            HelperEnded: self._in_place.on_helper_ended,
            WorldReformed: self._on_world_reformed,
            ReformFailed: self._on_reform_failed,
            ReformDeadlinePassed: self._on_reform_deadline,
        }

    # -- the one entry point ---------------------------------------------------------

    def handle(self, observation: Observation) -> Decision:
        self._state.start_decision()
        at = _journal_time(observation)
        if at is not None:
            self._state.advance(at)
        handler = self._handlers.get(type(observation))
        if handler is not None:
            handler(observation)
        return self._state.decision()

    # -- queries ---------------------------------------------------------------------

    @property
    def phase(self) -> Phase:
        return self._state.phase

    @property
    def done(self) -> bool:
        return self._state.done

    @property
    def draining(self) -> Draining | None:
        """The drain under way, or the last one: why, and where the run goes next."""
        return self._state.draining

    @property
    def outcome(self) -> Outcome | None:
        return self._state.outcome

    @property
    def attempt(self) -> int:
        return self._state.attempt

    @property
    def attempts(self) -> tuple[Attempt, ...]:
        """This driver's attempts as the controller keeps them (readers of a run fold its journal)."""
        return self._state.attempts

    @property
    def restarts(self) -> int:
        """Attempts that ended in a restart."""
        return self._state.restarts

    @property
    def ranks_alive(self) -> int:
        """Ranks of the current attempt that started and have not exited."""
        return self._state.ranks_alive

    @property
    def exit_wait(self) -> tuple[int, int | None, tuple[int, ...]] | None:
        """The wait under way for ranks to exit after a peer's exit 0 (``--exit-timeout``): that
        peer, its last step seen, the ranks still running; None when none is (or a drain began)."""
        current = self._state.current
        if current is None or self._state.phase is not Phase.RUNNING:
            return None
        return current.waiting_after_exit_0()

    def reforms(self, attempt: int) -> bool:
        """Whether a re-forming in place of ``attempt`` is decided and not yet carried out (the
        driver carries out :class:`elastic.core.messages.ReformWorld` only then)."""
        return self._in_place.awaits(attempt)

    @property
    def live_step(self) -> int | None:
        """The current attempt's highest training step over its ranks, as last reported."""
        return self._rank_signs.live_step

    @property
    def rank_steps(self) -> Mapping[int, int]:
        """The current attempt's highest step by rank, as reported (any thread may read it)."""
        return self._rank_signs.rank_steps

    @property
    def rank_step_times(self) -> Mapping[int, float]:
        """The current attempt's step time by rank, as reported (any thread may read it)."""
        return self._rank_signs.rank_step_times

    # -- an attempt's life -----------------------------------------------------------

    def _on_run_started(self, seen: RunStarted) -> None:
        if seen.resumed is not None:
            self._on_resumed(seen.resumed)
        else:
            self._state.start_attempt(self.settings.first_attempt)

    def _on_planned(self, seen: AttemptPlanned) -> None:
        state = self._state
        current = state.current
        if current is None or seen.attempt != current.number or state.phase is not Phase.PENDING:
            return
        current.world_size = seen.world_size
        current.resume_step = seen.resume_step
        current.nodes = seen.nodes
        if seen.available is not None:  # the cluster at placement: where a suspected node's ranks may go
            state.available_nodes = seen.available
        current.plan = dict(seen.plan)
        if seen.plan:
            state.record(EventName.ATTEMPT_STARTED, **seen.plan)
        self._in_place.launched_anew()
        state.fire(Trigger.LAUNCH, reason=f"{plural(seen.world_size, 'worker')} planned")
        state.command(LaunchAttempt(seen.attempt))

    def _on_preflight_ran(self, seen: PreflightRan) -> None:
        if self._capacity.on_preflight_ran(seen):
            self._on_planned(seen.planned)

    def _on_launched(self, seen: AttemptLaunched) -> None:
        state = self._state
        current = state.current
        if current is None or seen.attempt != current.number or state.phase is not Phase.LAUNCHING:
            return
        current.launched_at = seen.at
        current.world_size = seen.world_size
        state.fire(Trigger.LAUNCHED, reason=f"{plural(seen.world_size, 'worker')} started")

    def _on_worker_exited(self, seen: WorkerExited) -> None:
        state = self._state
        exit = seen.exit
        current = state.current
        if current is None or exit.attempt != current.number or state.done:
            return
        first_failure = current.root_cause
        current.exited_ranks.add(exit.rank)
        if exit.killed_at_grace is not None:
            current.note_grace_kill(exit)
        if exit.rank in current.exit_hung:
            hung = reaped_hung(current, exit)
            if hung is not None:
                self._decide_after(self._exit_hangs.on_reaped(current, hung))
                return
        # A rank reaped as hung at exit is no failure until the kill's verdict: a rank the kill
        # was sent to whose end beat it (its own failure, its node lost) stands on its own and is
        # decided at once, in whichever order the ends arrive; no verdict then waits for it.
        failure_seen = first_failure is not None and first_failure.kind is not FailureKind.EXIT_HUNG
        if exit.declared_done:
            current.declared_done.add(exit.rank)
        verdict = judge_exit(exit, ExitContext(  # success, finished, preempted or a failure's kind
            stop_sent=state.draining is not None, failure_seen=failure_seen, done_seen=bool(current.declared_done),
            peer_exit_0_at=current.exit_timer_from[1] if current.exit_timer_from else None,
            exit_timeout_s=self.settings.exit_timeout_s,
            exit_hang_succeeds=self.settings.exit_hang is ExitHang.SUCCEED,
            steps_since=lambda age_s: current.steps.since(exit.rank, exit.observed_at - age_s),
        ))
        exit, kind, finished = verdict.exit, verdict.kind, verdict.finished
        if kind is None:
            current.succeeded_ranks.add(exit.rank)
            ended: dict[str, object] = (
                {"exit_code": 0} if finished is None else {**teardown_fields(exit), "finished": finished}
            )
            if verdict.not_stopped is not None:
                ended["not_stopped"] = verdict.not_stopped
            state.record(EventName.WORKER_EXITED, rank=exit.rank, node=exit.node, **ended)
            if state.phase is Phase.RUNNING and len(current.succeeded_ranks) == current.world_size:
                state.drain(Draining(DrainReason.SUCCEEDED, Phase.DONE, Outcome.SUCCEEDED, "every worker exited 0"))
                return
            if self._in_place.awaits(current.number):  # a survivor gone: nothing left to re-form with it
                state.drain(self._in_place.fall_back(lost_while_reforming(f"rank {exit.rank} exited 0")))
                return
            self._decide_after(self._exit_hangs.on_clean_exit(current, exit))
            return
        if kind is FailureKind.COLLATERAL and current.node_loss_explains(exit, state.draining):
            self._revise_cause(current, to_failure(exit, FailureKind.NODE_LOST))
            return
        read = None  # what the rank said: read unless it is collateral in an attempt that saw no symptom
        if kind is not FailureKind.COLLATERAL or is_symptom(current.root_cause) or current.symptom_seen:
            # An exit before its launch was reported came in the attempt's first moments.
            ran_s = 0.0 if current.launched_at is None else max(0.0, exit.observed_at - current.launched_at)
            started = past_startup(step_seen=current.steps.first is not None, ran_s=ran_s, printed=bool(exit.log_tail))
            read = read_exit(exit, kind, cause=current.root_cause, silence=current.silence, rules=self.policy.signatures,
                             started=started, may_read=current.reads(exit),
                             step=current.steps.step_of(exit.rank), after_exit_0=bool(current.succeeded_ranks),
                             after_symptom=current.symptom_seen, ran_s=ran_s, stepped=current.steps.first is not None)
        if read is not None and read.explains is not None and state.draining is not None \
                and state.draining.reason is DrainReason.FAILURE and not state.draining.final:
            self._revise_cause(current, read.failure, read.explains)  # the rank the drain's symptom waited for
            return
        if kind is FailureKind.COLLATERAL and not current.list_collateral(exit.node):
            return
        failure = to_failure(exit, kind) if read is None else read.failure
        current.add_failure(failure)
        if failure is current.root_cause and is_symptom(failure):
            current.silence = silent_ranks(failure, current.steps.by_rank, current.world_size)
        state.record(EventName.WORKER_FAILED, **failure_fields(failure))
        if self._in_place.awaits(current.number):  # the world to re-form has lost another rank
            state.drain(self._in_place.fall_back(lost_while_reforming(failure.describe())))
            return
        if kind is FailureKind.COLLATERAL or state.draining is not None:
            return
        self._decide_after(failure)

    def _on_exit_hung_killed(self, seen: ExitHungKilled) -> None:
        self._decide_after(self._exit_hangs.on_exit_hung_killed(seen))

    def _revise_cause(
        self, current: Attempt, lost: Failure, reason: str = "its node was lost; the earlier failure was a consequence"
    ) -> None:
        """Make ``lost`` (a lost node, the rank a symptom waited for) the attempt's root cause,
        refund the charge and decide again."""
        state = self._state
        previous = current.root_cause
        assert previous is not None and state.draining is not None
        current.revise_cause(lost)
        state.record(EventName.WORKER_FAILED, **failure_fields(lost))
        refunded = current.charged
        if refunded is not None:
            self.policy = self.policy.refunded(refunded)
        state.record(
            EventName.ROOT_CAUSE_REVISED,
            previous=previous.describe(),
            revised=lost.describe(),
            refunded=refunded.value if refunded else None,
            reason=reason,
        )
        self._decide_after(lost)

    def _decide_after(self, cause: Failure | None) -> None:
        """Restart or end after ``cause`` (nothing when None), as the restart policy decides:
        begins the drain, or redirects the one under way (a revised root cause; a refusal
        then is not journaled again).

        Before the policy: the same failure as the attempt before's is not retried
        (:func:`elastic.core.diagnosis.repeats.identical_again`), unless it was on one node,
        which the next attempt then runs without (:meth:`Capacity.suspect_node`)."""
        if cause is None:
            return
        state = self._state
        before = state.before
        previous = before.root_cause if before is not None else self._resumed_cause
        refused = identical_again(previous, cause)
        on_its_node = refused is not None and previous is not None and previous.node == cause.node
        if self._capacity.suspect_node(cause, identical=on_its_node) and on_its_node:
            refused = None  # the same failure twice on one node: the next attempt runs without it first
        if refused is not None:
            decision = RestartDecision(False, refused)
        else:
            decision, self.policy = self.policy.decide(cause, state.now)
        budget = decision.budget
        current = state.current
        assert current is not None
        current.charged = budget if decision.restart else None
        if decision.restart:
            event = EventName.RESTART_SCHEDULED
            fields: dict[str, object] = {
                "reason": decision.reason,
                "budget": budget.value if budget else None,
                "remaining": self.policy.budget(budget).remaining(state.now) if budget else None,
            }
            # A preempted rank's peers may save as on a notice (--grace-period, no crash-loop count).
            reason = DrainReason.PREEMPTION if cause.kind is FailureKind.PREEMPTED else DrainReason.FAILURE
            leads = Draining(reason, Phase.PENDING, None, cause.describe())
        else:
            event = EventName.BUDGET_EXHAUSTED if budget is not None else EventName.RESTART_REFUSED
            fields = {"reason": decision.reason, "budget": budget.value if budget else None}
            leads = Draining(DrainReason.FAILURE, Phase.DONE, Outcome.FAILED, f"{cause.describe()}; {decision.reason}")
        if state.draining is None:
            in_place = self._in_place.decide(current) if decision.restart and state.phase is Phase.RUNNING else None
            if in_place is not None:
                fields["in_place"] = isinstance(in_place, Reform)
            state.record(event, **fields)
            if in_place is not None and self._in_place.begin(current, in_place, leads):
                return  # the survivors stay: the world is re-formed in place, no drain
            state.drain(leads)
            return
        if decision.restart:
            state.record(event, **fields)
        state.draining = replace(
            state.draining, next_phase=leads.next_phase, outcome=leads.outcome, detail=leads.detail
        )

    def _on_stop_requested(self, seen: StopRequested) -> None:
        state = self._state
        if state.done:
            return
        self._stop_requests += 1
        signum = seen.signum
        stop = Draining(
            DrainReason.STOP_REQUESTED, Phase.DONE, Outcome.STOPPED,
            f"launcher received {signal_name(signum)}", stop_signal=signum,
        )
        cause = state.current.root_cause if state.current is not None else None
        if failure_of_the_stop(state.draining, cause, state.now):
            assert cause is not None
            # The job is being stopped as a whole: the run is stopped (a rerun continues it), not failed.
            took = f"{cause.describe()} {state.now - cause.observed_at:.2f}s before, taken as part of the stop"
            state.record(EventName.STOP_REQUESTED, signal=signal_name(signum), count=self._stop_requests,
                         failure_taken=took)  # fmt: skip
            state.draining = replace(stop, detail=f"{stop.detail}; {took}", final=True)
            return
        state.record(EventName.STOP_REQUESTED, signal=signal_name(signum), count=self._stop_requests)
        state.end_instead(stop)

    def _on_backend_failed(self, seen: BackendFailed) -> None:
        """No exit can be heard any more: drain what can be reached and end the run."""
        state = self._state
        if state.done:
            return
        state.record(EventName.BACKEND_FAILED, reason=seen.reason, requeue=seen.requeue)
        state.end_instead(
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
            self._state.record_for(number, EventName.BACKOFF_STARTED, {"delay_s": round(delay_s, 3), "level": level})
        return delay_s

    def _crash_loop(self) -> str | None:
        """The crash loop's detail when ``--max-no-progress`` attempts in a row made no progress."""
        return self._streak.crash_loop(self.settings.tracks_progress, self.settings.max_no_progress)

    def _relaunch(self, ended: Attempt) -> None:
        """Back to pending: at once after progress, else after a backoff; or a crash loop."""
        state = self._state
        assert state.draining is not None
        detail = self._crash_loop()
        if detail is not None:
            state.record(EventName.CRASH_LOOP_DETECTED, reason=detail)
            state.draining = replace(
                state.draining, next_phase=Phase.DONE, outcome=Outcome.FAILED,
                detail=detail, exit_status=int(ExitCode.CRASH_LOOP),
            )
            state.finish()
            return
        delay_s = self._backoff_s(ended.number + 1)
        state.fire(Trigger.RELAUNCH, reason=state.draining.detail)
        state.start_attempt(ended.number + 1, delay_s)

    def _on_resumed(self, resumed: Resumed) -> None:
        """Take over a dead driver's run: its streak goes on, the attempt it ran ended with it."""
        state = self._state
        if resumed.succeeded_attempt is not None:  # every rank of its last attempt exited 0: done
            self._finish_succeeded(resumed)
            return
        if resumed.adopted is not None:
            self._adopt(resumed, resumed.adopted)
            return
        self._streak, progressed = taken_over(resumed, self.settings.tracks_progress)
        self._resumed_cause = resumed.last_cause
        if resumed.interrupted is not None:
            state.record_for(resumed.interrupted, EventName.WORKERS_STOPPED, {
                "checkpoint_step": resumed.checkpoint_step,
                "made_progress": progressed,
                "no_progress_streak": self._streak.count,
                "reason": DRIVER_DIED,
                # how far it trained, as the dead driver last wrote it down (the fold's evidence)
                **({"last_step": resumed.interrupted_step, "last_step_at": resumed.interrupted_step_at}
                   if resumed.interrupted_step is not None else {}),
                **({"checkpoint_saves_s_ago": [[round(b, 6), round(c, 6)] for b, c in resumed.saves_s_ago]}
                   if resumed.saves_s_ago else {}),
            })
        first = self.settings.first_attempt
        detail = self._crash_loop()
        if detail is None:
            state.start_attempt(first, self._backoff_s(first))
            return
        state.open_attempt(first)
        state.record(EventName.CRASH_LOOP_DETECTED, reason=detail)
        state.drain(
            Draining(DrainReason.FAILURE, Phase.DONE, Outcome.FAILED, detail,
                     exit_status=int(ExitCode.CRASH_LOOP))
        )

    def _adopt(self, resumed: Resumed, adopted: Adopted) -> None:
        """Take the dead driver's attempt over as it runs: nothing ended, so the streak and the
        budgets stand as journaled; the attempt is opened as planned, in running, launched now
        as far as this driver knows; its kept exits follow as any exit."""
        state = self._state
        self._streak = NoProgressStreak(resumed.no_progress_streak)
        self._resumed_cause = resumed.last_cause
        current = state.open_attempt(adopted.attempt)
        current.world_size, current.nodes, current.resume_step = adopted.world_size, adopted.nodes, adopted.resume_step
        # Launched that long ago, as its exits' start-up rule reads it; what the dead driver
        # journaled of its start is not journaled again, and its start-up, measured from a
        # launch this driver did not see, is not profiled.
        current.launched_at = state.now - adopted.ran_s
        if adopted.first_step is not None:
            current.steps.first_taken_over(*adopted.first_step, at=state.now)
        if adopted.sign_of_life:
            current.sign_of_life_at = state.now
        current.startup_journaled = True
        state.fire(Trigger.ADOPT, reason=f"{plural(adopted.world_size, 'worker')} taken over from the dead driver")
        state.record(EventName.ATTEMPT_ADOPTED, generation=adopted.generation, world_size=adopted.world_size,
                     nodes=adopted.nodes, exits_kept=adopted.exits_kept)

    def _finish_succeeded(self, resumed: Resumed) -> None:
        """A dead driver's run whose last attempt's ranks all exited 0 (it died during the success
        drain): that attempt's drain is ended again, as a success, and nothing is started."""
        assert resumed.succeeded_attempt is not None
        attempt = self._state.open_attempt(resumed.succeeded_attempt)
        if resumed.interrupted == resumed.succeeded_attempt:
            attempt.resume_step = resumed.interrupted_resume_step
        self._state.drain(Draining(
            DrainReason.SUCCEEDED, Phase.DONE, Outcome.SUCCEEDED,
            "every worker exited 0 (its driver died before it recorded the run's end)",
        ))

    def _on_workers_stopped(self, seen: WorkersStopped) -> None:
        state = self._state
        current = state.current
        if current is None or seen.attempt != current.number or state.phase is not Phase.DRAINING:
            return
        draining = state.draining
        assert draining is not None
        progressed = self.settings.tracks_progress and made_progress(current.resume_step, seen.checkpoint_step)
        if draining.next_phase is Phase.PENDING and (
            progressed or draining.reason not in (DrainReason.PREEMPTION, DrainReason.STRAGGLER)
        ):  # an attempt cut short by a notice or a straggler is no sign of a crash loop
            self._streak = self._streak.ended(progressed)
        elif draining.outcome is Outcome.STOPPED and progressed:
            # A stopped run goes on when rerun: its last attempt's new checkpoint ends the streak
            # (being stopped is no sign of a crash loop either way).
            self._streak = self._streak.ended(progressed)
        self._close_attempt(current, seen.checkpoint_step, seen.saves_s_ago, progressed,
                            restarting=draining.next_phase is Phase.PENDING)
        if draining.next_phase is Phase.PENDING:
            self._relaunch(current)
            return
        state.finish()

    def _close_attempt(
        self, current: Attempt, checkpoint_step: int | None, saves_s_ago: tuple[tuple[float, float], ...],
        progressed: bool, *, restarting: bool, **why: object,
    ) -> None:
        """The attempt's end as journaled (``workers_stopped``): its checkpoint, progress and the
        streak, the ranks killed at the grace's end, the collateral counted, the steps and
        start-up seen to the end, and ``why`` (a re-forming in place)."""
        state = self._state
        current.ended_at = state.now
        current.checkpoint_step = checkpoint_step
        if current.collateral_counted:
            counted = current.collateral_counted
            state.record(
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
        state.journal_step_reached(current, force=True)  # steps seen while draining
        state.journal_startup(current, force=True)  # ranks that showed no step are left out
        warning = None
        if restarting:
            best = current.steps.best
            warning = rerun_warning(current.number, checkpoint_step, None if best is None else best.step)
        state.record(
            EventName.WORKERS_STOPPED,
            checkpoint_step=checkpoint_step,
            made_progress=progressed,
            no_progress_streak=self._streak.count,
            **killed,
            **({"rerun_warning": warning} if warning else {}),
            **({"checkpoint_saves_s_ago": [[round(b, 6), round(c, 6)] for b, c in saves_s_ago]}
               if saves_s_ago else {}),
            **why,
        )

    # -- re-forming in place (--spares) ----------------------------------------------

    def _on_world_reformed(self, seen: WorldReformed) -> None:
        """The nodes re-formed the world: the failed attempt ends as a restart would end it (the
        restart is charged, its streak counted), and the next begins with its survivors and
        spares running, launched by the re-forming (running -> launching -> running, no drain)."""
        state = self._state
        current = state.current
        if current is None or not self._in_place.awaits(seen.attempt):
            return
        reform = self._in_place.reformed()
        progressed = self.settings.tracks_progress and made_progress(current.resume_step, seen.checkpoint_step)
        self._streak = self._streak.ended(progressed)
        following = current.number + 1
        self._close_attempt(current, seen.checkpoint_step, seen.saves_s_ago, progressed, restarting=True,
                            reformed_as=following)
        detail = current.root_cause.describe() if current.root_cause is not None else "re-formed in place"
        state.fire(Trigger.REFORM, reason=f"{detail}; world re-formed in place as attempt {following}")
        opened = state.open_attempt(following, restarted=True)
        opened.world_size, opened.nodes, opened.generation = reform.world_size, current.nodes, reform.generation
        opened.resume_step = seen.checkpoint_step  # progress is a checkpoint after the re-forming
        opened.plan = {**current.plan, "world_size": reform.world_size}
        opened.startup_journaled = True  # its ranks started long before: no start-up to profile
        state.record(EventName.ATTEMPT_STARTED, **opened.plan, reformed_from=current.number,
                     generation=reform.generation)
        opened.launched_at = seen.at
        kept = plural(len(reform.survivors), "worker")
        state.fire(Trigger.LAUNCHED, reason=f"{kept} kept, {len(reform.joiners)} from warm spares")
        step_times = self._rank_signs.rank_step_times.values()
        state.command(WatchReform(following, reform_deadline_s(self.settings.reform_timeout_s, step_times)))

    def _on_reform_deadline(self, seen: ReformDeadlinePassed) -> None:
        """A re-formed attempt that showed no step in its time (a survivor never rejoined): its
        ranks are stopped and the run restarts as without spares (the restart was charged when
        the world was re-formed)."""
        state = self._state
        current = state.current
        if (current is None or seen.attempt != current.number or state.phase is not Phase.RUNNING
                or state.draining is not None or current.steps.first is not None):
            return
        reason = (f"the world re-formed as attempt {current.number} showed no step within "
                  f"{seen.at - (current.launched_at or seen.at):.1f}s (--reform-timeout)")
        state.record(EventName.INPLACE_FELL_BACK, reason=reason)
        state.drain(Draining(DrainReason.FAILURE, Phase.PENDING, None, reason))

    def _on_reform_failed(self, seen: ReformFailed) -> None:
        """A node could not do its part: the full restart the policy decided, with why."""
        if self._in_place.awaits(seen.attempt):
            self._state.drain(self._in_place.fall_back(seen.reason))


def _journal_time(observation: Observation) -> float | None:
    """The time an observation moves the journal's clock to before it is handled (never back:
    observations come from many threads and nodes, and one seen first can be handled later, as
    a rank that exits while its launch is being reported); None for a node's steps, which date
    their first step before the report's own time (:meth:`RankSigns.on_steps_seen`)."""
    if isinstance(observation, WorkerExited):
        return observation.exit.observed_at
    if isinstance(observation, StepsSeen):
        return None
    return observation.at
