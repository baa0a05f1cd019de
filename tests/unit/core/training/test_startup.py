"""A rank's start-up by phase: its marks read, its phases adding up to its start-up, journaled once per
attempt and folded into the ledger's breakdown, the report and the summary."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from elastic.core.controller.controller import Controller
from elastic.core.controller.settings import ControllerSettings
from elastic.core.events import EventName
from elastic.core.failures import WorkerExit
from elastic.core.journal.fold import fold
from elastic.core.journal.ledger import run_ledger, startup_breakdown
from elastic.core.journal.recovery import prior_run
from elastic.core.messages import (
    AttemptLaunched,
    AttemptPlanned,
    PlanAttempt,
    RankStep,
    RunStarted,
    StepsSeen,
    WorkerExited,
    WorkersStopped,
)
from elastic.core.policy.restarts import RestartPolicy
from elastic.core.training.startup import PHASES, RankImports, breakdown, rank_phases, read_imports, read_marks
from elastic.views.report import build_report, startup_line, summary_lines


def _lines(*marks: tuple[str, float, int], cache_s: float | None = None) -> str:
    lines = [json.dumps({"mark": name, "time": at, "pid": pid}) for name, at, pid in marks]
    if cache_s is not None:
        lines.append(json.dumps({"mark": "cache_load", "time": 0.0, "pid": marks[0][2], "seconds": cache_s}))
    return "\n".join(lines) + "\n"


def test_the_marks_are_the_first_process_s_first_of_each_and_the_last_cache_total() -> None:
    """A child the rank starts inherits the file; its marks, and a half-written line, are not the rank's."""
    text = _lines(("interpreter", 10.0, 7), ("interpreter", 12.0, 8), ("init_begin", 11.0, 7),
                  ("init_begin", 11.5, 7), ("init_begin", 11.2, 8))
    text += json.dumps({"mark": "cache_load", "time": 13.0, "pid": 7, "seconds": 0.1}) + "\n"
    text += json.dumps({"mark": "cache_load", "time": 13.5, "pid": 7, "seconds": 0.3}) + "\n{\"mark\": \"in"
    assert {"interpreter": 10.0, "init_begin": 11.0, "cache_load": 0.3} == read_marks(text)


def test_the_phases_are_consecutive_and_add_up_to_the_spawn_request_to_the_first_step() -> None:
    """Spawned at 0, interpreter at 0.1, init 2.0-2.5, restore 3.0-3.4, 0.3 s of cache reads, step at 5."""
    marks = {"interpreter": 0.1, "init_begin": 2.0, "init_end": 2.5, "restore_begin": 3.0, "restore_end": 3.4,
             "cache_load": 0.3}
    phases = rank_phases(marks, spawned_at=0.0, first_step_at=5.0)
    assert list(PHASES) == list(phases)
    assert pytest.approx({"spawn": 0.1, "imports": 1.9, "distributed_init": 0.5, "cache_load": 0.3,
                          "restore": 0.4, "first_step": 1.8}) == phases
    assert pytest.approx(5.0) == sum(phases.values())


def test_without_an_initialisation_imports_run_to_the_first_step_and_unmeasured_phases_are_left_out() -> None:
    """A script that never initialises: no distributed_init, no first_step phase, nothing made up."""
    phases = rank_phases({"interpreter": 1.0}, spawned_at=None, first_step_at=3.0)
    assert {"imports": 2.0} == phases
    assert {} == rank_phases({}, spawned_at=0.0, first_step_at=3.0)  # --rank-bootstrap off: no interpreter mark


def test_a_first_step_printed_right_after_the_init_keeps_the_init_though_its_log_time_is_a_tick_behind() -> None:
    """The step's time is its log's modification time, on the kernel's coarse clock: a few ms before
    the ``init_end`` the rank marked just ahead of printing it. The init is still the rank's."""
    marks = {"interpreter": 1.0, "init_begin": 2.0, "init_end": 2.504}
    phases = rank_phases(marks, spawned_at=0.5, first_step_at=2.5)
    assert pytest.approx({"spawn": 0.5, "imports": 1.0, "distributed_init": 0.504, "first_step": 0.0}) == phases
    # An init begun after the first step (well past a tick) is no part of the start-up.
    assert "distributed_init" not in rank_phases({**marks, "init_end": 2.6}, spawned_at=0.5, first_step_at=2.5)


def test_a_restore_before_the_initialisation_comes_out_of_the_imports_and_none_is_negative() -> None:
    marks = {"interpreter": 1.0, "restore_begin": 1.5, "restore_end": 2.0, "init_begin": 3.0, "init_end": 3.2,
             "cache_load": 9.0}  # more cache reads than there was time: clamped to the time there was
    phases = rank_phases(marks, spawned_at=0.5, first_step_at=4.0)
    assert all(seconds >= 0.0 for seconds in phases.values())
    assert pytest.approx(3.5) == sum(phases.values())
    assert pytest.approx(0.5) == phases["restore"] and pytest.approx(0.2) == phases["distributed_init"]


def test_the_breakdown_is_the_median_of_each_phase_and_names_the_slowest_rank() -> None:
    found = breakdown([(0, {"spawn": 0.1, "imports": 2.0}), (1, {"spawn": 0.3, "imports": 4.0}),
                       (2, {"spawn": 0.2, "imports": 3.0, "restore": 1.0}), (3, {})])
    assert found is not None
    assert ({"spawn": 0.2, "imports": 3.0, "restore": 1.0}, 3, 1) == (dict(found.phases), found.ranks,
                                                                        found.slowest_rank)
    assert "spawn 0.20s, imports 3.0s, restore 1.0s" == found.describe()
    assert breakdown([(0, {})]) is None


def _running(world: int = 2) -> Controller:
    c = Controller(RestartPolicy.create(max_restarts=1), ControllerSettings(grace_s=30.0, failure_grace_s=2.0))
    for observation in (RunStarted(0.0), AttemptPlanned(0, world, 0.1), AttemptLaunched(0, world, 0.2)):
        c.handle(observation)
    return c


def _first(at: float, rank: int, imports: float) -> StepsSeen:
    startup = (("spawn", 0.1), ("imports", imports), ("distributed_init", 0.5), ("first_step", 1.0))
    return StepsSeen(0, "n0", (RankStep(rank, 1, "output", at, startup=startup),), at)


def _profiled(records: Any) -> list[dict[str, Any]]:
    return [dict(r.fields) for r in records if r.event is EventName.STARTUP_PROFILED]


def test_the_start_up_is_journaled_once_when_every_rank_has_shown_its_first_step() -> None:
    c = _running()
    assert [] == _profiled(c.handle(_first(3.0, 0, 2.0)).records)
    [record] = _profiled(c.handle(_first(4.0, 1, 3.0)).records)
    assert {"spawn": 0.1, "imports": 2.5, "distributed_init": 0.5, "first_step": 1.0} == record["phases"]
    assert (2, 1, 4.6) == (record["ranks"], record["slowest_rank"], pytest.approx(record["slowest_s"]))
    assert {"0", "1"} == set(record["by_rank"])
    assert [] == _profiled(c.handle(_first(5.0, 1, 9.0)).records)  # once


def test_the_start_up_of_the_ranks_that_showed_a_step_is_journaled_at_the_attempt_s_end() -> None:
    c = _running()
    c.handle(_first(3.0, 0, 2.0))
    c.handle(WorkerExited(WorkerExit(0, 1, "n0", 1, 3.5)))
    [record] = _profiled(c.handle(WorkersStopped(0, 4.0, None)).records)
    assert (1, 0) == (record["ranks"], record["slowest_rank"])


def test_the_next_attempt_is_planned_with_the_longest_init_its_ranks_showed() -> None:
    """--init-timeout auto's window in the next attempt follows the run's own inits."""
    c = _running()
    c.handle(_first(3.0, 0, 2.0))
    c.handle(_first(3.5, 1, 2.0))
    c.handle(WorkerExited(WorkerExit(0, 1, "n0", 1, 4.0)))
    [plan] = [cmd for cmd in c.handle(WorkersStopped(0, 4.5, None)).commands if isinstance(cmd, PlanAttempt)]
    assert (1, 0.5) == (plan.attempt, plan.longest_init_s)


def test_a_driver_that_takes_a_run_over_plans_with_the_longest_init_of_its_journal() -> None:
    """A requeued run's new driver reads the dead one's start-up profiles: its first attempt keeps the short window."""
    journal = _journal({"phases": {"distributed_init": 0.5}, "ranks": 2, "slowest_rank": 1, "slowest_s": 5.0,
                        "by_rank": {"0": {"distributed_init": 0.5}, "1": {"distributed_init": 1.25}}})
    prior = prior_run(journal)
    assert 1.25 == prior.longest_init_s
    settings = replace(ControllerSettings(grace_s=30.0, failure_grace_s=2.0), longest_init_s=prior.longest_init_s,
                       first_attempt=prior.next_attempt)
    c = Controller(RestartPolicy.create(max_restarts=1), settings)
    [plan] = [cmd for cmd in c.handle(RunStarted(0.0)).commands if isinstance(cmd, PlanAttempt)]
    assert 1.25 == plan.longest_init_s


T0 = datetime(2026, 12, 3, 9, 0, 0, tzinfo=timezone.utc)


def _ev(t: float, name: str, **fields: Any) -> dict[str, Any]:
    return {"event": name, "time": (T0 + timedelta(seconds=t)).isoformat(), "run_id": "r1", "attempt": 0, **fields}


def _journal(profiled: dict[str, Any] | None) -> list[dict[str, Any]]:
    journal = [
        _ev(0.0, "run_started", journal_version=1, command=["python", "t.py"]),
        _ev(0.0, "attempt_started", world_size=2, nodes=["n0"], nproc_per_node=[2], resume_step=None),
        _ev(0.0, "phase_changed", source="pending", dest="launching", trigger="launch", reason="-"),
        _ev(1.0, "phase_changed", source="launching", dest="running", trigger="launched", reason="-"),
        _ev(6.0, "first_step_seen", rank=0, step=1, source="output"),
        _ev(16.0, "step_reached", rank=0, step=11),
        _ev(16.0, "phase_changed", source="running", dest="draining", trigger="drain", reason="-"),
        _ev(16.5, "workers_stopped", checkpoint_step=None),
        _ev(16.5, "phase_changed", source="draining", dest="done", trigger="finish", reason="-"),
        _ev(16.5, "run_finished", outcome="succeeded", exit_status=0, reason="finished"),
    ]
    if profiled is not None:
        journal.insert(5, _ev(6.5, "startup_profiled", **profiled))
    return journal


def test_the_ledger_report_and_summary_show_the_breakdown_and_startup_stays_one_cause() -> None:
    """The causes still add up to the wall time; the breakdown is beside them, not one of them."""
    profiled = {"phases": {"spawn": 0.05, "imports": 2.1, "distributed_init": 0.4, "first_step": 1.1},
                "ranks": 2, "slowest_rank": 1, "slowest_s": 3.9, "by_rank": {"0": {"imports": 2.0}}}
    run = fold(_journal(profiled))
    [attempt] = run.attempts.values()
    found = startup_breakdown(attempt)
    assert found is not None and pytest.approx(3.65) == found.total_s
    ledger = run_ledger(run, 16.5)
    assert pytest.approx(16.5) == ledger.run.total_s and pytest.approx(5.0) == ledger.run.seconds["startup"]
    report = build_report(run, command=["python", "t.py"], ended_s=16.5)
    row = report["attempts"][0]
    assert {"spawn": 0.05, "imports": 2.1, "distributed_init": 0.4, "first_step": 1.1} == \
        row["startup_breakdown"]["phases"]
    assert {"0": {"imports": 2.0}} == row["startup_breakdown"]["by_rank"]
    line = ("start-up to the first step 3.6s: spawn 0.05s, imports 2.1s, distributed init 0.40s, first step 1.1s "
            "(median of 2 ranks; slowest rank 1, 3.9s)")
    assert line == startup_line(row)
    assert f"    {line}" in summary_lines(report, "/runs/r1")


def test_an_attempt_with_no_profile_or_a_malformed_one_has_no_breakdown() -> None:
    for profiled in (None, {"phases": "fast"}, {"phases": {"imports": "2"}}):
        [attempt] = fold(_journal(profiled)).attempts.values()
        assert startup_breakdown(attempt) is None
        row = build_report(fold(_journal(profiled)), command=[], ended_s=16.5)["attempts"][0]
        assert row["startup_breakdown"] is None and startup_line(row) is None


def test_what_a_rank_imported_is_its_last_imports_record_before_its_first_step() -> None:
    """The first process's last ``imports`` record written by the first step; a child's, a later
    one and a torn line are not it."""
    lines = [
        {"mark": "interpreter", "time": 10.0, "pid": 7},
        {"mark": "imports", "time": 11.0, "pid": 7, "modules": ["numpy"], "resident_kb": 40_000},
        {"mark": "imports", "time": 12.0, "pid": 7, "modules": ["numpy", "torch"], "resident_kb": 300_000},
        {"mark": "imports", "time": 12.5, "pid": 8, "modules": ["child"], "resident_kb": 1},
        {"mark": "imports", "time": 20.0, "pid": 7, "modules": ["numpy", "torch", "late"], "resident_kb": 1},
    ]
    text = "\n".join(json.dumps(line) for line in lines) + '\n{"mark": "imp'

    assert RankImports(("numpy", "torch"), 300_000) == read_imports(text, before=15.0)
    assert read_imports(text, before=10.5) is None
    assert read_imports('{"mark": "interpreter", "time": 1.0, "pid": 1}\n', before=5.0) is None
