"""Replaying a dead driver's journal, and reading journals a SIGKILL cut short."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic.run.journal import JournalError, read_journal
from elastic.core.recovery import prior_run

EVENTS = [
    {"event": "run_started", "run_id": "r", "pid": 41, "time": "2026-12-02T10:00:00+00:00"},
    {"event": "attempt_started", "attempt": 0, "time": "2026-12-02T10:00:01+00:00"},
    {"event": "restart_scheduled", "budget": "failures", "time": "2026-12-02T10:00:05+00:00"},
    {"event": "attempt_started", "attempt": 1, "time": "2026-12-02T10:00:06+00:00"},
    {"event": "restart_scheduled", "budget": "preemptions", "time": "2026-12-02T10:00:09+00:00"},
    {"event": "restart_scheduled", "budget": None, "time": "2026-12-02T10:00:10+00:00"},
]


def test_replay_gives_next_attempt_and_charges_per_budget() -> None:
    """Attempts continue after the last started one; each budget keeps its charge times."""
    prior = prior_run(EVENTS)
    assert ("r", 2, 41, None) == (prior.run_id, prior.next_attempt, prior.driver_pid, prior.finished_outcome)
    assert (1, 1) == (len(prior.failure_charges), len(prior.preemption_charges))
    assert 4.0 == prior.preemption_charges[0] - prior.failure_charges[0]


def test_replay_sees_a_finished_run() -> None:
    """A run_finished event marks the run as not resumable."""
    assert "failed" == prior_run([*EVENTS, {"event": "run_finished", "outcome": "failed"}]).finished_outcome


def test_a_cut_off_last_line_is_tolerated_and_reported(tmp_path: Path) -> None:
    """A last line without newline that does not parse is what a SIGKILL mid-write leaves."""
    path = tmp_path / "journal.jsonl"
    path.write_text('{"event": "run_started"}\n{"event": "pha')
    journal = read_journal(path)
    assert (1, True) == (len(journal.events), journal.truncated_tail)


def test_a_corrupt_middle_line_names_file_and_line(tmp_path: Path) -> None:
    """Damage anywhere but the tail is an error naming the file and the line."""
    path = tmp_path / "journal.jsonl"
    path.write_text('{"event": "a"}\nnot json\n{"event": "b"}\n')
    with pytest.raises(JournalError, match=r"journal.jsonl:2: not a JSON event line"):
        read_journal(path)
