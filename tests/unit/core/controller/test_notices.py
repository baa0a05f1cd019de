"""Preemption notices decided by the pure controller: who is told, how long they get, where the run goes."""

from __future__ import annotations

import importlib
import json
import signal
from pathlib import Path

import pytest

from elastic.core.controller.controller import Controller
from elastic.core.controller.settings import ControllerSettings
from elastic.core.events import EventName
from elastic.core.failures import FailureKind, WorkerExit
from elastic.core.controller.machine import Phase
from elastic.core.messages import (
    AnnouncePreemption,
    AttemptLaunched,
    AttemptPlanned,
    FinishRun,
    Outcome,
    PlanAttempt,
    PreemptionNoticed,
    RunStarted,
    StopRequested,
    StopWorkers,
    WorkerExited,
    WorkersStopped,
)
from elastic.core.controller.capacity import decide_notice, drain_source
from elastic.core.policy.restarts import RestartPolicy
from elastic.core.journal.recovery import prior_run

NODE = "a" * 56  # a Ray node id


def running(min_nodes: int = 1, preempt_signal: int = signal.SIGTERM, max_preemptions: int = 0) -> Controller:
    """Attempt 0 running on two nodes; no restart allowed by any budget."""
    c = Controller(
        RestartPolicy.create(max_restarts=0, max_preemptions=max_preemptions),
        ControllerSettings(grace_s=5.0, min_nodes=min_nodes, preempt_signal=preempt_signal),
    )
    c.handle(RunStarted(0.0))
    c.handle(AttemptPlanned(0, 2, 0.05, nodes=2))
    c.handle(AttemptLaunched(0, 2, 0.1))
    return c


def terminated(rank: int, at: float, returncode: int = -signal.SIGTERM) -> WorkerExited:
    return WorkerExited(WorkerExit(attempt=0, rank=rank, node="n0", returncode=returncode, observed_at=at))


def drained(usable: int, at: float = 1.0, deadline_at: float | None = 31.0) -> PreemptionNoticed:
    return PreemptionNoticed(drain_source(NODE), at, deadline_at, nodes=(NODE,), attempt=0, usable_nodes=usable)


def test_a_notice_signal_tells_every_rank_then_stops_them_and_ends_with_75() -> None:
    """SIGUSR1 to the launcher: announce, then --preempt-signal with --grace-period, then exit 75."""
    c = running()
    decision = c.handle(PreemptionNoticed("signal SIGUSR1", 1.0))
    assert (
        AnnouncePreemption(0, "signal SIGUSR1", 6.0, signal.SIGTERM),
        StopWorkers(0, signal.SIGTERM, 5.0),
    ) == decision.commands
    [record] = [r for r in decision.records if r.event is EventName.PREEMPTION_NOTICED]
    assert ("signal SIGUSR1", 5.0, "--grace-period", "requeue") == (
        record.fields["source"], record.fields["deadline_s"], record.fields["deadline_from"], record.fields["then"]
    )
    c.handle(terminated(0, 1.2))
    c.handle(terminated(1, 1.3, returncode=0))  # saved and exited by itself
    end = c.handle(WorkersStopped(0, 1.4, checkpoint_step=17))
    [finish] = end.commands
    assert isinstance(finish, FinishRun)
    assert (Outcome.STOPPED, 75, None) == (finish.outcome, finish.exit_status, finish.root_cause)
    assert [FailureKind.COLLATERAL] == [f.kind for f in c.attempts[0].failures]


def test_a_drained_node_with_enough_left_relaunches_at_once_charged_to_no_budget() -> None:
    """Ray drained one of two nodes, 1:2 nodes: the ranks get until the deadline, then attempt 1
    starts at once, though no budget allows a restart and no checkpoint was newer."""
    c = running(min_nodes=1)
    decision = c.handle(drained(usable=1, at=1.0, deadline_at=31.0))
    assert (
        AnnouncePreemption(0, f"ray drain of node {NODE[:12]}", 31.0, signal.SIGTERM),
        StopWorkers(0, signal.SIGTERM, 30.0),
    ) == decision.commands
    c.handle(terminated(0, 2.0))
    c.handle(terminated(1, 2.1))
    relaunch = c.handle(WorkersStopped(0, 2.2, checkpoint_step=None))
    assert (PlanAttempt(1, 0.0),) == relaunch.commands
    assert Phase.PENDING == c.phase
    assert c.attempts[0].restarted and c.attempts[0].root_cause is None
    assert (0, 0) == (c.policy.failures.remaining(3.0), c.policy.preemptions.remaining(3.0))


def test_a_drained_node_leaving_fewer_than_min_nodes_ends_with_75() -> None:
    """--nnodes 2 and one of the two nodes drained: save until the deadline, then 'requeue me'."""
    c = running(min_nodes=2)
    c.handle(drained(usable=1))
    c.handle(terminated(0, 2.0))
    c.handle(terminated(1, 2.1))
    [finish] = c.handle(WorkersStopped(0, 2.2)).commands
    assert isinstance(finish, FinishRun)
    assert (Outcome.STOPPED, 75) == (finish.outcome, finish.exit_status)
    assert "1 node left, --nnodes needs 2" in finish.reason


def test_preempt_signal_none_sends_no_signal_and_waits_for_the_deadline() -> None:
    """--preempt-signal none is signal 0: the notice file alone, SIGKILL at the deadline."""
    c = running(preempt_signal=0)
    decision = c.handle(PreemptionNoticed("signal SIGUSR1", 1.0))
    assert StopWorkers(0, 0, 5.0) == decision.commands[-1]


def test_a_drain_of_another_attempt_is_ignored() -> None:
    """Nodes of an attempt that is over: the next one was planned without them."""
    c = running()
    decision = c.handle(PreemptionNoticed(drain_source(NODE), 1.0, 31.0, nodes=(NODE,), attempt=7, usable_nodes=1))
    assert ((), ()) == (decision.records, decision.commands)
    assert Phase.RUNNING == c.phase


def test_a_notice_signal_during_a_restart_drain_ends_the_run_with_75_instead() -> None:
    """A failure began a restart; then the whole job is going: no relaunch, 'requeue me'."""
    c = Controller(RestartPolicy.create(max_restarts=3), ControllerSettings(grace_s=5.0))
    c.handle(RunStarted(0.0))
    c.handle(AttemptPlanned(0, 2, 0.05))
    c.handle(AttemptLaunched(0, 2, 0.1))
    c.handle(terminated(1, 1.0, returncode=1))
    assert c.draining is not None and Phase.PENDING == c.draining.next_phase
    c.handle(PreemptionNoticed("signal SIGUSR1", 1.1))
    c.handle(terminated(0, 1.2))
    [finish] = c.handle(WorkersStopped(0, 1.3)).commands
    assert isinstance(finish, FinishRun)
    assert 75 == finish.exit_status


def test_a_stop_signal_after_a_notice_keeps_the_requeue_status() -> None:
    """Slurm sends SIGTERM at the time limit, after the notice: the run still asks to be requeued."""
    c = running()
    c.handle(PreemptionNoticed("signal SIGUSR1", 1.0))
    c.handle(StopRequested(signal.SIGTERM, 2.0))
    c.handle(terminated(0, 2.1))
    c.handle(terminated(1, 2.2))
    [finish] = c.handle(WorkersStopped(0, 2.3)).commands
    assert isinstance(finish, FinishRun)
    assert 75 == finish.exit_status


def test_a_deadline_already_passed_gives_no_grace() -> None:
    decision = decide_notice(
        PreemptionNoticed("x", 10.0, 4.0, nodes=("n",), attempt=0, usable_nodes=3),
        now=10.0, grace_s=30.0, min_nodes=1, preempt_signal=signal.SIGTERM,
    )
    assert (0.0, True) == (decision.draining.grace_s, decision.relaunch)


def test_a_run_that_ended_with_75_can_be_continued_and_one_that_failed_cannot() -> None:
    """'Requeue me' is not the end of the run: a rerun with the same id goes on from it."""

    def journal(outcome: str, status: int) -> list[dict[str, object]]:
        return [
            {"event": "run_started", "time": "2026-01-01T00:00:00+00:00", "attempt": 0, "journal_version": 2},
            {"event": "attempt_started", "time": "2026-01-01T00:00:01+00:00", "attempt": 0},
            {"event": "workers_stopped", "time": "2026-01-01T00:00:02+00:00", "attempt": 0},
            {"event": "run_finished", "time": "2026-01-01T00:00:03+00:00", "attempt": 0,
             "outcome": outcome, "exit_status": status},
        ]

    requeued = prior_run(journal("stopped", 75))
    assert (True, 1, 75) == (requeued.continuable, requeued.next_attempt, requeued.finished_exit_status)
    assert not prior_run(journal("failed", 1)).continuable


def test_preemption_requested_is_the_notice_file_and_stays_true(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """False until the agent writes the file, true from then on, even if the file goes."""
    import elastic.worker.preemption as preemption

    notice_file = tmp_path / "rank-0.preempt"
    monkeypatch.setenv("ELASTIC_PREEMPTION_FILE", str(notice_file))
    fresh = importlib.reload(preemption)
    assert (False, None) == (fresh.preemption_requested(), fresh.preemption_notice())
    notice_file.write_text(json.dumps({"source": "signal SIGUSR1", "deadline": 12.5, "signal": "SIGTERM"}))
    assert fresh.preemption_requested()
    assert {"source": "signal SIGUSR1", "deadline": 12.5, "signal": "SIGTERM"} == fresh.preemption_notice()
    notice_file.unlink()
    assert fresh.preemption_requested()
    monkeypatch.delenv("ELASTIC_PREEMPTION_FILE")
    assert not importlib.reload(preemption).preemption_requested()  # no launcher: never


def test_a_notice_signal_that_comes_while_the_launcher_starts_is_kept_for_the_relay() -> None:
    """SIGUSR1 between reading the flags and the driver's relay (Ray starting) is not fatal:
    the relay, once installed, queues it as a notice."""
    import queue
    import threading

    from elastic.run.held_notices import hold_notices
    from elastic.run.signals import SignalRelay
    from elastic.testing import FakeClock

    before = signal.getsignal(signal.SIGUSR1)
    try:
        hold_notices(signal.SIGUSR1)
        signal.raise_signal(signal.SIGUSR1)
        observations: queue.SimpleQueue[object] = queue.SimpleQueue()
        stop = threading.Event()
        relay = SignalRelay(observations, stop, lambda: None, FakeClock(), notice_signal=signal.SIGUSR1)  # type: ignore[arg-type]
        restore = relay.install()
        restore()
    finally:
        signal.signal(signal.SIGUSR1, before)
    seen = observations.get_nowait()
    assert isinstance(seen, PreemptionNoticed) and "signal SIGUSR1" == seen.source
    assert stop.is_set()
