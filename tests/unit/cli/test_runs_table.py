"""`elastic runs`' table: aligned columns, numbers to the right, a dash for what is unknown."""

from __future__ import annotations

from datetime import datetime, timezone

from elastic.views.runs import RunRow, runs_table, unreadable_row


def test_columns_align_and_unknowns_are_dashes() -> None:
    started = datetime(2026, 12, 4, 13, 6, 3, tzinfo=timezone.utc)
    rows = [
        RunRow("20261204-130603-ed243b", started, "failed", 12, 137, "attempt 11: rank 3 killed (SIGKILL)"),
        RunRow("short", started, "running", 1, None, ""),
        unreadable_row("torn", "journal.jsonl:3: not JSON"),
    ]

    assert [
        "RUN                     STARTED              STATE       ATTEMPTS  EXIT  ROOT CAUSE",
        "20261204-130603-ed243b  2026-12-04 13:06:03  failed            12   137  attempt 11: rank 3 killed (SIGKILL)",
        "short                   2026-12-04 13:06:03  running            1     -",
        "torn                    -                    unreadable         -     -  journal.jsonl:3: not JSON",
    ] == runs_table(rows, timezone.utc)
