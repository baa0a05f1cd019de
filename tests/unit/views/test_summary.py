"""The end-of-run summary, report.json and ``elastic status`` of what an attempt went through."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from elastic.core.journal.fold import JOURNAL_VERSION, fold
from elastic.views.report import build_report, ledger_lines, summary_lines
from elastic.views.status import describe_journal

from journal_events import T0, ev, phase


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


def peer_gone_early(kind: str = "exited", exit_0_after: bool = False) -> list[dict[str, Any]]:
    """Rank 0 exits 0 at 5 (or, ``exit_0_after``, just after rank 1's failure); rank 1 fails
    (``kind``) at 6; the run fails."""
    failure = {"kind": kind, "rank": 1, "node": "n0", "exit_code": 1, "signal": None, "message": None}
    exited = ev(6 if exit_0_after else 5, "worker_exited", 0, rank=0, node="n0", exit_code=0)
    return [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *launched(0, 0),
        *([] if exit_0_after else [exited]),
        ev(6, "worker_failed", 0, **failure),
        *([exited] if exit_0_after else []),
        phase(6, 0, "running", "draining", "drain"),
        ev(6.5, "workers_stopped", 0, checkpoint_step=None),
        phase(6.5, 0, "draining", "done", "finish"),
        ev(6.5, "run_finished", 0, outcome="failed", exit_status=1, reason="-", root_cause=failure),
    ]


def test_a_failure_after_a_peer_exited_0_early_names_that_exit() -> None:
    events = peer_gone_early()
    report, lines = summary(events)
    assert {"rank": 0, "seconds": 1.0, "description": "after rank 0 had exited 0 (1.0 s before)"} == \
        report["attempts"][0]["after_exit_0"]
    assert "  root cause: rank 1 on n0 exited (exit code 1), after rank 0 had exited 0 (1.0 s before)" in lines
    [head] = [line for line in lines if line.startswith("  attempt 0:")]
    assert head.endswith("exited (exit code 1), after rank 0 had exited 0 (1.0 s before); not restarted"), head
    assert "    after rank 0 had exited 0 (1.0 s before)" in describe_journal(events)


def test_a_peers_exit_0_after_the_failure_or_a_hang_at_exit_that_says_so_adds_nothing() -> None:
    assert None is summary(peer_gone_early(exit_0_after=True))[0]["attempts"][0]["after_exit_0"]
    assert None is summary(peer_gone_early(kind="exit-hung"))[0]["attempts"][0]["after_exit_0"]


def test_where_the_time_went_is_one_line_however_many_causes_it_names() -> None:
    """Seven causes and a sliver: one line (the terminal wraps it), a cause under half a percent ``<1%``."""
    ledger = {"productive": 60.0, "startup": 10.0, "launch": 2.0, "backoff": 5.0, "detection": 3.0,
              "exit_wait": 1.0, "redone": 4.0, "drain": 0.1}
    [line] = ledger_lines(ledger, indent="  ")
    assert line.startswith("  where the time went: productive training 60.0s (71%), ")
    assert line.endswith(", drain 0.1s (<1%)"), line


def test_why_it_stopped_does_not_repeat_the_root_cause_above_it() -> None:
    """The run's reason opens with its root cause, which the line above gives: only the rest is said."""
    events = peer_gone_early()
    events[-1] = {**events[-1], "reason": "rank 1 on n0 exited (exit code 1); failures budget exhausted (0 restarts)"}
    lines = summary(events)[1]
    assert "  why it stopped: failures budget exhausted (0 restarts)" in lines, lines
