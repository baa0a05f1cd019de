"""Stopped is not finished: an exit 0 after a stop signal from outside is preempted, classified,
charged and decided by the pure core, replayed on scripts of observations. No processes."""

from __future__ import annotations

import signal

import pytest

from elastic.core.controller.controller import Controller
from elastic.core.controller.settings import ControllerSettings
from elastic.core.events import EventName
from elastic.core.failures import FailureKind, WorkerExit, classify, to_failure
from elastic.core.controller.machine import Phase
from elastic.core.messages import (
    AttemptLaunched, AttemptPlanned, FinishRun, Outcome, PlanAttempt, RunStarted, StopRequested, StopWorkers,
    WorkerExited, WorkersStopped,
)
from elastic.core.policy.restarts import RestartPolicy
from elastic.core.rank_ends import StopSign
from elastic.core.journal.recovery import continuable

SIGTERM_CAUGHT = StopSign(signal.SIGTERM, "caught SIGTERM in its handler save (train.py:12)")
SYNC = StopSign(signal.SIGTERM, "reached JAX's preemption sync point at step 12")


def clean(rank: int, at: float, stopped_by: StopSign | None = None, *, done: bool = False) -> WorkerExit:
    return WorkerExit(attempt=0, rank=rank, node="n0", returncode=0, observed_at=at, stopped_by=stopped_by,
                      declared_done=done)


@pytest.mark.parametrize(
    ("exit", "context", "kind"),
    [
        (clean(1, 1.0, SIGTERM_CAUGHT), {}, FailureKind.PREEMPTED),
        (clean(1, 1.0, SYNC), {}, FailureKind.PREEMPTED),
        (clean(1, 1.0), {}, None),  # no sign of a stop: finished, as always
        (clean(1, 1.0, SIGTERM_CAUGHT, done=True), {}, None),  # it said it finished first
        (clean(1, 1.0, SIGTERM_CAUGHT), {"done_seen": True}, None),  # a peer said the job finished
        (clean(1, 1.0, SIGTERM_CAUGHT), {"stop_sent": True}, None),  # the launcher's own drain
        (clean(1, 1.0, SIGTERM_CAUGHT), {"failure_seen": True}, None),
    ],
)
def test_an_exit_0_after_a_stop_from_outside_is_preempted(
    exit: WorkerExit, context: dict[str, bool], kind: FailureKind | None
) -> None:
    assert kind == classify(exit, **context)


def test_a_preempted_rank_reads_as_the_signal_that_stopped_it() -> None:
    """Its status is 143 (never 0, were it ever the cause of a failed run), and it says why."""
    failure = to_failure(clean(1, 1.0, SIGTERM_CAUGHT), FailureKind.PREEMPTED)
    assert (0, signal.SIGTERM, 143) == (failure.exit_code, failure.signal, failure.exit_status)
    assert "rank 1 on n0 preempted: exited 0 after it caught SIGTERM in its handler save (train.py:12)" == (
        failure.describe()
    )


def controller(max_restarts: int = 0, max_preemptions: int | None = 10) -> Controller:
    return Controller(RestartPolicy.create(max_restarts=max_restarts, max_preemptions=max_preemptions),
                      ControllerSettings(grace_s=30.0, failure_grace_s=5.0))


def running(c: Controller, world: int = 2) -> None:
    for observation in (RunStarted(0.0), AttemptPlanned(0, world, 0.05), AttemptLaunched(0, world, 0.1)):
        c.handle(observation)


def test_a_rank_that_saves_and_exits_0_on_an_outside_sigterm_restarts_charged_to_preemptions() -> None:
    """--max-restarts 0 and still a restart: the preemption budget pays; the peers get the grace
    period to save too (not the failure grace), and their exits 0 during the drain change nothing."""
    c = controller(max_restarts=0)
    running(c)
    decision = c.handle(WorkerExited(clean(1, 10.0, SIGTERM_CAUGHT)))
    failed = [r for r in decision.records if r.event is EventName.WORKER_FAILED]
    scheduled = [r for r in decision.records if r.event is EventName.RESTART_SCHEDULED]
    assert ["preempted"] == [r.fields["kind"] for r in failed]
    assert ("SIGTERM", 0) == (failed[0].fields["signal"], failed[0].fields["exit_code"])
    assert ["preemptions"] == [r.fields["budget"] for r in scheduled]
    assert (StopWorkers(0, signal.SIGTERM, 30.0),) == decision.commands
    assert () == c.handle(WorkerExited(clean(0, 11.0, SIGTERM_CAUGHT))).commands
    [plan] = c.handle(WorkersStopped(0, 12.0, 40)).commands
    assert PlanAttempt(1, 0.0) == plan
    assert 1 == c.restarts


def test_every_rank_stopped_at_jaxs_sync_point_restarts_once() -> None:
    """JAX stops every rank at one step, and each exits 0: the first exit decides, once."""
    c = controller()
    running(c, world=3)
    c.handle(WorkerExited(clean(2, 10.0, SYNC)))
    c.handle(WorkerExited(clean(0, 10.1, SYNC)))
    c.handle(WorkerExited(clean(1, 10.2, SYNC)))
    [plan] = c.handle(WorkersStopped(0, 12.0, 12)).commands
    assert isinstance(plan, PlanAttempt) and 1 == plan.attempt


def test_a_run_that_really_finished_succeeds() -> None:
    """No stop sign: every exit 0 is the job's end, as always."""
    c = controller()
    running(c)
    c.handle(WorkerExited(clean(0, 10.0)))
    assert (StopWorkers(0, signal.SIGTERM, 30.0),) == c.handle(WorkerExited(clean(1, 10.1))).commands
    assert (FinishRun(Outcome.SUCCEEDED, 0, None, "every worker exited 0"),) == c.handle(WorkersStopped(0, 11.0)).commands


def test_a_rank_that_said_it_finished_before_a_peer_was_signalled_makes_a_success() -> None:
    """Rank 0 declared done and exited 0; rank 1 then caught a SIGTERM and exited 0: finished."""
    c = controller()
    running(c)
    c.handle(WorkerExited(clean(0, 10.0, done=True)))
    c.handle(WorkerExited(clean(1, 10.1, SIGTERM_CAUGHT)))
    assert (FinishRun(Outcome.SUCCEEDED, 0, None, "every worker exited 0"),) == c.handle(WorkersStopped(0, 11.0)).commands


def test_a_preempted_attempt_while_the_launcher_stops_ends_the_run_stopped_and_continuable() -> None:
    """The scheduler signals the ranks and the launcher at once (scancel): the ranks' exits 0 come
    first and begin a relaunch; the launcher's SIGTERM then ends the run stopped, 143, which a
    rerun with the same run id continues."""
    c = controller()
    running(c)
    c.handle(WorkerExited(clean(1, 10.0, SIGTERM_CAUGHT)))
    c.handle(StopRequested(signal.SIGTERM, 10.2))
    c.handle(WorkerExited(clean(0, 10.3, SIGTERM_CAUGHT)))
    decision = c.handle(WorkersStopped(0, 11.0, 40))
    [finish] = decision.commands
    assert isinstance(finish, FinishRun) and (Outcome.STOPPED, 143) == (finish.outcome, finish.exit_status)
    [record] = [r for r in decision.records if r.event is EventName.RUN_FINISHED]
    assert continuable(record.fields)
    assert Phase.DONE == c.phase


def test_too_many_preemptions_in_a_row_fail_with_the_signals_status() -> None:
    """The preemption budget is exhausted: the run fails with 143, never with 0."""
    c = controller(max_preemptions=0)
    running(c)
    c.handle(WorkerExited(clean(1, 10.0, SIGTERM_CAUGHT)))
    [finish] = c.handle(WorkersStopped(0, 11.0)).commands
    assert isinstance(finish, FinishRun) and (Outcome.FAILED, 143) == (finish.outcome, finish.exit_status)
