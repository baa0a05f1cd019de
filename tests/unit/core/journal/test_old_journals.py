"""Journals of finished runs written before the record format had a version stay readable.

The fixtures under tests/fixtures were written by `elastic run` before issue 10
added ``journal_version`` to the first record (only the environment and paths
were scrubbed): one run that succeeded after a restart, one that exhausted its
budget.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from elastic.cli.entry import main
from elastic.run.records.journal import read_journal
from elastic.core.journal.timeline import build_timeline

FIXTURES = Path(__file__).parents[3] / "fixtures"


def run_dir(tmp_path: Path, name: str) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    shutil.copy(FIXTURES / f"journal-v1-{name}.jsonl", directory / "journal.jsonl")
    return directory


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("succeeded", [
            "run fixture-v1: phase done, 2 attempts",
            "outcome: succeeded (exit status 0)",
            "  every worker exited 0",
            "failures: 1",
            "  attempt 0: rank 1 on vm exited (exit code 3)",
            "    after rank 0 had exited 0 (5 ms before)",  # since issue 34
            # since issue 12: the goodput ledger (no step information in journals of that age)
            "where the time went (0.2s):",
            "  launch                              0.1s  46%",
            "  running (no step information)       0.1s  25%",
            # since issue 34: from a rank's exit 0 to the others' ends, no step since
            "  waiting for ranks to exit           0.0s  13%",
            "  waiting for nodes                   0.0s   8%",
            "  drain                               0.0s   7%",
        ]),
        ("failed", [
            "run fixture-v1-failed: phase done, 2 attempts",
            "outcome: failed (exit status 5)",
            "failures: 2",
            "  attempt 0: rank 1 on vm exited (exit code 3)",
            "  attempt 1: rank 0 on vm exited (exit code 5)",
            "root cause: attempt 1: rank 0 on vm exited (exit code 5)",
            # attempt 1's rank 0 exit is dated 0.3 ms before its `running`: read at that time
            # since issue 18, the drain no longer overlaps the launch (72% of a sum past the wall time)
            "where the time went (0.1s):",
            "  launch                              0.1s  73%",
            "  running (no step information)       0.0s  11%",
            "  drain                               0.0s  10%",
            "  waiting for nodes                   0.0s   7%",
        ]),
    ],
)
def test_status_reads_a_version_less_journal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, expected: list[str]
) -> None:
    """`elastic status` on an old finished run prints what it printed when the run was new."""
    assert 0 == main(["status", str(run_dir(tmp_path, name))])
    assert expected == capsys.readouterr().out.splitlines()


def test_report_reads_a_version_less_journal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`elastic report` draws an old run: both attempts, its root cause, its goodput."""
    directory = run_dir(tmp_path, "failed")
    assert 0 == main(["report", str(directory)])
    page = (directory / "timeline.html").read_text()
    assert "fixture-v1-failed" in page and "exit code 5" in page and 'id="goodput"' in page


def test_an_old_journal_folds_to_the_figures_it_had() -> None:
    """RankSigns, root causes and progress of an old journal are what they were before the fold."""
    succeeded = build_timeline(read_journal(FIXTURES / "journal-v1-succeeded.jsonl").events)
    assert [False, True] == [a.made_progress for a in succeeded.attempts]
    failed = build_timeline(read_journal(FIXTURES / "journal-v1-failed.jsonl").events)
    assert [3, 5] == [a.attempt.root_cause.exit_code for a in failed.attempts if a.attempt.root_cause]
    # Attempt 1's rank failed (by its observed time) before the launch was journaled: it reached
    # running, as that run's report.json said; the timeline's own rule (spans) used to say launching.
    assert ["running", "running"] == [a.attempt.phase_reached for a in failed.attempts]
    assert failed.root_cause is not None and 0 == failed.root_cause.rank
    assert [False, False] == [a.made_progress for a in failed.attempts]
