"""Runs found by name: a run directory, a run's id in the folder of runs, or the latest there.

``elastic status|logs|report|stack [RUN]`` and ``elastic runs`` read the folder of runs that
``--runs-dir`` names, else ``ELASTIC_RUNS_DIR``, else ``./elastic-runs`` (where ``elastic run``
puts a run without ``--run-dir``). A run there is a folder holding a ``journal.jsonl``;
the latest is the one whose journal's first record is the newest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from elastic.core.journal.fold import FoldError, record_time
from elastic.core.options.table import option
from elastic.core.run_layout import RunLayout
from elastic.run.records.journal import JournalError, driver_running, read_journal
from elastic.views.runs import RunRow, run_row, unreadable_row

__all__ = ["RunNotFound", "find_run", "list_runs", "runs_folder"]


class RunNotFound(Exception):
    """No run answers to the name given; the message says where elastic looked."""


def runs_folder(given: Path | None, env: Mapping[str, str]) -> Path:
    """The folder of runs: ``--runs-dir``, else its variable, else ``elastic run``'s default."""
    row = option("--runs-dir")
    if given is not None:
        return given
    return Path(env[row.env]) if env.get(row.env) else Path(row.default)


def _runs(folder: Path) -> list[Path]:
    """The runs in ``folder``: its sub-folders that hold a journal."""
    try:
        entries = list(folder.iterdir())
    except OSError:
        return []
    return [entry for entry in entries if RunLayout(entry).journal.is_file()]


def _started(run_dir: Path) -> float:
    """When the run started: its journal's first record's time, else the journal's mtime."""
    journal = RunLayout(run_dir).journal
    try:
        with journal.open("rb") as lines:
            first = json.loads(lines.readline())
        return record_time(first, 0).timestamp()
    except (OSError, ValueError, FoldError, AttributeError, TypeError):  # not a record with a time
        try:
            return journal.stat().st_mtime
        except OSError:
            return 0.0


def find_run(name: str | None, folder: Path) -> Path:
    """The run directory ``name`` stands for: a path to one (or to any directory: what is
    wrong with it is for its reader to say), a run id in ``folder``, or with no name the
    latest run there. :class:`RunNotFound` says where it looked."""
    where = folder.absolute()
    if name is None:
        runs = _runs(folder)
        if not runs:
            raise RunNotFound(f"no run in {where}: give a run directory or a run id, or --runs-dir")
        return max(runs, key=lambda run: (_started(run), run.name))
    given = Path(name)
    if RunLayout(given).journal.is_file() or "/" in name or name in (".", ".."):
        return given
    if RunLayout(folder / name).journal.is_file():
        return folder / name
    if given.is_dir():
        return given  # a directory here that holds no run: its reader says so, naming the journal
    raise RunNotFound(f"no run {name}: no directory {name} here, and none in {where}")


def list_runs(folder: Path) -> list[RunRow]:
    """A row for each run in ``folder``, the newest first."""
    rows = []
    for run_dir in sorted(_runs(folder), key=lambda run: (_started(run), run.name), reverse=True):
        try:
            journal = read_journal(RunLayout(run_dir).journal)
        except JournalError as error:
            rows.append(unreadable_row(run_dir.name, str(error)))
            continue
        finished = any(event.get("event") == "run_finished" for event in journal.events)
        try:
            rows.append(run_row(run_dir.name, journal.events, alive=not finished and driver_running(run_dir)))
        except FoldError as error:
            rows.append(unreadable_row(run_dir.name, str(journal.unreadable(error))))
    return rows
