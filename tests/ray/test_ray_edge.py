"""The Ray edge outside the steady state, on a real loopback cluster: nothing throws into the driver."""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness import launcher_env, per_rank, script, wait_for

from elastic.backends.ray.backend import RayBackend
from elastic.core.options.config import RunConfig
from elastic.run.driver import Driver, RunResult
from elastic.core.failures import FailureKind
from elastic.run.records.journal import RunDirectory, read_journal
from elastic.core.messages import Outcome
from elastic.core.launch.plan import NodeSlot
from elastic.testing import (
    DiesInLaunchRayNodeAgent,
    FailsToStartRayNodeAgent,
    ReplyLostOnceRayNodeAgent,
    SlowToStartRayNodeAgent,
    capture_events,
)


def run(cluster: Any, tmp_path: Path, backend: RayBackend, command: Sequence[object], **options: Any) -> RunResult:
    config = RunConfig(command=tuple(map(str, command)), run_id="edge", run_dir=tmp_path / "run",
                       backend="ray", address=cluster.address, **{"nproc_per_node": 1, **options})
    return Driver(config, backend, RunDirectory.create(config.run_dir), base_env=launcher_env()).run()


def test_an_agent_that_cannot_start_is_a_launch_failure_at_once(ray_cluster: Any, tmp_path: Path) -> None:
    """An agent whose __init__ raises fails the run at once (126), naming the node and its error."""
    backend = RayBackend(address=ray_cluster.address, nproc_per_node=1, agent_class=FailsToStartRayNodeAgent)
    with capture_events() as events:
        result = run(ray_cluster, tmp_path, backend, script("exit_with.py", 0),
                     max_restarts=3, node_wait_timeout_s=600.0)

    assert (Outcome.FAILED, 126) == (result.outcome, result.exit_status)
    cause = result.root_cause
    assert cause is not None and FailureKind.LAUNCH_FAILED is cause.kind
    assert "the node agent on node" in (cause.message or "") and "could not start" in (cause.message or "")
    assert "No module named 'elastic'" in (cause.message or "")
    assert cause.node_label in (cause.message or "")
    assert 1 == len(result.attempts)
    assert [] == [e for e in events if e["event"] == "nodes_awaited"], "it waited for nodes"


def test_an_agent_that_never_answers_is_a_launch_failure_after_bounded_retries(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """An agent still starting when its bound (timeouts and retries together) runs out fails the
    launch, naming the node, instead of an internal error or a wait for other nodes."""
    backend = RayBackend(address=ray_cluster.address, nproc_per_node=1, agent_class=SlowToStartRayNodeAgent,
                         agent_start_timeout_s=3.0)
    with capture_events() as events:
        result = run(ray_cluster, tmp_path, backend, script("exit_with.py", 0), node_wait_timeout_s=600.0)

    assert (Outcome.FAILED, 126) == (result.outcome, result.exit_status)
    cause = result.root_cause
    assert cause is not None and FailureKind.LAUNCH_FAILED is cause.kind
    assert "did not answer within 3 s" in (cause.message or "") and "GetTimeoutError" in (cause.message or "")
    assert "GetTimeoutError" in [e["error"] for e in events if e["event"] == "rpc_retried"]
    assert [] == [e for e in events if e["event"] == "nodes_awaited"], "it waited for nodes"


def test_a_node_lost_between_placement_and_launch_is_reported_once_with_its_ranks(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """Node 0 dies after placement and is seen dead before its ports and launch: its rank is
    reported node-lost once, and the run goes on without it."""
    victims: list[str] = []

    def remove_first_node(slots: Sequence[NodeSlot]) -> None:
        if victims:
            return
        victims.append(slots[0].node_id)  # its name, as the driver knows it; Ray knows it by its id
        ray_cluster.remove_node(next(n for n in ray_cluster.workers if n.node_id == slots[0].backend_id))
        wait_for(lambda: any(e["event"] == "node_lost" for e in events), "the node seen lost", 60)

    backend = RayBackend(address=ray_cluster.address, nproc_per_node=1, after_placement=remove_first_node)
    try:
        with capture_events() as events:
            result = run(ray_cluster, tmp_path, backend, script("exit_with.py", 0),
                         min_nodes=2, max_nodes=3, node_wait_timeout_s=60.0)
    finally:
        ray_cluster.restore()

    assert (Outcome.SUCCEEDED, 0) == (result.outcome, result.exit_status)
    [victim] = victims
    first = result.attempts[0]
    assert first.root_cause is not None
    assert (FailureKind.NODE_LOST, victim, 0) == (first.root_cause.kind, first.root_cause.node, first.root_cause.rank)
    assert [0] == [f.rank for f in first.failures if f.node == victim], first.failures
    assert 1 == len([e for e in events if e["event"] == "node_lost" and e["node"] == victim])
    assert [3, 2] == [a.world_size for a in result.attempts]
    assert [] == [e for e in events if e.get("run_id") != "edge"], "the backend logged without the run's id"


def test_an_agent_that_dies_during_launch_reports_its_ranks_lost_once(ray_cluster: Any, tmp_path: Path) -> None:
    """The launch call and the event pump both see the agent die: its rank is reported once."""
    backend = RayBackend(address=ray_cluster.address, nproc_per_node=1, agent_class=DiesInLaunchRayNodeAgent)
    with capture_events() as events:
        result = run(ray_cluster, tmp_path, backend, script("exit_with.py", 0), min_nodes=2, max_nodes=2)

    assert (Outcome.SUCCEEDED, 0) == (result.outcome, result.exit_status)
    first = result.attempts[0]
    assert first.root_cause is not None
    assert (FailureKind.NODE_LOST, 1) == (first.root_cause.kind, first.root_cause.rank)
    victim = first.root_cause.node
    assert [1] == [f.rank for f in first.failures if f.node == victim], first.failures
    assert 1 == len([e for e in events if e["event"] == "node_lost" and e["node"] == victim])
    assert [2, 2] == [a.world_size for a in result.attempts]
    assert [] == [e for e in events if e.get("run_id") != "edge"], "the pump logged without the run's id"


def test_a_pump_fault_ends_the_run_with_a_clear_message(ray_cluster: Any, tmp_path: Path) -> None:
    """The event pump dies (a console that raises): the driver hears it and ends the run, no hang."""

    def broken_console(line: str) -> None:
        raise RuntimeError("injected: the console is gone")

    backend = RayBackend(address=ray_cluster.address, nproc_per_node=1, echo=broken_console)
    with capture_events() as events:
        result = run(ray_cluster, tmp_path, backend, script("exit_with.py", 0, "--say", "hi", "--sleep", 300),
                     max_restarts=3, grace_period_s=5.0)

    assert (Outcome.FAILED, 70) == (result.outcome, result.exit_status)
    reason = result.report["reason"]
    assert "event pump failed" in reason and "injected: the console is gone" in reason, reason
    assert 1 == len([e for e in events if e["event"] == "backend_failed"])
    assert 1 == len(result.attempts)


def test_an_exit_overtakes_a_chatty_ranks_lines(ray_cluster: Any, tmp_path: Path) -> None:
    """Rank 0 prints 100k lines, then rank 1 exits 3: the exit reaches the driver long before the
    lines are drained."""
    marker = tmp_path / "printed"
    with capture_events() as events:

        def slow_console(line: str) -> None:  # a console slower than the ranks' output
            events.append({"event": "line_echoed"})
            if len(events) % 100 == 0:
                time.sleep(0.02)

        backend = RayBackend(address=ray_cluster.address, nproc_per_node=2, echo=slow_console)
        result = run(ray_cluster, tmp_path, backend,
                     per_rank(["print_lines.py", 100_000, marker], ["exit_with.py", 3, "--wait-for", marker]),
                     nproc_per_node=2, grace_period_s=5.0)

    assert (Outcome.FAILED, 3) == (result.outcome, result.exit_status)
    assert result.root_cause is not None and 1 == result.root_cause.rank
    names = [e["event"] for e in events]
    failed_at = next(i for i, e in enumerate(events) if e["event"] == "worker_failed" and e.get("rank") == 1)
    echoed_before = names[:failed_at].count("line_echoed")
    assert echoed_before < 100_000 // 2, f"the exit waited behind {echoed_before} lines"


def test_waiting_console_lines_are_bounded_by_their_size_not_their_count(ray_cluster: Any, tmp_path: Path) -> None:
    """2,000 lines of 32 KiB behind a slow console: the agent keeps 16 MiB of them, not 64 MB, and says so."""
    marker = tmp_path / "printed"
    with capture_events() as events:

        def slow_console(line: str) -> None:
            events.append({"event": "line_echoed"})
            time.sleep(0.01)

        backend = RayBackend(address=ray_cluster.address, nproc_per_node=2, echo=slow_console)
        result = run(ray_cluster, tmp_path, backend,
                     per_rank(["print_lines.py", 2_000, marker, 32 << 10], ["exit_with.py", 3, "--wait-for", marker]),
                     nproc_per_node=2, grace_period_s=5.0)

    assert (Outcome.FAILED, 3) == (result.outcome, result.exit_status)
    drops = [e for e in events if e["event"] == "console_lines_dropped"]
    assert sum(e["count"] for e in drops) > 0
    assert "16 MiB" in drops[0]["detail"]


def test_a_retried_launch_still_reports_its_failure(ray_cluster: Any, tmp_path: Path) -> None:
    """A launch whose answer was lost is retried; the retry gets the first call's failure (127)."""
    backend = RayBackend(address=ray_cluster.address, nproc_per_node=1, agent_class=ReplyLostOnceRayNodeAgent)
    with capture_events() as events:
        result = run(ray_cluster, tmp_path, backend, [str(tmp_path / "no-such-command")], max_restarts=3)

    assert (Outcome.FAILED, 127) == (result.outcome, result.exit_status)
    assert result.root_cause is not None and FailureKind.LAUNCH_FAILED is result.root_cause.kind
    retried = [e["error"] for e in events if e["event"] == "rpc_retried"]
    assert 1 == len(retried) and "ActorUnavailableError" in retried[0]


def test_a_rank_log_that_cannot_be_opened_is_a_launch_failure_with_its_cause(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """The agent's OSError opening a rank's log (here: a file where its directory goes) is a
    launch failure naming the path and the cause, not an internal error."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "attempt-0").write_text("in the way\n")
    backend = RayBackend(address=ray_cluster.address, nproc_per_node=1)
    result = run(ray_cluster, tmp_path, backend, script("exit_with.py", 0), max_restarts=3)

    assert (Outcome.FAILED, 126) == (result.outcome, result.exit_status)
    cause = result.root_cause
    assert cause is not None and FailureKind.LAUNCH_FAILED is cause.kind
    assert "attempt-0" in (cause.message or "") and any(
        why in (cause.message or "") for why in ("File exists", "Not a directory")
    ), cause.message


def test_losing_the_local_raylet_is_not_a_node_loss() -> None:
    """LocalRayletDiedError is the driver losing Ray, which no node's failure kind describes."""
    import ray.exceptions

    from elastic.backends.ray.calls import RayLost, failed

    error = ray.exceptions.LocalRayletDiedError()
    assert isinstance(failed(error), RayLost)


def test_nodes_keep_the_names_an_earlier_driver_of_the_run_gave_them(ray_cluster: Any, tmp_path: Path) -> None:
    """A driver taking a run over is handed the names its journal holds (Ray's id -> name): a node
    the first driver named by its bare host keeps that name although it now shares its host, and
    the others are told apart from it by a short id."""
    host = socket.gethostname()
    kept, *others = [worker.node_id for worker in ray_cluster.workers]
    backend = RayBackend(address=ray_cluster.address, nproc_per_node=1, node_names={kept: host})
    result = run(ray_cluster, tmp_path, backend, script("exit_with.py", 0), min_nodes=3, max_nodes=3)

    assert (Outcome.SUCCEEDED, 0) == (result.outcome, result.exit_status)
    events = read_journal(tmp_path / "run" / "journal.jsonl").events
    [started] = [e for e in events if e["event"] == "attempt_started"]
    assert {host: kept, **{f"{host}·{other[:6]}": other for other in others}} == started["node_ids"]
    assert sorted(started["node_ids"]) == sorted(started["nodes"])
