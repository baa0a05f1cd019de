"""The driver over a FakeBackend: journal, report and events, with no processes."""

from __future__ import annotations

import contextvars
import json
import signal
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
import structlog

from elastic.backends.protocol import ExitSink
from elastic.core.options.config import RunConfig
from elastic.core.launch.spec import WorkerSpec
from elastic.run.driver import Driver, RunResult
from elastic.core.events import LogEvent
from elastic.run.records.journal import RunDirectory, read_journal
from elastic.core.messages import Outcome
from elastic.testing import FakeBackend, FakeClock, capture_events


def start_driver(tmp_path: Path, backend: FakeBackend, **config: object) -> tuple[threading.Thread, list[RunResult]]:
    run_config = RunConfig(command=("train",), run_id="r1", run_dir=tmp_path / "run", nproc_per_node=2,
                           **config)  # type: ignore[arg-type]
    driver = Driver(run_config, backend, RunDirectory.create(run_config.run_dir),
                    base_env={"API_TOKEN": "hunter2", "HOME": "/h"}, clock=backend.clock)
    results: list[RunResult] = []
    thread = threading.Thread(target=lambda: results.append(driver.run()), daemon=True)
    thread.start()
    return thread, results


def test_driver_restarts_through_the_backend_and_journals_each_step(tmp_path: Path) -> None:
    """A killed rank leads to a second launch, a journal of every step and a report."""
    backend = FakeBackend(clock=FakeClock())
    with capture_events() as events:
        thread, results = start_driver(tmp_path, backend, max_restarts=1)
        backend.wait_for_attempt(0)
        backend.exit(1, -signal.SIGKILL)
        attempt1 = backend.wait_for_attempt(1)
        backend.exit(0, 0)
        backend.exit(1, 0)
        thread.join(10)
    assert not thread.is_alive()
    assert Outcome.SUCCEEDED == results[0].outcome
    assert ["1", "1"] == [s.env["TORCHELASTIC_RESTART_COUNT"] for s in attempt1]
    assert backend.launched[0][0].env["MASTER_PORT"] != attempt1[0].env["MASTER_PORT"]
    journal = read_journal(tmp_path / "run" / "journal.jsonl").events
    assert "killed" == next(e["kind"] for e in journal if e["event"] == "worker_failed")
    assert "run_finished" == journal[-1]["event"]
    assert "worker_failed" in [e["event"] for e in events]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert (1, "killed") == (report["restarts"], report["attempts"][0]["root_cause"]["kind"])
    assert backend.closed


class _LoggingBackend(FakeBackend):
    """A fake backend that logs as the Ray backend does: module-level logger, own thread."""

    def start(self, on_exit: ExitSink) -> None:
        super().start(on_exit)
        log = structlog.get_logger("elastic.ray")
        log.info(LogEvent.NODES_AWAITED.value, needed=1, available=0)
        context = contextvars.copy_context()
        thread = threading.Thread(target=context.run, args=(log.info, LogEvent.AGENT_STARTED.value))
        thread.start()
        thread.join(10)


def test_every_event_of_a_run_carries_its_run_id(tmp_path: Path) -> None:
    """Events the driver logs and those its backend logs with its own logger carry run_id."""
    backend = _LoggingBackend(clock=FakeClock())
    with capture_events() as events:
        thread, _ = start_driver(tmp_path, backend)
        backend.wait_for_attempt(0)
        backend.exit(0, 0)
        backend.exit(1, 0)
        thread.join(10)
    assert not thread.is_alive()
    assert {"nodes_awaited", "agent_started", "run_started", "run_finished"} <= {e["event"] for e in events}
    assert [] == [e for e in events if e.get("run_id") != "r1"]


def test_secrets_never_reach_the_journal(tmp_path: Path) -> None:
    """A secret-looking variable is redacted in the run directory but reaches workers."""
    backend = FakeBackend(clock=FakeClock())
    thread, _ = start_driver(tmp_path, backend)
    specs = backend.wait_for_attempt(0)
    backend.exit(0, 0)
    backend.exit(1, 0)
    thread.join(10)
    assert "hunter2" == specs[0].env["API_TOKEN"]
    for name in ("journal.jsonl", "state.json", "report.json"):
        assert "hunter2" not in (tmp_path / "run" / name).read_text()


def test_jax_coordinator_port_never_shares_a_given_master_port(tmp_path: Path) -> None:
    """With --master-port equal to the free port found for the coordinator, the coordinator takes the other one."""
    backend = FakeBackend(clock=FakeClock())  # its free ports of attempt 0: 20000, 20001
    thread, results = start_driver(tmp_path, backend, master_port=20001)
    specs = backend.wait_for_attempt(0)
    backend.exit(0, 0)
    backend.exit(1, 0)
    thread.join(10)
    assert ("20001", "127.0.0.1:20000") == (specs[0].env["MASTER_PORT"], specs[0].env["ELASTIC_COORDINATOR_ADDRESS"])


def test_launch_failure_fails_the_run_without_retrying(tmp_path: Path) -> None:
    """A LaunchError from the backend ends the run with status 127 after one attempt."""
    backend = FakeBackend(clock=FakeClock(), fail_launch_rank=0)
    thread, results = start_driver(tmp_path, backend, max_restarts=3)
    thread.join(10)
    assert (Outcome.FAILED, 127, 1) == (results[0].outcome, results[0].exit_status, len(backend.launched))


def test_a_backend_that_can_no_longer_hear_exits_ends_the_run(tmp_path: Path) -> None:
    """A backend fault (a dead event pump) drains and ends the run with its reason, never a wait."""
    backend = FakeBackend(clock=FakeClock())
    thread, results = start_driver(tmp_path, backend, max_restarts=3)
    backend.wait_for_attempt(0)
    backend.fault("the event pump failed (RuntimeError: boom)")
    thread.join(10)
    assert not thread.is_alive()
    assert (Outcome.FAILED, 70) == (results[0].outcome, results[0].exit_status)
    assert "the event pump failed (RuntimeError: boom)" == results[0].report["reason"]
    journal = read_journal(tmp_path / "run" / "journal.jsonl").events
    assert 1 == len([e for e in journal if e["event"] == "backend_failed"])


def test_a_lost_node_shrinks_the_world_without_charging_restarts(tmp_path: Path) -> None:
    """With --nnodes 1:2, losing a node relaunches on the survivor with a smaller world."""
    from elastic.core.launch.plan import NodeSlot

    backend = FakeBackend(clock=FakeClock(), nodes=[NodeSlot("a", "10.0.0.1", 2), NodeSlot("b", "10.0.0.2", 2)])
    thread, results = start_driver(tmp_path, backend, max_restarts=0, min_nodes=1, max_nodes=2)
    first = backend.wait_for_attempt(0)
    backend.lose_node("b")
    second = backend.wait_for_attempt(1)
    backend.exit(0, 0)
    backend.exit(1, 0)
    thread.join(10)
    assert (4, 2) == (len(first), len(second))
    assert ["0", "1"] == [s.env["ELASTIC_WORLD_CHANGED"] for s in (first[0], second[0])]
    assert (Outcome.SUCCEEDED, 0) == (results[0].outcome, results[0].exit_status)


def test_nodes_are_journaled_by_name_with_the_backends_ids_for_a_later_driver(tmp_path: Path) -> None:
    """Ranks see the node's name as ELASTIC_NODE, the plan names it, and the backend's own id
    (Ray's) goes with it, so a driver taking the run over gives each node the same name."""
    from elastic.core.journal.recovery import prior_run
    from elastic.core.launch.plan import NodeSlot

    ids = ("a1" * 28, "b2" * 28)
    backend = FakeBackend(clock=FakeClock(), nodes=[NodeSlot("box·a1a1a1", "10.0.0.1", 1, backend_id=ids[0]),
                                                    NodeSlot("box·b2b2b2", "10.0.0.1", 1, backend_id=ids[1])])
    thread, results = start_driver(tmp_path, backend, min_nodes=2, max_nodes=2)
    specs = backend.wait_for_attempt(0)
    backend.exit(0, 0)
    backend.exit(1, 0)
    thread.join(10)
    assert ["box·a1a1a1", "box·b2b2b2"] == [s.env["ELASTIC_NODE"] for s in specs]
    journal = read_journal(tmp_path / "run" / "journal.jsonl").events
    started = next(e for e in journal if e["event"] == "attempt_started")
    assert ["box·a1a1a1", "box·b2b2b2"] == started["nodes"]
    assert {ids[0]: "box·a1a1a1", ids[1]: "box·b2b2b2"} == dict(prior_run(journal).node_names)


def test_too_few_nodes_after_a_loss_fails_with_75(tmp_path: Path) -> None:
    """Below --nnodes MIN with no replacement, the run fails with exit status 75."""
    from elastic.core.launch.plan import NodeSlot

    backend = FakeBackend(clock=FakeClock(), nodes=[NodeSlot("a", "10.0.0.1", 1), NodeSlot("b", "10.0.0.2", 1)])
    thread, results = start_driver(tmp_path, backend, max_restarts=3, min_nodes=2, max_nodes=2)
    backend.wait_for_attempt(0)
    backend.lose_node("b")
    thread.join(10)
    assert (Outcome.FAILED, 75) == (results[0].outcome, results[0].exit_status)
    assert "needed at least 2 nodes, 1 available" == results[0].report["reason"]


def test_a_run_that_never_had_its_nodes_reads_the_same_in_elastic_runs_and_its_summary(tmp_path: Path) -> None:
    """Too few nodes at the start, nothing launched: `elastic runs` counts the attempt that waited and
    gives the reason as the summary does (it showed 0 attempts and no cause, the summary 1 and why)."""
    from elastic.core.launch.plan import NodeSlot
    from elastic.views.report import summary_lines
    from elastic.views.runs import run_row

    class WaitsOutTheTimeout(FakeBackend):
        """Too few nodes after the whole --node-wait-timeout, as a real cluster's wait ends."""

        def acquire_nodes(self, previous, min_nodes, max_nodes, timeout_s, cancel, leave_out=()):  # type: ignore[no-untyped-def]
            self.clock.advance(timeout_s)
            return super().acquire_nodes(previous, min_nodes, max_nodes, timeout_s, cancel, leave_out)

    backend = WaitsOutTheTimeout(clock=FakeClock(), nodes=[NodeSlot("a", "10.0.0.1", 1)])
    thread, results = start_driver(tmp_path, backend, min_nodes=2, max_nodes=2, node_wait_timeout_s=300.0)
    thread.join(10)

    row = run_row("r1", read_journal(tmp_path / "run" / "journal.jsonl").events, alive=False)
    summary = summary_lines(dict(results[0].report), str(tmp_path / "run"))
    assert ("failed", 1, 75) == (row.state, row.attempts, row.exit_status)
    assert "attempt 0: needed at least 2 nodes, 1 available" == row.root_cause
    assert summary[0].startswith("elastic: run r1 failed after 1 attempt in ")
    assert "  why it stopped: needed at least 2 nodes, 1 available" in summary


def test_a_drained_node_tells_the_ranks_and_relaunches_on_the_rest_with_its_deadline(tmp_path: Path) -> None:
    """A node drained with a 30 s deadline: the notice reaches the ranks' files first, then
    SIGTERM with 30 s of grace; attempt 1 runs on the node left, no budget charged."""
    from elastic.core.launch.plan import NodeSlot

    backend = FakeBackend(clock=FakeClock(), nodes=[NodeSlot("a", "10.0.0.1", 1), NodeSlot("b", "10.0.0.2", 1)])
    thread, results = start_driver(tmp_path, backend, max_restarts=0, max_preemptions=0, min_nodes=1, max_nodes=2)
    backend.wait_for_attempt(0)
    backend.drain_node("b", deadline_in_s=30.0)
    second = backend.wait_for_attempt(1)
    backend.exit(0, 0)
    thread.join(10)
    assert ["a"] == [s.node_id for s in second]
    [(attempt, text)] = backend.announced
    notice = json.loads(text)
    assert (0, "ray drain of node b", "SIGTERM") == (attempt, notice["source"], notice["signal"])
    assert 30.0 == pytest.approx(notice["deadline"] - backend.clock.time(), abs=1.0)
    assert [(signal.SIGTERM, 30.0)] == backend.stops[:1]
    assert (Outcome.SUCCEEDED, 0) == (results[0].outcome, results[0].exit_status)
    assert "relaunch" == results[0].report["attempts"][0]["preemption_notice"]["then"]


def test_a_stragglers_node_is_left_out_of_the_next_attempt(tmp_path: Path) -> None:
    """--on-straggler restart --nnodes 1:2: rank 1 on node b at 3x the step time of rank 0 drains
    the attempt; the backend is asked for nodes without b, attempt 1 runs on a, no budget charged."""
    from elastic.core.launch.plan import NodeSlot
    from elastic.core.training.stragglers import OnStraggler

    backend = FakeBackend(clock=FakeClock(), nodes=[NodeSlot("a", "10.0.0.1", 1), NodeSlot("b", "10.0.0.2", 1)])
    thread, results = start_driver(tmp_path, backend, max_restarts=0, min_nodes=1, max_nodes=2,
                                   on_straggler=OnStraggler.RESTART)
    backend.wait_for_attempt(0)
    backend.report_steps(40, {0: 0.1, 1: 0.3})
    second = backend.wait_for_attempt(1)
    backend.exit(0, 0)
    thread.join(10)
    assert ["a"] == [s.node_id for s in second]
    assert [(), ("b",)] == backend.left_out
    assert (Outcome.SUCCEEDED, 0) == (results[0].outcome, results[0].exit_status)
    [straggler] = results[0].report["attempts"][0]["stragglers"]
    assert (1, "b", "restart") == (straggler["rank"], straggler["node"], straggler["action"])


class SlowToStopBackend(FakeBackend):
    """Workers take ``stop_s`` of (fake) time to go after the stop signal."""

    stop_s: float = 3.0

    def stop_workers(self, signum: int, grace_s: float, *, collateral: bool = False) -> None:
        self.clock.advance(self.stop_s)
        super().stop_workers(signum, grace_s, collateral=collateral)


def test_metrics_ledger_is_the_report_timelines_ledger(tmp_path: Path) -> None:
    """The live gauges and `elastic report` agree: the driver folds each record as it journals it, and
    the report folds the file; one computation (:mod:`elastic.core.journal.fold`), two readings that must match."""
    from elastic.core.journal.timeline import build_timeline

    backend = SlowToStopBackend(clock=FakeClock())
    run_config = RunConfig(command=("train",), run_id="r1", run_dir=tmp_path / "run", nproc_per_node=2,
                           max_restarts=1)
    driver = Driver(run_config, backend, RunDirectory.create(run_config.run_dir), base_env={},
                    clock=backend.clock)
    thread = threading.Thread(target=driver.run, daemon=True)
    thread.start()
    backend.wait_for_attempt(0)
    backend.clock.advance(10.0)
    backend.exit(1, -signal.SIGKILL)  # wasted: no checkpoint, and the run goes on
    backend.wait_for_attempt(1)
    backend.clock.advance(20.0)
    backend.exit(0, 0)
    backend.exit(1, 0)
    thread.join(10)

    timeline = build_timeline(read_journal(tmp_path / "run" / "journal.jsonl").events)
    metrics = driver.metrics()
    assert dict(timeline.ledger) == pytest.approx(dict(metrics.ledger), abs=1e-6)
    assert timeline.productive_share is None is metrics.productive_share  # no step shown: not known


def test_metrics_carry_the_backends_heartbeat_ages(tmp_path: Path) -> None:
    """Ages come from the backend (each node measures its own ranks), live ranks only."""
    backend = FakeBackend(clock=FakeClock(), ages={0: 0.2, 1: 7.5})
    run_config = RunConfig(command=("train",), run_id="r1", run_dir=tmp_path / "run", nproc_per_node=2)
    driver = Driver(run_config, backend, RunDirectory.create(run_config.run_dir), base_env={},
                    clock=backend.clock)
    thread = threading.Thread(target=driver.run, daemon=True)
    thread.start()
    backend.wait_for_attempt(0)
    assert {0: 0.2, 1: 7.5} == dict(driver.metrics().heartbeat_age_s)
    backend.exit(1, 0)
    assert {0: 0.2} == dict(driver.metrics().heartbeat_age_s)
    backend.exit(0, 0)
    thread.join(10)


def test_with_prewarm_the_journal_and_report_say_which_ranks_started_warm(tmp_path: Path) -> None:
    """With --prewarm each attempt journals ``ranks_started`` (warm and cold ranks, as the backend's
    launch reported them), shown per attempt in report.json; without it, nothing is journaled."""
    backend = FakeBackend(clock=FakeClock())
    thread, _ = start_driver(tmp_path, backend, max_restarts=1, prewarm=("json",))
    backend.wait_for_attempt(0)
    backend.warm_ranks = frozenset({1})  # the restart finds a warm interpreter for rank 1 only
    backend.exit(1, -signal.SIGKILL)
    backend.wait_for_attempt(1)
    backend.exit(0, 0)
    backend.exit(1, 0)
    thread.join(10)
    assert not thread.is_alive()
    journal = read_journal(tmp_path / "run" / "journal.jsonl").events
    started = [(e["attempt"], e["warm"], e["cold"]) for e in journal if e["event"] == "ranks_started"]
    assert [(0, [], [0, 1]), (1, [1], [0])] == started
    # Each rank's pid, warm or cold, as the backend's launch reported it (the fake: 10000 + rank).
    assert [(0, {"0": 10_000, "1": 10_001}), (1, {"0": 10_000, "1": 10_001})] == [
        (e["attempt"], e["pids"]) for e in journal if e["event"] == "rank_pids"]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert [{"warm": [], "cold": [0, 1], "warm_resident_mb": 0.0},
            {"warm": [1], "cold": [0], "warm_resident_mb": 0.0}] == [a["ranks_started"] for a in report["attempts"]]

    cold_dir = tmp_path / "cold"
    cold_dir.mkdir()
    backend = FakeBackend(clock=FakeClock())
    thread, _ = start_driver(cold_dir, backend)
    backend.wait_for_attempt(0)
    backend.exit(0, 0)
    backend.exit(1, 0)
    thread.join(10)
    journal = read_journal(cold_dir / "run" / "journal.jsonl").events
    assert [] == [e for e in journal if e["event"] == "ranks_started"]
    report = json.loads((cold_dir / "run" / "report.json").read_text())
    assert report["attempts"][0]["ranks_started"] is None


class _ExitsDuringLaunch(FakeBackend):
    """Rank 0 exits 1 while attempt 0's launch is still under way: its exit is seen before the
    launch is reported, and the driver handles the launch first."""

    def launch(self, specs: Sequence[WorkerSpec], helpers: Sequence[WorkerSpec] = ()) -> frozenset[int]:
        warm = super().launch(specs, helpers)
        if specs[0].attempt == 0:
            self.exit(0, 1)
            self.clock.advance(0.5)  # the other ranks still being started
        return warm


def test_an_exit_seen_during_the_launch_is_journaled_after_it_and_the_ledger_adds_up(tmp_path: Path) -> None:
    """The controller keeps one journal clock: the exit is dated no earlier than the launch
    handled before it, so the phases do not overlap and the causes add up to the wall time."""
    backend = _ExitsDuringLaunch(clock=FakeClock())
    thread, results = start_driver(tmp_path, backend)
    backend.wait_for_attempt(0)
    thread.join(10)
    assert not thread.is_alive()
    assert Outcome.FAILED == results[0].outcome
    journal = read_journal(tmp_path / "run" / "journal.jsonl").events
    times = [e["time"] for e in journal]
    assert sorted(times) == times, [(e["event"], e["time"]) for e in journal]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert 0.5 == pytest.approx(report["duration_s"])
    assert {"launch": 0.5} == {cause: s for cause, s in report["ledger"].items() if s}


def test_a_training_step_held_back_reaches_state_json_when_its_interval_is_up_with_nothing_else_coming(
    tmp_path: Path,
) -> None:
    """Two step reports within STATE_STEP_EVERY_S, then nothing: state.json (what `elastic status`
    shows) gets the second step once the interval is up (before: only with the next observation,
    which a rank quiet in an evaluation may not send for minutes)."""
    import time

    from elastic.run.driver import STATE_STEP_EVERY_S

    backend = FakeBackend(clock=FakeClock())
    config = RunConfig(command=("train",), run_id="r1", run_dir=tmp_path / "run", nproc_per_node=2)
    driver = Driver(config, backend, RunDirectory.create(config.run_dir), base_env={}, clock=backend.clock)
    results: list[RunResult] = []
    thread = threading.Thread(target=lambda: results.append(driver.run()), daemon=True)
    thread.start()
    backend.wait_for_attempt(0)
    state = tmp_path / "run" / "state.json"

    def state_step(expected: int) -> bool:
        deadline_at = time.monotonic() + 10.0
        while time.monotonic() < deadline_at:
            try:
                if json.loads(state.read_text()).get("step") == expected:
                    return True
            except ValueError:
                pass  # replaced while read
            time.sleep(0.01)
        return False

    backend.report_steps(5, {0: 0.1, 1: 0.1})
    assert state_step(5)
    backend.report_steps(9, {0: 0.1, 1: 0.1})
    deadline_at = time.monotonic() + 10.0
    while "| step 9 |" not in driver.status_text() and time.monotonic() < deadline_at:
        time.sleep(0.01)  # until the driver has heard it, with no time passed since the 5
    backend.clock.advance(STATE_STEP_EVERY_S)
    assert state_step(9)
    backend.exit(0, 0)
    backend.exit(1, 0)
    thread.join(10)
    assert (Outcome.SUCCEEDED, 0) == (results[0].outcome, results[0].exit_status)
