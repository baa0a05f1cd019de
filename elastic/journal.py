"""The run directory on disk: journal (fsynced), state snapshot, report; 0700/0600."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic.layout import RunLayout

__all__ = [
    "Journal",
    "JournalError",
    "RunDirectory",
    "RunDirectoryError",
    "read_journal",
    "write_json_atomic",
]

_DIR_MODE = 0o700
_FILE_MODE = 0o600


class RunDirectoryError(Exception):
    """The run directory cannot be used (exists already, not writable)."""


class JournalError(Exception):
    """A journal that cannot be read, naming the file and line."""


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Write to a temporary file beside ``path``, fsync, rename over it."""
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, _FILE_MODE)
    try:
        os.write(fd, (json.dumps(data, indent=2, default=str) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)


class RunDirectory:
    """Owns the files of one run; the driver is its only writer."""

    def __init__(
        self, layout: RunLayout, journal_fd: int, *, fsync: Callable[[int], None] = os.fsync
    ) -> None:
        self.layout = layout
        self._journal_fd = journal_fd
        self._fsync = fsync  # a seam: tests count the journal's fsyncs
        self._unsynced = False

    @classmethod
    def reopen(cls, root: Path, *, fsync: Callable[[int], None] = os.fsync) -> RunDirectory:
        """Continue the run of an earlier driver; a cut-off last journal line is dropped."""
        layout = RunLayout(root)
        try:
            fd = os.open(layout.journal, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        except OSError as error:
            raise RunDirectoryError(f"{root}: cannot reopen the journal: {error.strerror}") from error
        data = layout.journal.read_bytes()
        if data and not data.endswith(b"\n"):
            os.ftruncate(fd, data.rfind(b"\n") + 1)
        return cls(layout, fd, fsync=fsync)

    @classmethod
    def create(cls, root: Path, *, fsync: Callable[[int], None] = os.fsync) -> RunDirectory:
        layout = RunLayout(root)
        if layout.journal.exists():
            raise RunDirectoryError(
                f"{root} already holds a run; choose another --run-id or --run-dir"
            )
        try:
            root.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
            os.chmod(root, _DIR_MODE)
            fd = os.open(
                layout.journal,
                os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                _FILE_MODE,
            )
        except OSError as error:
            raise RunDirectoryError(f"{root}: cannot create the run directory: {error.strerror}") from error
        return cls(layout, fd, fsync=fsync)

    def append(self, event: Mapping[str, Any], *, sync: bool = True) -> None:
        """One JSON line, written in one call; fsynced before returning unless ``sync``
        is false, for a group commit: append the batch, then :meth:`sync` once."""
        line = json.dumps(event, default=str, separators=(",", ":")) + "\n"
        os.write(self._journal_fd, line.encode())
        self._unsynced = True
        if sync:
            self.sync()

    def sync(self) -> None:
        """Make every appended line durable (one fsync; none if nothing is pending)."""
        if self._unsynced:
            self._fsync(self._journal_fd)
            self._unsynced = False

    def write_state(self, state: Mapping[str, Any]) -> None:
        write_json_atomic(self.layout.state, state)

    def write_report(self, report: Mapping[str, Any]) -> None:
        write_json_atomic(self.layout.report, report)

    def close(self) -> None:
        if self._journal_fd >= 0:
            os.close(self._journal_fd)
            self._journal_fd = -1


@dataclass(frozen=True)
class Journal:
    """A journal's events; ``truncated_tail`` when its last line was cut off mid-write."""

    events: list[dict[str, Any]]
    truncated_tail: bool = False


def read_journal(path: Path) -> Journal:
    """Every event of a journal.

    A last line without its newline that does not parse is what a driver
    killed mid-write leaves: tolerated and reported. Any other bad line is an
    error naming the file and line.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise JournalError(f"{path}: cannot read the journal: {error.strerror}") from error
    events: list[dict[str, Any]] = []
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            if number == len(lines):  # no newline after it: cut off mid-write
                return Journal(events, truncated_tail=True)
            raise JournalError(f"{path}:{number}: not a JSON event line") from None
        if not isinstance(event, dict) or "event" not in event:
            raise JournalError(f"{path}:{number}: not a journal event (no 'event' key)")
        events.append(event)
    return Journal(events)
