"""``elastic runs``: one line a run, newest first, read through each journal's fold."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any

from elastic.core.journal.fold import fold

__all__ = ["RunRow", "run_row", "runs_table", "unreadable_row"]


@dataclass(frozen=True)
class RunRow:
    """What ``elastic runs`` says of one run."""

    run_id: str
    started: datetime | None  # the journal's first record, as journaled (UTC)
    state: str  # the outcome, or running, or driver died
    attempts: int | None
    exit_status: int | None
    root_cause: str  # "" when there is none


def run_row(name: str, events: Sequence[Mapping[str, Any]], *, alive: bool) -> RunRow:
    """The row of the run in directory ``name`` whose journal holds ``events``; ``alive``:
    whether its driver still holds the run directory's lock.

    Raises :class:`elastic.core.journal.fold.FoldError` for a journal that cannot be folded.
    """
    run = fold(events, strict_times=False)
    attempts = run.closed()  # as the summary and report.json count them: one that waited for nodes too
    finished = run.finished
    if finished is not None:
        state = str(finished.get("outcome"))
    else:
        state = "running" if alive else "driver died"
    exit_status = finished.get("exit_status") if finished is not None else None
    cause = run.run_root_cause(attempts)
    reason = finished.get("reason") if finished is not None else None
    if cause is not None:
        how = cause.signal if cause.signal else f"exit code {cause.exit_code}"
        cause_text = f"attempt {cause.attempt}: rank {cause.rank} {cause.kind.value} ({how})"
    elif state == "failed" and reason:  # no rank failed: no nodes to run on, as the summary says
        cause_text = f"attempt {attempts[-1].number}: {reason}" if attempts else str(reason)
    else:
        cause_text = ""
    return RunRow(
        name, run.origin, state, len(attempts), exit_status if isinstance(exit_status, int) else None, cause_text
    )


def unreadable_row(name: str, why: str) -> RunRow:
    """The row of a run whose journal cannot be read or folded: ``why`` in its last column."""
    return RunRow(name, None, "unreadable", None, None, why)


def runs_table(rows: Sequence[RunRow], zone: tzinfo | None) -> list[str]:
    """A header and one line a row, in the order given, start times in ``zone``."""

    def shown(value: object) -> str:
        return "-" if value is None else str(value)

    cells = [["RUN", "STARTED", "STATE", "ATTEMPTS", "EXIT", "ROOT CAUSE"]]
    for row in rows:
        started = "-" if row.started is None else row.started.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S")
        cells.append([
            row.run_id, started, row.state, shown(row.attempts), shown(row.exit_status), row.root_cause,
        ])
    widths = [max(len(line[column]) for line in cells) for column in range(len(cells[0]) - 1)]
    lines = []
    for line in cells:
        padded = [
            cell.rjust(width) if column in (3, 4) else cell.ljust(width)
            for column, (cell, width) in enumerate(zip(line, widths, strict=False))
        ]
        lines.append("  ".join([*padded, line[-1]]).rstrip())
    return lines
