"""Which run torchrun's ``--rdzv-id`` names: the run of that id while it can go on, else a new one.

Under torchrun a job id is reused freely: the same command line, ``--rdzv-id=job-7`` and all,
runs again as often as it is typed. elastic keeps one run directory per run id, and ``--run-id``
of a run that succeeded or failed is refused. So under ``--rdzv-id`` the runs of one id are
numbered: ``job-7``, then ``job-7.2``, ``job-7.3``, ... in the folder of runs. The latest of
them is continued where ``--run-id`` would continue it (its driver died, it was stopped by a
signal, it exited 75); once it has finished, the command starts the next. Every one of them
gives its ranks ``TORCHELASTIC_RUN_ID`` as typed, as torchrun does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from elastic.core.journal.fold import FoldError
from elastic.core.journal.recovery import prior_run
from elastic.core.options.values import RUN_ID, ConfigError
from elastic.core.run_layout import RunLayout
from elastic.run.records.journal import JournalError, read_journal

__all__ = ["RdzvRun", "run_of"]


@dataclass(frozen=True)
class RdzvRun:
    """The run an ``--rdzv-id`` names: its id, and, for a new run after a finished one, that
    run's id and outcome (for the note that says so)."""

    run_id: str
    typed: str  # --rdzv-id as typed: the ranks' TORCHELASTIC_RUN_ID
    after: tuple[str, str] | None = None  # (run id, outcome) of the finished run before it


def run_of(typed: str, runs_dir: Path | None) -> RdzvRun:
    """The run of ``--rdzv-id typed`` in the folder of runs ``runs_dir``; with ``None`` (``--run-dir``
    names the directory) the id as typed, to be continued or refused as ``--run-id`` would be."""
    if runs_dir is None:
        return RdzvRun(typed, typed)
    numbers = _numbers(typed, runs_dir)
    if not numbers:
        return RdzvRun(typed, typed)
    latest = _numbered(typed, numbers[-1])
    outcome = _finished(RunLayout(runs_dir / latest).journal)
    if outcome is None:
        return RdzvRun(latest, typed)
    following = _numbered(typed, max(numbers[-1] + 1, 2))
    if not RUN_ID.check(following):
        raise ConfigError(
            "--rdzv-id", f"{typed}: run {latest} already finished ({outcome}), and the next run's id, "
            f"{following}, would not be a run id ({RUN_ID.allowed}); give a shorter id"
        )
    return RdzvRun(following, typed, (latest, outcome))


def _numbered(typed: str, number: int) -> str:
    return typed if number == 1 else f"{typed}.{number}"


def _numbers(typed: str, runs_dir: Path) -> list[int]:
    """The numbers of the runs of ``typed`` that have a directory in ``runs_dir``, in order (1: the
    id as typed)."""
    shape = re.compile(rf"{re.escape(typed)}(?:\.([2-9]|[1-9]\d+))?")
    try:
        names = [entry.name for entry in runs_dir.iterdir() if entry.is_dir()]
    except OSError:  # no folder of runs yet, or none to read: the run directory's own error says which
        return []
    return sorted(int(match[1] or 1) for name in names if (match := shape.fullmatch(name)))


def _finished(journal: Path) -> str | None:
    """The outcome of the run whose journal this is, when it cannot go on (it succeeded or failed);
    ``None`` when it can, when there is no journal, or when it cannot be read (then opening the
    run directory says why, naming ``--rdzv-id``)."""
    try:
        read = read_journal(journal)
        prior = prior_run(read.events, truncated_tail=read.truncated_tail)
    except (JournalError, FoldError, OSError):
        return None
    return None if prior.continuable else str(prior.finished_outcome)
