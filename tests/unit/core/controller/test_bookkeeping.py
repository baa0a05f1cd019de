"""Bookkeeping that scales: collateral counted past the first few, one fsync per batch, step
reports that cost their own ranks."""

from __future__ import annotations

import json
import math
import os
import random
import signal
import statistics
import threading
from pathlib import Path

import pytest

from elastic.core.options.config import RunConfig
from elastic.core.controller.controller import COLLATERAL_LISTED, Controller
from elastic.core.controller.settings import ControllerSettings
from elastic.run.driver import Driver, RunResult
from elastic.core.events import EventName
from elastic.core.failures import FailureKind, WorkerExit
from elastic.run.records.journal import RunDirectory, read_journal
from elastic.core.messages import (
    AttemptLaunched,
    AttemptPlanned,
    Outcome,
    RankStep,
    RunStarted,
    StepsSeen,
    WorkerExited,
    WorkersStopped,
)
from elastic.core.launch.plan import NodeSlot
from elastic.core.policy.restarts import RestartPolicy
from elastic.core.journal.recovery import prior_run
from elastic.core.training.stragglers import STRAGGLER_MARGIN
from elastic.views.report import summary_lines
from elastic.views.status import describe_journal
from elastic.testing import FakeBackend, FakeClock
from elastic.core.journal.timeline import build_timeline
from elastic.views.timeline_html import render_svg

NPROC = 20  # two nodes of 20: one failure leaves 39 collateral exits, more than are listed


def exit_of(rank: int, returncode: int, at: float) -> WorkerExited:
    node = "n0" if rank < NPROC else "n1"
    return WorkerExited(WorkerExit(attempt=0, rank=rank, node=node, returncode=returncode, observed_at=at))


def test_collateral_past_the_first_few_is_counted_per_node_in_one_record() -> None:
    """Of 39 collateral exits, 16 are recorded one by one and the rest once, per node, at drain end."""
    c = Controller(RestartPolicy.create(max_restarts=1), ControllerSettings(grace_s=5.0))
    for observation in (RunStarted(0.0), AttemptPlanned(0, 2 * NPROC, 0.1), AttemptLaunched(0, 2 * NPROC, 0.2)):
        c.handle(observation)
    records = list(c.handle(exit_of(5, 1, 1.0)).records)
    for rank in (r for r in range(2 * NPROC) if r != 5):
        records += c.handle(exit_of(rank, -signal.SIGTERM, 1.0 + rank / 100)).records
    records += c.handle(WorkersStopped(0, 2.0)).records
    failed = [r.fields for r in records if r.event is EventName.WORKER_FAILED]
    assert ["exited"] + ["collateral"] * COLLATERAL_LISTED == [f["kind"] for f in failed]
    counted = [r for r in records if r.event is EventName.COLLATERAL_COUNTED]
    assert 1 == len(counted)
    # Ranks 0-4 and 6-16 were listed (all on n0); n0's other 3 and n1's 20 were counted.
    assert {"kind": "collateral", "count": 23, "by_node": {"n0": 3, "n1": 20}, "listed": 16} == dict(
        counted[0].fields
    )
    events = [r.event for r in records]
    assert events.index(EventName.COLLATERAL_COUNTED) + 1 == events.index(EventName.WORKERS_STOPPED)
    summary = c.attempts[0]
    assert (39, {"n0": 3, "n1": 20}) == (summary.collateral, dict(summary.collateral_counted))
    assert summary.root_cause is not None and (5, FailureKind.EXITED) == (
        summary.root_cause.rank, summary.root_cause.kind
    )
    assert 1 + COLLATERAL_LISTED == len(summary.failures)


def test_a_few_collateral_exits_are_all_listed_and_none_counted() -> None:
    """Below the limit nothing changes: every collateral exit has its own record."""
    c = Controller(RestartPolicy.create(max_restarts=0), ControllerSettings(grace_s=5.0))
    for observation in (RunStarted(0.0), AttemptPlanned(0, 4, 0.1), AttemptLaunched(0, 4, 0.2)):
        c.handle(observation)
    records = list(c.handle(exit_of(0, 1, 1.0)).records)
    for rank in (1, 2, 3):
        records += c.handle(exit_of(rank, -signal.SIGTERM, 1.1)).records
    records += c.handle(WorkersStopped(0, 2.0)).records
    assert 3 == sum(1 for r in records if r.fields.get("kind") == "collateral")
    assert EventName.COLLATERAL_COUNTED not in [r.event for r in records]
    assert (3, {}) == (c.attempts[0].collateral, dict(c.attempts[0].collateral_counted))


class CountingFsync:
    """The journal's fsync seam: counts calls and how many lines each made durable."""

    def __init__(self, journal: Path) -> None:
        self.journal = journal
        self.lines_at_sync: list[int] = []

    def __call__(self, fd: int) -> None:
        os.fsync(fd)
        self.lines_at_sync.append(self.journal.read_bytes().count(b"\n"))


def run_failing_group(tmp_path: Path) -> tuple[RunResult, CountingFsync, Driver]:
    """Two nodes of 20 ranks: rank 3 exits 1, the drain ends the other 39, attempt 1 succeeds."""
    backend = FakeBackend(clock=FakeClock(), nodes=[NodeSlot("n0", "10.0.0.1", NPROC), NodeSlot("n1", "10.0.0.2", NPROC)])
    config = RunConfig(command=("train",), run_id="r1", run_dir=tmp_path / "run", nproc_per_node=NPROC,
                       min_nodes=2, max_nodes=2, max_restarts=1)
    fsync = CountingFsync(config.run_dir / "journal.jsonl")
    driver = Driver(config, backend, RunDirectory.create(config.run_dir, fsync=fsync),
                    base_env={"HOME": "/h"}, clock=backend.clock)
    results: list[RunResult] = []
    thread = threading.Thread(target=lambda: results.append(driver.run()), daemon=True)
    thread.start()
    backend.wait_for_attempt(0)
    backend.exit(3, 1)
    backend.wait_for_attempt(1)
    for rank in range(2 * NPROC):
        backend.exit(rank, 0)
    thread.join(10)
    assert not thread.is_alive() and Outcome.SUCCEEDED == results[0].outcome
    return results[0], fsync, driver


def test_a_batch_of_exits_and_the_relaunch_it_leads_to_take_one_fsync(tmp_path: Path) -> None:
    """The drained ranks' exits, the drain's end and the phase change to pending: one fsync,
    made before the relaunch is acted on (the attempt_started line comes after it)."""
    _, fsync, _ = run_failing_group(tmp_path)
    events = [e["event"] for e in read_journal(tmp_path / "run" / "journal.jsonl").events]
    first_collateral = next(
        i for i, e in enumerate(read_journal(tmp_path / "run" / "journal.jsonl").events)
        if e.get("kind") == "collateral"
    )
    relaunch = events.index("phase_changed", events.index("workers_stopped"))
    inside = [n for n in fsync.lines_at_sync if first_collateral < n <= relaunch + 1]
    assert [relaunch + 1] == inside  # one fsync, right after the phase change, none before it
    assert "attempt_started" == events[relaunch + 1]
    assert len(fsync.lines_at_sync) < len(events)


def test_counted_collateral_reads_back_in_report_summary_status_timeline_and_recovery(tmp_path: Path) -> None:
    """Every reader of the journal and the report sees 39 collateral exits of attempt 0."""
    result, _, driver = run_failing_group(tmp_path)
    row = result.report["attempts"][0]
    assert (39, 23, 1 + COLLATERAL_LISTED) == (
        row["collateral"], sum(row["collateral_counted"].values()), len(row["failures"])
    )
    on_disk = json.loads((tmp_path / "run" / "report.json").read_text())
    assert row["collateral_counted"] == on_disk["attempts"][0]["collateral_counted"]
    lines = summary_lines(on_disk, str(tmp_path / "run"))
    assert any("39 ranks ended as collateral (23 of them counted per node" in line for line in lines)
    assert 39 == driver.metrics().failures_by_kind["collateral"]

    journal = read_journal(tmp_path / "run" / "journal.jsonl")
    status = describe_journal(journal.events)
    assert "failures: 1" in status
    assert any("rank 3 on n0 exited (exit code 1)" in line for line in status)

    timeline = build_timeline(journal.events)
    first = timeline.attempts[0].attempt
    assert (COLLATERAL_LISTED, 23) == (
        sum(1 for f in first.failures if f.kind is FailureKind.COLLATERAL),
        sum(c.count for c in first.collateral_counted),
    )
    assert first.root_cause is not None and 3 == first.root_cause.rank
    assert "more ranks on n1 collateral" in render_svg(timeline)

    prior = prior_run(journal.events)
    assert (2, 1, "succeeded") == (prior.next_attempt, len(prior.failure_charges), prior.finished_outcome)
    # A driver that died right after the drain's records: its successor goes on at attempt 1.
    names = [e["event"] for e in journal.events]
    cut = names.index("workers_stopped") + 1
    assert "collateral_counted" == names[cut - 2]
    prior = prior_run(journal.events[:cut])
    assert (1, 1, None) == (prior.next_attempt, len(prior.failure_charges), prior.finished_outcome)


# -- step reports: each costs its own ranks, not the world's -------------------------------------


def _reference_rounds(reports: list[StepsSeen]) -> list[tuple[list[tuple[int, str, float, float]], dict[int, int]]]:
    """What the straggler rule and the step bookkeeping answer for each report when everything
    is recomputed over the whole world (the definition): the stragglers found (rank, node,
    step time, the others' median) and every rank's latest step."""
    latest: dict[int, tuple[str, float]] = {}
    by_rank: dict[int, int] = {}
    reported: set[int] = set()
    answers = []
    for report in reports:
        for seen in report.steps:
            by_rank[seen.rank] = seen.step
            if seen.step_time_s is not None and seen.step_time_s >= 0:
                latest[seen.rank] = (report.node, seen.step_time_s)
        found = []
        if len(latest) >= 2:
            for rank in sorted({seen.rank for seen in report.steps}):
                if rank in reported or rank not in latest:
                    continue
                node, mine = latest[rank]
                median = statistics.median(t for r, (_, t) in latest.items() if r != rank)
                if median > 0 and mine >= STRAGGLER_MARGIN * median:
                    reported.add(rank)
                    found.append((rank, node, mine, median))
        answers.append((found, dict(by_rank)))
    return answers


def _random_reports(seed: int, nodes: int, nproc: int, count: int) -> list[StepsSeen]:
    """Reports from random nodes of random subsets of their ranks: step times that repeat,
    change, go missing (a window not full), are negative or NaN, and now and then a slow rank."""
    rng = random.Random(seed)
    reports = []
    for number in range(count):
        node = rng.randrange(nodes)
        ranks = sorted(rng.sample(range(node * nproc, (node + 1) * nproc), rng.randint(1, nproc)))
        steps = []
        for rank in ranks:
            pick = rng.random()
            step_time = (
                None if pick < 0.1 else -1.0 if pick < 0.12 else math.nan if pick < 0.14
                else rng.choice((0.1, 0.2, 0.25)) if pick < 0.5 else 0.1 * rng.uniform(0.8, 3.0)
            )
            steps.append(RankStep(rank, number + rng.randint(0, 5), "output", float(number), step_time,
                                  None if step_time is None else "interval"))
        reports.append(StepsSeen(0, f"n{node}", tuple(steps), float(number)))
    return reports


@pytest.mark.parametrize("seed", range(8))
def test_step_reports_give_what_recomputing_over_the_world_gives(seed: int) -> None:
    """Step reports update each rank's step and step time where they change (a report costs its
    own ranks, not the world's); the stragglers found, the medians they are measured against and
    every rank's step are what recomputing over every rank for each report gives."""
    c = Controller(RestartPolicy.create(max_restarts=0), ControllerSettings(grace_s=5.0))
    for observation in (RunStarted(0.0), AttemptPlanned(0, 48, 0.0), AttemptLaunched(0, 48, 0.0)):
        c.handle(observation)
    reports = _random_reports(seed, nodes=6, nproc=8, count=300)
    for report, (found, by_rank) in zip(reports, _reference_rounds(reports), strict=True):
        records = c.handle(report).records
        stragglers = [r.fields for r in records if r.event is EventName.STRAGGLER_SEEN]
        assert [(rank, node, round(mine, 6), round(median, 6)) for rank, node, mine, median in found] == [
            (s["rank"], s["node"], s["step_time_s"], s["median_s"]) for s in stragglers
        ]
        assert by_rank == dict(c.rank_steps)
    assert any(r for r, _ in _reference_rounds(reports))  # the stream found stragglers to compare
