"""The latest complete checkpoint as the driver knows it, and what was passed over, journaled once."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from pathlib import Path

import structlog

from elastic.core.events import EventName, LogEvent, Record
from elastic.node.clock import Clock
from elastic.core.checkpoints.selection import Checkpoint, Selection
from elastic.run.watches.checkpoint_scan import CheckpointDirError, scan_checkpoints

__all__ = ["SAVE_TIMES", "CheckpointWatch"]

_UNRECOGNISED_SHOWN = 5  # names of unrecognised entries a warning lists
# What elastic.worker.atomic_checkpoint leaves in each step it commits: when its save began and
# was committed (elastic.worker.checkpoint.SAVE_TIMES: a unit test keeps the two in step).
SAVE_TIMES = ".elastic-save-times.json"
SAVES_LISTED = 64  # the newest saves a drain's record carries


class CheckpointWatch:
    """Scans ``--checkpoint-dir`` on demand; keeps the last checkpoint found."""

    def __init__(
        self,
        directory: Path | None,
        pattern: re.Pattern[str] | None,
        *,
        write: Callable[[Record], None],
        clock: Clock,
        run_id: str,
    ) -> None:
        self._directory = directory
        self._pattern = pattern
        self._write = write
        self._clock = clock
        self._log = structlog.get_logger("elastic").bind(run_id=run_id)
        self._checkpoint: Checkpoint | None = None
        self._notes: set[tuple[str, str]] = set()  # rejections and warnings journaled

    @property
    def last(self) -> Checkpoint | None:
        """The checkpoint the latest scan found (no new scan)."""
        return self._checkpoint

    def latest(self, *, journal_for: int | None = None) -> Checkpoint | None:
        """The latest complete checkpoint; if the directory turns unreadable, the last known.

        With ``journal_for`` (an attempt, at a moment no rank writes: before a
        launch, after a drain) what was passed over is journaled, each once.
        """
        selection = self._scan()
        if selection is None:
            return self._checkpoint
        self._checkpoint = selection.latest
        if journal_for is not None:
            self._journal_notes(selection, journal_for, str(self._directory))
        return self._checkpoint

    def saves_since(self, since: float) -> list[tuple[float, float]]:
        """The saves :func:`elastic.worker.atomic_checkpoint` committed at or after ``since`` (wall
        clock), (began, committed), oldest first, the newest :data:`SAVES_LISTED`; never an error."""
        if self._directory is None:
            return []
        saves: list[tuple[float, float]] = []
        try:
            entries = [e for e in os.scandir(self._directory) if not e.name.startswith(".")]
        except OSError:
            return []
        for entry in entries:
            try:
                times = json.loads((Path(entry.path) / SAVE_TIMES).read_text())
                began, committed = float(times["began"]), float(times["committed"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if committed >= since and 0.0 <= committed - began < math.inf:
                saves.append((began, committed))
        return sorted(saves, key=lambda save: save[1])[-SAVES_LISTED:]

    def newest_incomplete(self) -> str | None:
        """The newest entry newer than the latest complete checkpoint that is not whole, and why
        (``step-20: no .metadata``), or None: a save that did not complete is no proof that a
        rank's work ended (:func:`elastic.core.rank_ends.judge_finished`)."""
        selection = self._scan()
        if selection is None or not selection.rejected:
            return None
        newest = selection.rejected[0]
        return f"{newest.name}: {newest.reason}"

    def _scan(self) -> Selection | None:
        """A look at the directory; None with no directory, or when it cannot be read (warned)."""
        if self._directory is None:
            return None
        try:
            return scan_checkpoints(self._directory, self._pattern)
        except CheckpointDirError as error:
            self._log.warning(LogEvent.CHECKPOINT_SCAN_FAILED.value, error=str(error))
            return None

    def _journal_notes(self, selection: Selection, attempt: int, directory: str) -> None:
        """Journal entries newer than the chosen checkpoint that are not whole, and a directory
        where nothing is named like a checkpoint (a layout to name with --checkpoint-pattern)."""
        for rejection in selection.rejected:
            if (rejection.name, rejection.reason) not in self._notes:
                self._notes.add((rejection.name, rejection.reason))
                self._write(Record(
                    EventName.CHECKPOINT_REJECTED, self._clock.monotonic(), attempt,
                    {"checkpoint_dir": directory, "entry": rejection.name, "step": rejection.step,
                     "reason": rejection.reason},
                ))
        if selection.recognised_none and ("", "unrecognised") not in self._notes:
            self._notes.add(("", "unrecognised"))
            self._write(Record(
                EventName.CHECKPOINTS_UNRECOGNISED, self._clock.monotonic(), attempt,
                {"checkpoint_dir": directory, "count": len(selection.unrecognised),
                 "entries": list(selection.unrecognised[:_UNRECOGNISED_SHOWN])},
            ))
