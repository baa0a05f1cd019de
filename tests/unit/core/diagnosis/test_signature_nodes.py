"""Node health across attempts: a node at fault, or suspected twice, is left out of the next attempts."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

from elastic.core.controller.controller import Controller
from elastic.core.controller.settings import ControllerSettings
from elastic.core.events import EventName
from elastic.core.failures import WorkerExit
from elastic.core.journal.recovery import prior_run
from elastic.core.launch.plan import NodeSlot
from elastic.core.messages import (
    AttemptLaunched, AttemptPlanned, FinishRun, PlanAttempt, RankStep, RunStarted, StepsSeen, WorkerExited,
    WorkersStopped,
)
from elastic.core.options.config import RunConfig
from elastic.core.policy.restarts import RestartPolicy
from elastic.run.driver import Driver, RunResult
from elastic.run.records.journal import RunDirectory, read_journal
from elastic.testing import FakeBackend, FakeClock
from elastic.views.report import summary_lines

ECC = ("RuntimeError: CUDA error: uncorrectable ECC error encountered",)
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.22 GiB.",)


def attempt(c: Controller, number: int, failing: tuple[int, str, tuple[str, ...]], *, nodes: int = 3,
            step: int | None = None, at: float = 1.0, available: int | None = None,
            returncode: int = 1) -> tuple:  # type: ignore[type-arg]
    """An attempt of one rank per node ``n0``..: rank ``failing[0]`` on node ``failing[1]`` fails with that tail
    (and ``returncode``); ``available``: the cluster's usable nodes the backend saw at placement."""
    rank, node, tail = failing
    c.handle(AttemptPlanned(number, nodes, at, nodes=nodes, available=available))
    c.handle(AttemptLaunched(number, nodes, at + 0.1))
    if step is not None:
        c.handle(StepsSeen(number, node, (RankStep(rank, step, "heartbeat", at + 0.15),), at + 0.15))
    step_records = c.handle(WorkerExited(WorkerExit(attempt=number, rank=rank, node=node, returncode=returncode,
                                                    observed_at=at + 0.2, log_tail=tail))).records
    for other in range(nodes):
        if other != rank:
            c.handle(WorkerExited(WorkerExit(attempt=number, rank=other, node=f"n{other}",
                                             returncode=-signal.SIGTERM, observed_at=at + 0.3)))
    return step_records, c.handle(WorkersStopped(number, at + 0.4)).commands


def controller(min_nodes: int = 2) -> Controller:
    c = Controller(RestartPolicy.create(max_restarts=5), ControllerSettings(grace_s=5.0, min_nodes=min_nodes))
    c.handle(RunStarted(0.0))
    return c


def test_a_node_class_failure_excludes_the_node_charged_like_a_lost_node() -> None:
    """An uncorrectable ECC error on n2: the next attempt runs without n2; --max-restarts untouched."""
    c = controller()
    records, commands = attempt(c, 0, (2, "n2", ECC))
    [excluded] = [r for r in records if r.event is EventName.NODE_EXCLUDED]
    assert "n2" == excluded.fields["node"]
    assert excluded.fields["reason"].startswith("ecc-error: the node is at fault")  # type: ignore[union-attr]
    [scheduled] = [r for r in records if r.event is EventName.RESTART_SCHEDULED]
    assert "preemptions" == scheduled.fields["budget"]
    assert (PlanAttempt(1, 0.0, ("n2",)),) == commands
    assert 5 == c.policy.failures.remaining(2.0)


def test_a_node_too_many_to_spare_is_kept_and_the_run_says_so() -> None:
    """--nnodes 3 with three nodes: no room to leave n2 out; journaled as kept, and the run goes on."""
    c = controller(min_nodes=3)
    records, commands = attempt(c, 0, (2, "n2", ECC))
    [kept] = [r for r in records if r.event is EventName.NODE_KEPT]
    assert "kept: without node n2 2 usable nodes would be left, --nnodes needs at least 3" in str(kept.fields["reason"])
    assert (PlanAttempt(1, 0.0, ()),) == commands


def test_an_idle_node_of_the_cluster_takes_the_place_of_a_node_at_fault() -> None:
    """--nnodes 2 on a cluster of three: the attempt runs on n0 and n1, the third idles. An ECC error
    on n1: excluded, not kept for want of nodes; the next attempt is planned without it."""
    c = controller(min_nodes=2)
    records, commands = attempt(c, 0, (1, "n1", ECC), nodes=2, available=3)
    [excluded] = [r for r in records if r.event is EventName.NODE_EXCLUDED]
    assert "n1" == excluded.fields["node"]
    assert not [r for r in records if r.event is EventName.NODE_KEPT]
    assert (PlanAttempt(1, 0.0, ("n1",)),) == commands


def test_the_same_failure_on_two_ranks_of_one_node_excludes_it() -> None:
    """A SIGSEGV of rank 1, then of rank 2, both on n1 (two ranks a node): the node, not the code."""
    c = controller()
    records, _ = attempt(c, 0, (1, "n1", ()), returncode=-signal.SIGSEGV)
    assert [] == [r for r in records if r.event is EventName.NODE_EXCLUDED]
    records, commands = attempt(c, 1, (2, "n1", ()), returncode=-signal.SIGSEGV, at=600.0)
    [excluded] = [r for r in records if r.event is EventName.NODE_EXCLUDED]
    assert "the same failure (SIGSEGV) on ranks 1 and 2 of it, 10 min apart" == excluded.fields["reason"]
    assert isinstance(commands[0], PlanAttempt) and ("n1",) == commands[0].leave_out


def test_two_different_failures_of_one_rank_leave_its_node_alone() -> None:
    """A traceback nothing matched, then a CUDA OOM, both of rank 1 on n1: rank 1's, not the node's."""
    c = controller()
    records, _ = attempt(c, 0, (1, "n1", ()))
    assert [] == [r for r in records if r.event is EventName.NODE_EXCLUDED]
    records, commands = attempt(c, 1, (1, "n1", OOM), at=2.0)
    assert [] == [r for r in records if r.event in (EventName.NODE_EXCLUDED, EventName.NODE_KEPT)]
    assert isinstance(commands[0], PlanAttempt) and () == commands[0].leave_out


def test_the_same_failure_twice_on_one_node_suspects_the_node_first() -> None:
    """Identical twice on n1: restarted without n1; a third identical failure elsewhere stops the run."""
    c = controller()
    attempt(c, 0, (1, "n1", OOM), step=5)
    records, commands = attempt(c, 1, (1, "n1", OOM), step=5, at=2.0)
    [excluded] = [r for r in records if r.event is EventName.NODE_EXCLUDED]
    assert "the same failure twice in a row on it" in str(excluded.fields["reason"])
    assert isinstance(commands[0], PlanAttempt) and ("n1",) == commands[0].leave_out
    records, commands = attempt(c, 2, (1, "n0", OOM), step=5, at=3.0)
    assert EventName.RESTART_REFUSED in [r.event for r in records]
    assert isinstance(commands[0], FinishRun)


def test_a_run_on_one_node_is_never_told_its_node_is_suspect() -> None:
    """On one machine there is nowhere else to go: no lemon verdict, no noise."""
    c = controller(min_nodes=1)
    for number in range(3):
        records, _ = attempt(c, number, (0, "n0", ()), nodes=1, at=float(number + 1))
        assert not [r for r in records if r.event in (EventName.NODE_EXCLUDED, EventName.NODE_KEPT)]


def test_report_json_lists_excluded_nodes_and_a_rerun_keeps_them_out(tmp_path: Path) -> None:
    """report.json's excluded_nodes; the journal's fold gives a taken-over run the same left-out nodes."""
    backend = FakeBackend(nodes=[NodeSlot(f"n{i}", f"10.0.0.{i}", 1) for i in range(3)], clock=FakeClock())
    config = RunConfig(command=("train",), run_id="r1", run_dir=tmp_path / "run", nproc_per_node=1,
                       min_nodes=2, max_nodes=3, max_restarts=3)
    driver = Driver(config, backend, RunDirectory.create(config.run_dir), base_env={"HOME": "/h"}, clock=backend.clock)
    results: list[RunResult] = []
    thread = threading.Thread(target=lambda: results.append(driver.run()), daemon=True)
    thread.start()
    backend.wait_for_attempt(0)
    backend.exit(2, 1, ECC)
    second = backend.wait_for_attempt(1)
    assert ["n0", "n1"] == sorted({spec.node_id for spec in second})
    for spec in second:
        backend.exit(spec.rank, 0)
    thread.join(10)
    assert not thread.is_alive()
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    [excluded] = report["excluded_nodes"]
    assert ("n2", 0) == (excluded["node"], excluded["attempt"])
    assert any(line.startswith("  node n2 excluded after attempt 0: ecc-error") for line in summary_lines(report, "r"))
    events = read_journal(tmp_path / "run" / "journal.jsonl").events
    assert ("n2",) == prior_run(events).left_out
