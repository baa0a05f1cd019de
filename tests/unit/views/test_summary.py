"""The end-of-run summary, report.json and ``elastic status`` of what an attempt went through."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from elastic.core.journal.fold import JOURNAL_VERSION, fold
from elastic.views.report import build_report, summary_lines
from elastic.views.status import describe_journal

T0 = datetime(2026, 12, 3, 9, 0, 0, tzinfo=timezone.utc)


def ev(t: float, name: str, attempt: int = 0, **fields: Any) -> dict[str, Any]:
    return {"event": name, "time": (T0 + timedelta(seconds=t)).isoformat(), "run_id": "r1",
            "attempt": attempt, **fields}


def phase(t: float, attempt: int, source: str, dest: str, trigger: str = "-") -> dict[str, Any]:
    return ev(t, "phase_changed", attempt, source=source, dest=dest, trigger=trigger, reason="-")


def launched(t: float, attempt: int, resume: int | None = None) -> list[dict[str, Any]]:
    return [
        ev(t, "attempt_started", attempt, world_size=1, nodes=["n0"], nproc_per_node=[1], resume_step=resume),
        phase(t, attempt, "pending", "launching", "launch"),
        phase(t + 1, attempt, "launching", "running", "launched"),
    ]


def succeeded(t: float, attempt: int) -> list[dict[str, Any]]:
    return [
        ev(t, "worker_exited", attempt, rank=0, node="n0", exit_code=0),
        phase(t, attempt, "running", "draining", "drain"),
        ev(t, "workers_stopped", attempt, checkpoint_step=None),
        phase(t, attempt, "draining", "done", "finish"),
        ev(t, "run_finished", attempt, outcome="succeeded", exit_status=0, reason="every worker exited 0",
           root_cause=None),
    ]


def driver_died(checkpoint: int | None = None, resume: int | None = None, **seen: Any) -> list[dict[str, Any]]:
    """Attempt 0's driver dies after its first step (journaled: step ``resume + 1``); a new driver
    takes over at 60 with ``seen`` and runs attempt 1 to success."""
    first = (resume or 0) + 1
    return [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *launched(0, 0, resume),
        ev(11, "first_step_seen", 0, rank=0, step=first, source="output"),
        ev(60, "run_started", journal_version=JOURNAL_VERSION),
        ev(60, "run_resumed", 1),
        ev(60, "workers_stopped", 0, checkpoint_step=checkpoint, made_progress=False, no_progress_streak=1,
           reason="its driver died", **seen),
        *launched(60, 1),
        *succeeded(80, 1),
    ]


def summary(events: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    report = build_report(fold(events), command=["x"], ended_s=80.0)
    return report, summary_lines(report, "/runs/r1")


def test_the_attempt_a_driver_died_in_says_so_with_the_steps_its_ranks_were_seen_at() -> None:
    seen_at = (T0 + timedelta(seconds=25)).isoformat()
    report, lines = summary(driver_died(last_step=15, last_step_at=seen_at))
    assert {"step": 15, "steps": 15, "at_least": True, "source": "steps",
            "description": "its driver died after 15 steps at least (to step 15)"} == report["attempts"][0]["driver_died"]
    assert None is report["attempts"][1]["driver_died"]
    [line] = [line for line in lines if line.startswith("  attempt 0:")]
    assert line.endswith(", its driver died after 15 steps at least (to step 15)")
    assert "no failure" not in line
    assert "ran 25.0s" in line  # launched at 0, seen training at 25: not up to the takeover at 60
    assert "attempt 0: its driver died after 15 steps at least (to step 15)" in describe_journal(driver_died(
        last_step=15, last_step_at=seen_at))


def test_a_checkpoint_found_at_the_takeover_beyond_the_steps_seen_is_the_better_evidence() -> None:
    """Steps from the one it resumed from (10) to the checkpoint (40); the journal had only step 11."""
    report, _ = summary(driver_died(checkpoint=40, resume=10))
    death = report["attempts"][0]["driver_died"]
    assert (40, 30, "checkpoint") == (death["step"], death["steps"], death["source"])
    assert "its driver died after 30 steps at least (to checkpointed step 40)" == death["description"]


def test_a_driver_that_died_before_any_step_says_none_was_seen() -> None:
    events = [e for e in driver_died() if e["event"] != "first_step_seen"]
    report, _ = summary(events)
    assert "its driver died (no step seen)" == report["attempts"][0]["driver_died"]["description"]
