"""The controller replayed on scripts of observations: phases and commands, no processes."""

from __future__ import annotations

import signal

import pytest

from elastic.core.controller.controller import Controller
from elastic.core.controller.settings import ControllerSettings
from elastic.core.controller.drain import STOP_TOOK_FAILURE_S
from elastic.core.events import EventName
from elastic.core.failures import Failure, FailureKind, WorkerExit, to_failure
from elastic.core.controller.machine import Phase
from elastic.core.messages import (
    AttemptLaunched,
    AttemptPlanned,
    BackendFailed,
    FinishRun,
    LaunchAttempt,
    NodesUnavailable,
    Outcome,
    PlanAttempt,
    Resumed,
    RunStarted,
    StopRequested,
    StopWorkers,
    WorkerExited,
    WorkersStopped,
)
from elastic.core.policy.restarts import Backoff, RestartPolicy


def controller(max_restarts: int = 0) -> Controller:
    return Controller(RestartPolicy.create(max_restarts=max_restarts), ControllerSettings(grace_s=5.0))


def exited(attempt: int, rank: int, returncode: int, at: float) -> WorkerExited:
    return WorkerExited(WorkerExit(attempt=attempt, rank=rank, node="n0", returncode=returncode, observed_at=at))


def replay(c: Controller, script: list) -> list:  # type: ignore[type-arg]
    """Feed each observation; return (phase after, commands) per step."""
    return [(c.handle(obs).commands, c.phase) for obs in script]


def test_a_clean_run_launches_drains_and_succeeds() -> None:
    """Every worker exiting 0 drains (teardown in one place) and finishes with 0."""
    c = controller()
    steps = replay(c, [
        RunStarted(0.0),
        AttemptPlanned(0, 2, 0.05),
        AttemptLaunched(0, 2, 0.1),
        exited(0, 0, 0, 1.0),
        exited(0, 1, 0, 1.1),
        WorkersStopped(0, 1.2),
    ])
    assert [
        ((PlanAttempt(0),), Phase.PENDING),
        ((LaunchAttempt(0),), Phase.LAUNCHING),
        ((), Phase.RUNNING),
        ((), Phase.RUNNING),
        ((StopWorkers(0, signal.SIGTERM, 5.0),), Phase.DRAINING),
        ((FinishRun(Outcome.SUCCEEDED, 0, None, "every worker exited 0"),), Phase.DONE),
    ] == steps


def test_a_killed_rank_with_budget_left_relaunches_the_group() -> None:
    """A SIGKILLed rank drains the others and starts attempt 1; the drained rank is collateral."""
    c = controller(max_restarts=1)
    replay(c, [RunStarted(0.0), AttemptPlanned(0, 2, 0.05), AttemptLaunched(0, 2, 0.1)])
    failed = c.handle(exited(0, 1, -signal.SIGKILL, 2.0))
    assert (StopWorkers(0, signal.SIGTERM, 5.0, collateral=True),) == failed.commands
    assert Phase.DRAINING == c.phase
    c.handle(exited(0, 0, -signal.SIGTERM, 2.1))
    relaunch = c.handle(WorkersStopped(0, 2.2))
    assert (PlanAttempt(1),) == relaunch.commands
    assert Phase.PENDING == c.phase
    kinds = [f.kind for f in c.attempts[0].failures]
    assert [FailureKind.KILLED, FailureKind.COLLATERAL] == kinds
    assert c.attempts[0].restarted


def test_budget_exhausted_finishes_with_the_root_cause_status() -> None:
    """No budget left: the run fails with the failed rank's own exit status."""
    c = controller(max_restarts=0)
    replay(c, [RunStarted(0.0), AttemptPlanned(0, 2, 0.05), AttemptLaunched(0, 2, 0.1), exited(0, 0, 3, 1.0), exited(0, 1, -15, 1.1)])
    decision = c.handle(WorkersStopped(0, 1.2))
    finish = decision.commands[0]
    assert isinstance(finish, FinishRun)
    assert (Outcome.FAILED, 3, 0) == (finish.outcome, finish.exit_status, finish.root_cause.rank)  # type: ignore[union-attr]
    assert EventName.RUN_FINISHED in [r.event for r in decision.records]


def test_a_launch_failure_is_never_retried() -> None:
    """A command that cannot run fails the run at once, budget or not."""
    c = controller(max_restarts=5)
    replay(c, [RunStarted(0.0), AttemptPlanned(0, 1, 0.05)])
    launch_failed = WorkerExited(WorkerExit(attempt=0, rank=0, node="n0", returncode=127, observed_at=0.1,
                                            launch_error="nope: command not found"))
    assert (StopWorkers(0, signal.SIGTERM, 5.0, collateral=True),) == c.handle(launch_failed).commands
    finish = c.handle(WorkersStopped(0, 0.2)).commands[0]
    assert isinstance(finish, FinishRun)
    assert (Outcome.FAILED, 127) == (finish.outcome, finish.exit_status)


def test_a_stop_signal_forwards_and_exits_128_plus_n() -> None:
    """SIGINT to the launcher drains with SIGINT and finishes as stopped, status 130."""
    c = controller()
    replay(c, [RunStarted(0.0), AttemptPlanned(0, 1, 0.05), AttemptLaunched(0, 1, 0.1)])
    assert (StopWorkers(0, signal.SIGINT, 5.0),) == c.handle(StopRequested(signal.SIGINT, 1.0)).commands
    c.handle(exited(0, 0, -signal.SIGINT, 1.1))
    finish = c.handle(WorkersStopped(0, 1.2)).commands[0]
    assert isinstance(finish, FinishRun)
    assert (Outcome.STOPPED, 130, None) == (finish.outcome, finish.exit_status, finish.root_cause)


def test_a_stop_during_a_restart_drain_finishes_instead_of_relaunching() -> None:
    """Once the launcher is told to stop, no new attempt starts."""
    c = controller(max_restarts=3)
    replay(c, [RunStarted(0.0), AttemptPlanned(0, 2, 0.05), AttemptLaunched(0, 2, 0.1), exited(0, 1, 1, 1.0)])
    assert () == c.handle(StopRequested(signal.SIGTERM, 1.05)).commands
    finish = c.handle(WorkersStopped(0, 1.2)).commands[0]
    assert isinstance(finish, FinishRun)
    assert (Outcome.STOPPED, 143) == (finish.outcome, finish.exit_status)


def test_a_stop_after_a_recovered_failure_names_no_root_cause() -> None:
    """Rank 1 fails in attempt 0 and the run restarts; SIGTERM in attempt 1 stops it with
    no root cause: the failure of attempt 0 was recovered from and did not end the run."""
    c = controller(max_restarts=3)
    replay(c, [RunStarted(0.0), AttemptPlanned(0, 2, 0.05), AttemptLaunched(0, 2, 0.1),
               exited(0, 1, 3, 1.0), WorkersStopped(0, 1.1),
               AttemptPlanned(1, 2, 1.2), AttemptLaunched(1, 2, 1.3),
               StopRequested(signal.SIGTERM, 2.0)])
    finish = c.handle(WorkersStopped(1, 2.1)).commands[0]
    assert isinstance(finish, FinishRun)
    assert (Outcome.STOPPED, 143, None) == (finish.outcome, finish.exit_status, finish.root_cause)


def test_a_stop_during_a_restart_drain_names_that_attempts_failure() -> None:
    """A stop while attempt 0's failure drains: that failure, never recovered from, is the root cause."""
    c = controller(max_restarts=3)
    replay(c, [RunStarted(0.0), AttemptPlanned(0, 2, 0.05), AttemptLaunched(0, 2, 0.1),
               exited(0, 1, 3, 1.0), StopRequested(signal.SIGTERM, 1.05)])
    finish = c.handle(WorkersStopped(0, 1.2)).commands[0]
    assert isinstance(finish, FinishRun) and finish.root_cause is not None
    assert (Outcome.STOPPED, 143, 1) == (finish.outcome, finish.exit_status, finish.root_cause.rank)


def test_too_few_nodes_after_a_lost_node_names_the_lost_node_as_root_cause() -> None:
    """Attempt 0 loses a node and restarts; attempt 1 never launches (too few nodes): the run
    failed because of attempt 0's failure, so that is its root cause, with status 75."""
    c = controller(max_restarts=0)
    replay(c, [RunStarted(0.0), AttemptPlanned(0, 2, 0.05), AttemptLaunched(0, 2, 0.1)])
    c.handle(WorkerExited(WorkerExit(attempt=0, rank=1, node="n1", returncode=None, observed_at=1.0,
                                     node_lost="node n1 lost: ActorDiedError")))
    assert (PlanAttempt(1),) == c.handle(WorkersStopped(0, 1.1)).commands
    c.handle(NodesUnavailable(1, 2, 1, 5.0))
    finish = c.handle(WorkersStopped(1, 5.1)).commands[0]
    assert isinstance(finish, FinishRun) and finish.root_cause is not None
    assert (Outcome.FAILED, 75, FailureKind.NODE_LOST, 1) == (
        finish.outcome, finish.exit_status, finish.root_cause.kind, finish.root_cause.rank)


def test_every_phase_change_is_recorded() -> None:
    """Each transition becomes one phase_changed record, with its reason."""
    c = controller()
    records = []
    for obs in [RunStarted(0.0), AttemptPlanned(0, 1, 0.05), AttemptLaunched(0, 1, 0.1), exited(0, 0, 0, 1.0), WorkersStopped(0, 1.1)]:
        records += [r for r in c.handle(obs).records if r.event is EventName.PHASE_CHANGED]
    assert [("pending", "launching"), ("launching", "running"), ("running", "draining"),
            ("draining", "done")] == [(r.fields["source"], r.fields["dest"]) for r in records]
    assert all(r.fields["reason"] for r in records)


def test_exits_of_an_old_attempt_are_ignored() -> None:
    """A late exit report from a finished attempt changes nothing."""
    c = controller(max_restarts=1)
    replay(c, [RunStarted(0.0), AttemptPlanned(0, 1, 0.05), AttemptLaunched(0, 1, 0.1), exited(0, 0, 1, 1.0), WorkersStopped(0, 1.1),
               AttemptPlanned(1, 1, 1.15), AttemptLaunched(1, 1, 1.2)])
    decision = c.handle(exited(0, 0, 1, 1.3))
    assert ((), ()) == (decision.records, decision.commands)
    assert Phase.RUNNING == c.phase


def test_a_lost_node_restarts_without_charging_max_restarts() -> None:
    """Ranks lost with their node are a preemption: restarted with --max-restarts 0."""
    c = controller(max_restarts=0)
    replay(c, [RunStarted(0.0), AttemptPlanned(0, 2, 0.05), AttemptLaunched(0, 2, 0.1)])
    lost = WorkerExited(WorkerExit(attempt=0, rank=1, node="n1", returncode=None, observed_at=1.0,
                                   node_lost="node n1 lost: ActorDiedError"))
    assert (StopWorkers(0, signal.SIGTERM, 5.0, collateral=True),) == c.handle(lost).commands
    assert (PlanAttempt(1),) == c.handle(WorkersStopped(0, 1.1)).commands
    assert FailureKind.NODE_LOST == c.attempts[0].root_cause.kind  # type: ignore[union-attr]
    assert 0 == len(c.policy.failures.charges)


def test_too_few_nodes_fails_with_its_own_status() -> None:
    """No replacement within the wait: the run fails with status 75, naming the counts."""
    c = controller(max_restarts=0)
    c.handle(RunStarted(0.0))
    assert (StopWorkers(0, signal.SIGTERM, 5.0, collateral=True),) == c.handle(NodesUnavailable(0, 2, 1, 5.0)).commands
    finish = c.handle(WorkersStopped(0, 5.1)).commands[0]
    assert isinstance(finish, FinishRun)
    assert (Outcome.FAILED, 75) == (finish.outcome, finish.exit_status)
    assert "needed at least 2 nodes, 1 available" == finish.reason


def _fail_attempt(c: Controller, attempt: int, resume: int | None, reached: int | None, at: float) -> tuple:  # type: ignore[type-arg]
    c.handle(AttemptPlanned(attempt, 1, at, resume_step=resume))
    c.handle(AttemptLaunched(attempt, 1, at + 0.1))
    c.handle(exited(attempt, 0, 1, at + 0.2))
    return c.handle(WorkersStopped(attempt, at + 0.3, checkpoint_step=reached)).commands


def test_restart_after_progress_is_immediate_and_backs_off_without() -> None:
    """A newer checkpoint means restart at once; none means an exponential wait."""
    policy = RestartPolicy.create(max_restarts=10, backoff=Backoff(initial_s=2.0, max_s=100.0))
    c = Controller(policy, ControllerSettings(grace_s=5.0, tracks_progress=True))
    c.handle(RunStarted(0.0))
    progressed = _fail_attempt(c, 0, None, 10, 1.0)
    stalled_once = _fail_attempt(c, 1, 10, 10, 2.0)
    stalled_twice = _fail_attempt(c, 2, 10, 10, 3.0)
    assert PlanAttempt(1, 0.0) == progressed[0]
    assert PlanAttempt(2, 0.0) == stalled_once[0]
    assert 2.0 <= stalled_twice[0].delay_s <= 3.0  # type: ignore[union-attr]


def test_crash_loop_stops_after_k_attempts_without_progress() -> None:
    """--max-no-progress 2: the second attempt in a row without a newer checkpoint ends it, 76."""
    c = Controller(RestartPolicy.create(max_restarts=10),
                   ControllerSettings(grace_s=5.0, tracks_progress=True, max_no_progress=2))
    c.handle(RunStarted(0.0))
    _fail_attempt(c, 0, 5, 5, 1.0)
    commands = _fail_attempt(c, 1, 5, 5, 2.0)
    finish = commands[0]
    assert isinstance(finish, FinishRun)
    assert (Outcome.FAILED, 76) == (finish.outcome, finish.exit_status)
    assert "crash loop" in finish.reason


def test_a_stopped_attempt_with_a_new_checkpoint_ends_the_streak_and_one_without_keeps_it() -> None:
    """A stopped run goes on when rerun (a requeue, an eviction): the stopped attempt's newer
    checkpoint resets the crash-loop streak it carries on; without one the streak stands, since
    being stopped is no sign of a crash loop."""
    for reached, streak in ((9, 0), (5, 1)):
        c = Controller(RestartPolicy.create(max_restarts=10),
                       ControllerSettings(grace_s=5.0, tracks_progress=True, max_no_progress=3))
        c.handle(RunStarted(0.0))
        _fail_attempt(c, 0, 5, 5, 1.0)  # no newer checkpoint: the streak is 1
        replay(c, [AttemptPlanned(1, 1, 2.0, resume_step=5), AttemptLaunched(1, 1, 2.1),
                   StopRequested(signal.SIGTERM, 3.0), exited(1, 0, -signal.SIGTERM, 3.1)])  # fmt: skip
        decision = c.handle(WorkersStopped(1, 3.2, checkpoint_step=reached))
        [stopped] = [r for r in decision.records if r.event is EventName.WORKERS_STOPPED]
        assert (reached > 5, streak) == (stopped.fields["made_progress"], stopped.fields["no_progress_streak"])
        [finish] = decision.commands
        assert isinstance(finish, FinishRun) and (Outcome.STOPPED, 143) == (finish.outcome, finish.exit_status)


@pytest.mark.parametrize(
    ("returncode", "stop_at", "expected", "taken"),
    [
        (-signal.SIGKILL, 1.02, (Outcome.STOPPED, 143), True),  # Slurm's requeue: a rank killed a moment before
        (-signal.SIGKILL, 1.0 + STOP_TOOK_FAILURE_S, (Outcome.STOPPED, 143), True),
        (-signal.SIGKILL, 1.1 + STOP_TOOK_FAILURE_S, (Outcome.FAILED, 137), False),  # too long before: its own
        (3, 1.02, (Outcome.FAILED, 3), False),  # an exit is no sign of the job being stopped
        (-signal.SIGSEGV, 1.02, (Outcome.FAILED, 139), False),
        (-signal.SIGTERM, 1.02, (Outcome.STOPPED, 143), False),  # a preemption: a restart drain the stop ends
    ],
)
def test_a_kill_just_before_a_stop_signal_is_taken_as_the_stops_doing(
    returncode: int, stop_at: float, expected: tuple[Outcome, int], taken: bool
) -> None:
    """No restart left: a rank killed (or terminated) at most STOP_TOOK_FAILURE_S before the
    launcher's own stop signal ends the run as stopped, which a rerun continues; anything else
    keeps the failure's outcome."""
    c = controller(max_restarts=0)
    c.handle(RunStarted(0.0))
    replay(c, [AttemptPlanned(0, 2, 0.05), AttemptLaunched(0, 2, 0.1), exited(0, 0, returncode, 1.0)])
    stop = c.handle(StopRequested(signal.SIGTERM, stop_at))
    c.handle(exited(0, 1, -signal.SIGTERM, stop_at + 0.1))
    [finish] = c.handle(WorkersStopped(0, stop_at + 0.2)).commands
    assert isinstance(finish, FinishRun) and expected == (finish.outcome, finish.exit_status)
    [record] = [r for r in stop.records if r.event is EventName.STOP_REQUESTED]
    assert taken == ("failure_taken" in record.fields)


def _growable(interval_s: float = 60.0) -> Controller:
    from elastic.core.policy.restarts import ScaleUp

    c = Controller(RestartPolicy.create(max_restarts=0), ControllerSettings(
        grace_s=5.0, tracks_progress=True, scale_up=ScaleUp(enabled=True, interval_s=interval_s, max_nodes=3)))
    replay(c, [RunStarted(0.0), AttemptPlanned(0, 2, 0.05, resume_step=4, nodes=2), AttemptLaunched(0, 2, 0.1)])
    return c


def test_joined_nodes_grow_the_world_only_after_a_new_checkpoint() -> None:
    """More nodes alone do nothing; with a newer checkpoint the group drains and relaunches."""
    from elastic.core.messages import ScaleCheck

    c = _growable()
    assert () == c.handle(ScaleCheck(0, 3, 4, 1.0)).commands
    assert (StopWorkers(0, signal.SIGTERM, 5.0),) == c.handle(ScaleCheck(0, 3, 6, 2.0)).commands
    c.handle(exited(0, 0, -signal.SIGTERM, 2.1))
    c.handle(exited(0, 1, -signal.SIGTERM, 2.1))
    assert (PlanAttempt(1, 0.0),) == c.handle(WorkersStopped(0, 2.2, checkpoint_step=6)).commands
    assert 0 == len(c.policy.failures.charges) + len(c.policy.preemptions.charges)


def test_growth_waits_for_the_interval_and_stops_at_max() -> None:
    """A second growth within --scale-up-interval, or beyond MAX nodes, is refused."""
    from elastic.core.messages import ScaleCheck
    from elastic.core.policy.restarts import ScaleUp

    grown_recently = ScaleUp(enabled=True, interval_s=60.0, max_nodes=3)
    assert not grown_recently.should_grow(now=30.0, nodes=2, available=3, new_checkpoint=True, last_grown_at=0.0)
    assert not grown_recently.should_grow(now=90.0, nodes=3, available=4, new_checkpoint=True, last_grown_at=0.0)
    assert grown_recently.should_grow(now=90.0, nodes=2, available=3, new_checkpoint=True, last_grown_at=0.0)
    assert () == _growable().handle(ScaleCheck(0, 2, 9, 1.0)).commands


def test_a_node_found_lost_while_draining_becomes_the_root_cause() -> None:
    """Peers that failed when a machine vanished are collateral; the restart is a preemption."""
    c = controller(max_restarts=0)
    replay(c, [RunStarted(0.0), AttemptPlanned(0, 2, 0.05, nodes=2), AttemptLaunched(0, 2, 0.1)])
    peer = WorkerExited(WorkerExit(attempt=0, rank=0, node="a", returncode=1, observed_at=1.0))
    lost = WorkerExited(WorkerExit(attempt=0, rank=1, node="b", returncode=None, observed_at=2.5,
                                   node_lost="ActorUnavailableError while stopping"))
    c.handle(peer)  # with --max-restarts 0 this alone would end the run
    decision = c.handle(lost)
    assert EventName.ROOT_CAUSE_REVISED in [r.event for r in decision.records]
    assert (PlanAttempt(1),) == c.handle(WorkersStopped(0, 2.6)).commands
    cause = c.attempts[0].root_cause
    assert cause is not None and (FailureKind.NODE_LOST, "b") == (cause.kind, cause.node)
    assert (0, 1) == (len(c.policy.failures.charges), len(c.policy.preemptions.charges))


def test_a_node_lost_after_a_stop_request_changes_nothing() -> None:
    """When the launcher itself was told to stop, a node lost meanwhile is only collateral."""
    c = controller(max_restarts=0)
    replay(c, [RunStarted(0.0), AttemptPlanned(0, 1, 0.05), AttemptLaunched(0, 1, 0.1)])
    c.handle(StopRequested(signal.SIGTERM, 1.0))
    decision = c.handle(WorkerExited(WorkerExit(attempt=0, rank=0, node="b", returncode=None, observed_at=1.1,
                                            node_lost="gone")))
    assert EventName.ROOT_CAUSE_REVISED not in [r.event for r in decision.records]


def test_a_node_agent_that_cannot_start_fails_the_run_before_launch() -> None:
    """A launch failure seen while placing (an agent's environment) fails at once, status 126."""
    c = controller(max_restarts=5)
    c.handle(RunStarted(0.0))
    broken = WorkerExited(WorkerExit(attempt=0, rank=2, node="n1", returncode=126, observed_at=0.1,
                                     launch_error="the node agent on node n1 could not start: boom"))
    assert (StopWorkers(0, signal.SIGTERM, 5.0, collateral=True),) == c.handle(broken).commands
    finish = c.handle(WorkersStopped(0, 0.2)).commands[0]
    assert isinstance(finish, FinishRun)
    assert (Outcome.FAILED, 126, FailureKind.LAUNCH_FAILED) == (
        finish.outcome, finish.exit_status, finish.root_cause.kind if finish.root_cause else None)


def test_a_backend_that_can_no_longer_hear_exits_ends_the_run_with_its_reason() -> None:
    """A dead event pump drains and fails the run (70); losing Ray itself says requeue (75)."""
    for requeue, status in ((False, 70), (True, 75)):
        c = controller(max_restarts=3)
        replay(c, [RunStarted(0.0), AttemptPlanned(0, 2, 0.05), AttemptLaunched(0, 2, 0.1)])
        decision = c.handle(BackendFailed("the event pump failed", requeue, 1.0))
        assert (StopWorkers(0, signal.SIGTERM, 5.0, collateral=True),) == decision.commands
        assert [EventName.BACKEND_FAILED] == [r.event for r in decision.records][:1]
        finish = c.handle(WorkersStopped(0, 1.2)).commands[0]
        assert isinstance(finish, FinishRun)
        assert (Outcome.FAILED, status, "the event pump failed") == (
            finish.outcome, finish.exit_status, finish.reason)


def test_a_backend_failure_turns_a_restart_drain_into_the_end_but_never_undoes_success() -> None:
    """Draining for a restart: the run ends instead. Draining after success: it stays a success."""
    c = controller(max_restarts=3)
    replay(c, [RunStarted(0.0), AttemptPlanned(0, 2, 0.05), AttemptLaunched(0, 2, 0.1), exited(0, 1, 1, 1.0)])
    assert () == c.handle(BackendFailed("lost Ray", True, 1.05)).commands
    finish = c.handle(WorkersStopped(0, 1.2)).commands[0]
    assert isinstance(finish, FinishRun) and (Outcome.FAILED, 75) == (finish.outcome, finish.exit_status)

    c = controller()
    replay(c, [RunStarted(0.0), AttemptPlanned(0, 1, 0.05), AttemptLaunched(0, 1, 0.1), exited(0, 0, 0, 1.0)])
    c.handle(BackendFailed("lost Ray", True, 1.05))
    finish = c.handle(WorkersStopped(0, 1.2)).commands[0]
    assert isinstance(finish, FinishRun) and (Outcome.SUCCEEDED, 0) == (finish.outcome, finish.exit_status)


def test_a_node_reported_lost_after_a_backend_fault_never_relaunches_the_run() -> None:
    """A rank whose exit the dead backend could not hear is reported lost with its node; that
    must not revise the root cause into a relaunch (the driver would plan on a dead backend
    and wait forever): the run ends with the backend fault's status."""
    c = controller(max_restarts=3)
    replay(c, [RunStarted(0.0), AttemptPlanned(0, 2, 0.05, nodes=2), AttemptLaunched(0, 2, 0.1)])
    c.handle(WorkerExited(WorkerExit(attempt=0, rank=1, node="b", returncode=1, observed_at=1.0)))
    c.handle(BackendFailed("the driver lost its connection to Ray (x)", True, 1.05))
    unheard = WorkerExited(WorkerExit(attempt=0, rank=0, node="a", returncode=None, observed_at=1.1,
                                      node_lost="its exit could not be heard (the event pump stopped)"))
    decision = c.handle(unheard)
    assert EventName.ROOT_CAUSE_REVISED not in [r.event for r in decision.records]
    [finish] = c.handle(WorkersStopped(0, 1.2)).commands
    assert isinstance(finish, FinishRun) and finish.root_cause is not None
    assert (Outcome.FAILED, 75, FailureKind.EXITED, "b") == (
        finish.outcome, finish.exit_status, finish.root_cause.kind, finish.root_cause.node)
    assert Phase.DONE == c.phase


def test_a_node_lost_after_a_stop_or_backend_fault_never_turns_an_ending_drain_into_a_relaunch() -> None:
    """No budget left, the drain already ends the run; a stop or a backend fault keeps it
    (its outcome stands) and makes it final: a node lost afterwards relaunches nothing."""
    for ending in (StopRequested(signal.SIGTERM, 1.05), BackendFailed("lost Ray", True, 1.05)):
        c = controller(max_restarts=0)
        replay(c, [RunStarted(0.0), AttemptPlanned(0, 2, 0.05, nodes=2), AttemptLaunched(0, 2, 0.1)])
        c.handle(WorkerExited(WorkerExit(attempt=0, rank=1, node="b", returncode=1, observed_at=1.0)))
        c.handle(ending)
        c.handle(WorkerExited(WorkerExit(attempt=0, rank=0, node="a", returncode=None, observed_at=1.1,
                                         node_lost="gone")))
        [finish] = c.handle(WorkersStopped(0, 1.2)).commands
        assert isinstance(finish, FinishRun) and (Outcome.FAILED, 1) == (finish.outcome, finish.exit_status)
        assert Phase.DONE == c.phase


def test_a_takeover_counts_the_interrupted_attempt_and_can_end_in_a_crash_loop() -> None:
    """The dead driver's streak goes on: its running attempt had failed (a rank exited 1, journaled)
    and ended without progress, the third in a row with --max-no-progress 3, so the run ends at
    once (76) without launching."""
    c = Controller(RestartPolicy.create(max_restarts=10),
                   ControllerSettings(grace_s=5.0, tracks_progress=True, max_no_progress=3, first_attempt=3))
    failed = to_failure(WorkerExit(attempt=2, rank=0, node="n0", returncode=1, observed_at=0.0), FailureKind.EXITED)
    decision = c.handle(RunStarted(0.0, Resumed(2, interrupted=2, interrupted_resume_step=5, checkpoint_step=5,
                                                last_cause=failed)))
    assert [StopWorkers(3, signal.SIGTERM, 5.0, collateral=True)] == list(decision.commands)
    stopped = [r for r in decision.records if r.event is EventName.WORKERS_STOPPED]
    assert [(2, False, 3)] == [(r.attempt, r.fields["made_progress"], r.fields["no_progress_streak"]) for r in stopped]
    [finish] = c.handle(WorkersStopped(3, 0.1)).commands
    assert isinstance(finish, FinishRun) and (Outcome.FAILED, 76) == (finish.outcome, finish.exit_status)


def test_a_takeover_of_an_attempt_training_well_when_its_driver_died_extends_no_crash_loop_streak() -> None:
    """A third driver death in a row, each during an attempt with no failure and no newer
    checkpoint (an operator's kill -9, a driver's machine taken without notice): the streak stays
    2, --max-no-progress 3 does not stop the run, and it launches again. Before, it read 3: a
    fixable run ended as a crash loop (76)."""
    c = Controller(RestartPolicy.create(max_restarts=10),
                   ControllerSettings(grace_s=5.0, tracks_progress=True, max_no_progress=3, first_attempt=3))
    decision = c.handle(RunStarted(0.0, Resumed(2, interrupted=2, interrupted_resume_step=5, checkpoint_step=5)))
    stopped = [r for r in decision.records if r.event is EventName.WORKERS_STOPPED]
    assert [(2, False, 2)] == [(r.attempt, r.fields["made_progress"], r.fields["no_progress_streak"]) for r in stopped]
    assert not any(isinstance(command, FinishRun) for command in c.handle(WorkersStopped(3, 0.1)).commands)
    assert Phase.DONE != c.phase


def test_a_takeover_of_an_attempt_ending_for_a_notice_extends_no_crash_loop_streak() -> None:
    """The dead driver was draining for a preemption notice when the machine went (a spot burst's
    requeue): its attempt saved nothing newer, yet the streak stays 2, as under a live driver, so
    --max-no-progress 3 does not stop the run and the backoff stays at its level. Before, it read
    3: a crash loop called on a run preempted three times."""
    c = Controller(RestartPolicy.create(max_restarts=10),
                   ControllerSettings(grace_s=5.0, tracks_progress=True, max_no_progress=3, first_attempt=3))
    decision = c.handle(RunStarted(0.0, Resumed(2, interrupted=2, interrupted_resume_step=5, checkpoint_step=5,
                                                interrupted_by_notice=True)))
    stopped = [r for r in decision.records if r.event is EventName.WORKERS_STOPPED]
    assert [(2, False, 2)] == [(r.attempt, r.fields["made_progress"], r.fields["no_progress_streak"]) for r in stopped]
    assert not any(isinstance(command, FinishRun) for command in c.handle(WorkersStopped(3, 0.1)).commands)
    assert Phase.DONE != c.phase


def test_a_takeover_of_a_run_whose_ranks_all_exited_0_finishes_it_as_succeeded_and_starts_nothing() -> None:
    """The dead driver died during the success drain: that attempt's drain is ended again, a
    success with exit status 0, and no attempt is planned."""
    c = Controller(RestartPolicy.create(max_restarts=10),
                   ControllerSettings(grace_s=5.0, tracks_progress=True, max_no_progress=1, first_attempt=3))
    decision = c.handle(RunStarted(0.0, Resumed(0, interrupted=2, succeeded_attempt=2)))
    [stop] = decision.commands
    assert isinstance(stop, StopWorkers) and 2 == stop.attempt
    finished = c.handle(WorkersStopped(2, 0.1))
    [finish] = finished.commands
    assert isinstance(finish, FinishRun) and (Outcome.SUCCEEDED, 0) == (finish.outcome, finish.exit_status)
    assert [2] == [r.attempt for r in finished.records if r.event is EventName.RUN_FINISHED]
    assert Phase.DONE == c.phase


def test_a_takeover_after_progress_starts_at_once_and_without_progress_backs_off_at_the_level() -> None:
    """A newer checkpoint than the interrupted attempt resumed from resets the streak; none, after a
    failure of its own, raises it, and the first attempt of the new driver waits the backoff of that
    level (journaled with it); an attempt the driver's death ended keeps the level."""
    failed = to_failure(WorkerExit(attempt=3, rank=0, node="n0", returncode=1, observed_at=0.0), FailureKind.EXITED)

    def takeover(checkpoint: int, cause: Failure | None = failed) -> tuple[float, list[int]]:
        c = Controller(RestartPolicy.create(max_restarts=10, backoff=Backoff(1.0, 60.0)),
                       ControllerSettings(grace_s=5.0, tracks_progress=True, max_no_progress=5, first_attempt=4))
        decision = c.handle(RunStarted(0.0, Resumed(2, interrupted=3, interrupted_resume_step=5,
                                                checkpoint_step=checkpoint, last_cause=cause)))
        [plan] = decision.commands
        assert isinstance(plan, PlanAttempt) and 4 == plan.attempt
        return plan.delay_s, [r.fields["level"] for r in decision.records if r.event is EventName.BACKOFF_STARTED]

    assert (0.0, []) == takeover(checkpoint=7)
    delay_s, levels = takeover(checkpoint=5)
    assert [2] == levels and 2.0 <= delay_s <= 2.5  # Backoff(1, 60).delay_s(2): 2 s and jitter
    delay_s, levels = takeover(checkpoint=5, cause=None)
    assert [1] == levels and 1.0 <= delay_s <= 1.25


def test_the_settings_come_from_the_run_configuration_and_a_taken_over_run_goes_on_from_its_prior() -> None:
    """The controller's options are the RunConfig's; a takeover's next attempt and left-out nodes, the prior's."""
    from pathlib import Path

    from elastic.core.controller.settings import controller_settings
    from elastic.core.journal.recovery import PriorRun
    from elastic.core.options.config import RunConfig
    from elastic.core.policy.restarts import ExitHang, ScaleUp

    config = RunConfig(
        command=("python", "train.py"), run_id="r", run_dir=Path("/tmp/r"), nproc_per_node=1,
        grace_period_s=12.0, failure_grace_s=3.0, checkpoint_dir=Path("/tmp/ckpt"), max_no_progress=4,
        scale_up=True, scale_up_interval_s=90.0, min_nodes=2, max_nodes=5, exit_timeout_s=7.0,
        exit_hang=ExitHang.SUCCEED, preempt_signal=signal.SIGUSR1,
    )
    assert ControllerSettings(
        grace_s=12.0, failure_grace_s=3.0, tracks_progress=True, max_no_progress=4,
        scale_up=ScaleUp(enabled=True, interval_s=90.0, max_nodes=5), exit_timeout_s=7.0,
        exit_hang=ExitHang.SUCCEED, min_nodes=2, preempt_signal=signal.SIGUSR1, on_straggler=config.on_straggler,
    ) == controller_settings(config)
    prior = PriorRun("r", 3, (), (), None, None, False, left_out=("b",))
    taken_over = controller_settings(config, prior)
    assert (3, ("b",)) == (taken_over.first_attempt, taken_over.left_out)
    no_checkpoints = controller_settings(RunConfig(command=("x",), run_id="r", run_dir=Path("/tmp/r"),
                                                   nproc_per_node=1, scale_up=True))
    assert (False, False) == (no_checkpoints.tracks_progress, no_checkpoints.scale_up.enabled)


def test_a_takeover_journals_how_far_the_dead_drivers_attempt_was_seen_training() -> None:
    """The step its ranks were last seen at (the dead driver's state.json, their logs) and when go
    into the interrupted attempt's workers_stopped, beside the checkpoint found now."""
    c = Controller(RestartPolicy.create(max_restarts=10), ControllerSettings(grace_s=5.0, first_attempt=3))
    seen = Resumed(0, interrupted=2, checkpoint_step=10, interrupted_step=15,
                   interrupted_step_at="2026-12-03T09:00:25+00:00")
    [stopped] = [r for r in c.handle(RunStarted(0.0, seen)).records if r.event is EventName.WORKERS_STOPPED]
    assert (2, "its driver died", 10, 15, "2026-12-03T09:00:25+00:00") == (
        stopped.attempt, stopped.fields["reason"], stopped.fields["checkpoint_step"],
        stopped.fields["last_step"], stopped.fields["last_step_at"])
