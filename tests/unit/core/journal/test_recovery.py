"""Replaying a dead driver's journal, and reading journals a SIGKILL cut short."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic.core.journal.fold import FoldError
from elastic.run.records.journal import JournalError, read_journal
from elastic.core.journal.recovery import continuable, prior_run

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


@pytest.mark.parametrize(
    ("finished", "expected"),
    [
        (None, True),  # its driver died
        ({"outcome": "stopped", "exit_status": 143}, True),  # SIGTERM to the launcher: preempted, requeued
        ({"outcome": "stopped", "exit_status": 130}, True),  # a Ctrl-C
        ({"outcome": "stopped", "exit_status": 75}, True),  # a preemption notice: "requeue me"
        ({"outcome": "failed", "exit_status": 75}, True),  # too few nodes, Ray lost: "requeue me"
        ({"outcome": "failed", "exit_status": 1}, False),
        ({"outcome": "failed", "exit_status": 143}, False),  # a rank's SIGTERM with no budget left
        ({"outcome": "failed", "exit_status": 76}, False),  # a crash loop
        ({"outcome": "succeeded", "exit_status": 0}, False),
    ],
)
def test_a_stopped_or_requeue_me_run_is_continuable_and_a_succeeded_or_failed_one_is_not(
    finished: dict[str, object] | None, expected: bool
) -> None:
    """A run stopped from outside or ended with 75 is paused, not over; success and failure are final."""
    events = EVENTS if finished is None else [*EVENTS, {"event": "run_finished", **finished}]
    assert expected == continuable(None if finished is None else events[-1])
    assert expected == prior_run(events).continuable


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


def test_a_byte_that_is_not_utf8_names_file_line_and_column(tmp_path: Path) -> None:
    """Not UTF-8 is a JournalError with file, line and column, not a UnicodeDecodeError."""
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b'{"event": "a"}\n{"event": "b\xff"}\n')
    with pytest.raises(JournalError, match=r"journal.jsonl:2: not UTF-8 text \(byte 0xff at column 13\)"):
        read_journal(path)


def test_a_cut_off_last_line_that_is_not_utf8_is_a_cut_off_tail(tmp_path: Path) -> None:
    """A last line without newline is tolerated whether it fails as JSON or as UTF-8."""
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b'{"event": "a"}\n{"event": "b\xe2\x82')
    assert (1, True) == (len(read_journal(path).events), read_journal(path).truncated_tail)


def test_an_attempt_that_is_no_whole_number_names_file_and_line(tmp_path: Path) -> None:
    """`"attempt": null` is refused as the journal is read, naming the line (every reader reads it so)."""
    path = tmp_path / "journal.jsonl"
    path.write_text('{"event": "a", "attempt": 0}\n\n{"event": "attempt_started", "attempt": null}\n')
    with pytest.raises(JournalError, match=r"journal.jsonl:3: attempt_started has attempt null, not a whole number"):
        read_journal(path)


def test_a_fold_error_is_given_the_line_of_its_event(tmp_path: Path) -> None:
    """Journal.unreadable turns the fold's event index into the file's line (blank lines counted)."""
    path = tmp_path / "journal.jsonl"
    path.write_text(
        '{"event": "run_started", "time": "2026-12-02T10:00:00+00:00"}\n\n'
        '{"event": "attempt_started", "time": "2026-12-02T10:00:01+00:00", "nodes": 3}\n'
    )
    journal = read_journal(path)
    with pytest.raises(FoldError) as raised:
        prior_run(journal.events)
    assert str(journal.unreadable(raised.value)).startswith(f"{path}:3: event 2 (attempt_started) has a plan")


def _exits(*ranks: int, world_size: int = 2, drain: str = "every worker exited 0") -> list[dict[str, object]]:
    """A journal up to the drain of attempt 0, its driver dead before anything more."""
    at = "2026-12-02T10:00:0{}+00:00".format
    return [
        {"event": "run_started", "run_id": "r", "pid": 41, "time": at(0)},
        {"event": "attempt_started", "attempt": 0, "world_size": world_size, "nodes": ["n"], "time": at(1)},
        {"event": "phase_changed", "attempt": 0, "dest": "running", "time": at(2)},
        *({"event": "worker_exited", "attempt": 0, "rank": r, "exit_code": 0, "time": at(3)} for r in ranks),
        {"event": "phase_changed", "attempt": 0, "dest": "draining", "reason": drain, "time": at(4)},
    ]


def test_a_run_whose_ranks_all_exited_0_before_its_driver_died_is_a_finished_run() -> None:
    """Killed during the success drain: the rerun records the success of that attempt, and goes on
    with nothing; with a rank missing, or the ranks' exit 0 answering a stop, the run goes on."""
    assert 0 == prior_run(_exits(0, 1)).succeeded_attempt
    assert None is prior_run(_exits(0)).succeeded_attempt
    stopped = _exits(drain="stop requested") + [{"event": "worker_exited", "attempt": 0, "rank": r, "time": "2026-12-02T10:00:05+00:00"} for r in (0, 1)]
    assert None is prior_run(stopped).succeeded_attempt  # a SIGTERM's save and exit 0 is no end of training
    finished = [*_exits(0, 1), {"event": "run_finished", "outcome": "succeeded", "exit_status": 0,
                                "time": "2026-12-02T10:00:06+00:00"}]
    assert None is prior_run(finished).succeeded_attempt
