"""The run directory on disk: journal (fsynced), state snapshot, report; 0700/0600."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic.core.journal.fold import FoldError
from elastic.core.run_layout import RunLayout
from elastic.core.training.startup import read_marks
from elastic.core.training.stall import ProgressPolicy
from elastic.node.logs.last_step import last_step_logged
from elastic.node.private_dirs import make_private_dirs  # re-exported: the run directory is made with it

__all__ = [
    "Journal",
    "JournalError",
    "RunDirectory",
    "RunDirectoryError",
    "RunDirectoryLocked",
    "RunWriteError",
    "driver_running",
    "last_step_seen",
    "longest_init_marked",
    "last_step_written",
    "make_private_dirs",
    "read_journal",
    "write_json_atomic",
]

_DIR_MODE = 0o700
_FILE_MODE = 0o600


class RunDirectoryError(Exception):
    """The run directory cannot be used (exists already, not writable)."""


class RunDirectoryLocked(RunDirectoryError):
    """Another live driver holds the run directory's lock."""


class JournalError(Exception):
    """A journal that cannot be read, naming the file and line."""


class RunWriteError(Exception):
    """A file of the run directory could not be written (a full disk): names the file."""

    def __init__(self, path: Path | str, error: OSError) -> None:
        super().__init__(f"cannot write {path}: {error.strerror or error}")
        self.path = str(path)


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Write to a temporary file beside ``path``, fsync, rename over it.

    Raises :class:`RunWriteError` naming ``path``; a failed write leaves the
    previous file whole and no temporary behind.
    """
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, _FILE_MODE)
        try:
            _write_all(fd, (json.dumps(data, indent=2, default=str) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise RunWriteError(path, error) from error


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until done: a short write (a disk filling up) is an error, not lost bytes."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _lock(layout: RunLayout) -> int:
    """Take the run directory's driver lock for this process's lifetime (its open fd).

    The lock file holds the driver's pid, for the message another driver gets.
    """
    fd = os.open(layout.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, _FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise RunDirectoryLocked(
            f"{layout.root} is in use: its run is still being driven by pid {holder}"
        ) from None
    except OSError:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def driver_running(root: Path) -> bool:
    """Whether a live driver holds ``root``'s lock (a shared lock taken and dropped at once)."""
    try:
        fd = os.open(RunLayout(root).lock, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False  # no lock file: no driver of this version ever ran here
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops a lock taken here
    return False


class RunDirectory:
    """Owns the files of one run; the driver is its only writer."""

    def __init__(
        self,
        layout: RunLayout,
        journal_fd: int,
        lock_fd: int = -1,
        *,
        fsync: Callable[[int], None] = os.fsync,
    ) -> None:
        self.layout = layout
        self._journal_fd = journal_fd
        self._lock_fd = lock_fd
        self._fsync = fsync  # a seam: tests count the journal's fsyncs
        self._unsynced = False

    @classmethod
    def reopen(cls, root: Path, *, fsync: Callable[[int], None] = os.fsync) -> RunDirectory:
        """Continue the run of an earlier driver; a cut-off last journal line is dropped.

        Raises :class:`RunDirectoryLocked` while that driver still lives.
        """
        layout = RunLayout(root)
        try:
            lock_fd = _lock(layout)
        except OSError as error:
            raise RunDirectoryError(f"{layout.lock}: cannot lock the run: {error.strerror}") from error
        try:
            fd = os.open(layout.journal, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        except OSError as error:
            os.close(lock_fd)
            raise RunDirectoryError(f"{root}: cannot reopen the journal: {error.strerror}") from error
        data = layout.journal.read_bytes()
        if data and not data.endswith(b"\n"):
            os.ftruncate(fd, data.rfind(b"\n") + 1)
        return cls(layout, fd, lock_fd, fsync=fsync)

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
            lock_fd = _lock(layout)
        except OSError as error:
            raise RunDirectoryError(f"{root}: cannot create the run directory: {error.strerror}") from error
        try:
            if layout.journal.exists():  # another driver created it since the check above
                raise RunDirectoryError(
                    f"{root} already holds a run; choose another --run-id or --run-dir"
                )
            fd = os.open(
                layout.journal,
                os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                _FILE_MODE,
            )
        except OSError as error:
            os.close(lock_fd)
            raise RunDirectoryError(f"{root}: cannot create the run directory: {error.strerror}") from error
        except RunDirectoryError:
            os.close(lock_fd)
            raise
        return cls(layout, fd, lock_fd, fsync=fsync)

    def append(self, event: Mapping[str, Any], *, sync: bool = True) -> None:
        """One JSON line, written in one call; fsynced before returning unless ``sync``
        is false, for a group commit: append the batch, then :meth:`sync` once.

        Raises :class:`RunWriteError` naming the journal (a full disk).
        """
        line = json.dumps(event, default=str, separators=(",", ":")) + "\n"
        try:
            _write_all(self._journal_fd, line.encode())
        except OSError as error:
            raise RunWriteError(self.layout.journal, error) from error
        self._unsynced = True
        if sync:
            self.sync()

    def sync(self) -> None:
        """Make every appended line durable (one fsync; none if nothing is pending).

        Raises :class:`RunWriteError` naming the journal.
        """
        if self._unsynced:
            try:
                self._fsync(self._journal_fd)
            except OSError as error:
                raise RunWriteError(self.layout.journal, error) from error
            self._unsynced = False

    def write_state(self, state: Mapping[str, Any]) -> None:
        write_json_atomic(self.layout.state, state)

    def write_report(self, report: Mapping[str, Any]) -> None:
        write_json_atomic(self.layout.report, report)

    def close(self) -> None:
        if self._journal_fd >= 0:
            os.close(self._journal_fd)
            self._journal_fd = -1
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the driver lock
            self._lock_fd = -1


@dataclass(frozen=True)
class Journal:
    """A journal's events; ``truncated_tail`` when its last line was cut off mid-write.

    ``path`` and ``line_numbers`` (each event's line, from 1) let a complaint about
    an event (:meth:`unreadable`) name the file and line.
    """

    events: list[dict[str, Any]]
    truncated_tail: bool = False
    path: Path | None = None
    line_numbers: tuple[int, ...] = ()

    def unreadable(self, error: FoldError) -> JournalError:
        """The fold's complaint about this journal, naming its file and the event's line."""
        where = "journal" if self.path is None else str(self.path)
        if error.index is not None and error.index < len(self.line_numbers):
            where += f":{self.line_numbers[error.index]}"
        return JournalError(f"{where}: {error}")


def read_journal(path: Path) -> Journal:
    """Every event of a journal.

    A last line without its newline that does not parse is what a driver
    killed mid-write leaves: tolerated and reported. Any other bad line (not
    UTF-8, not JSON, not an event, an ``attempt`` that is no whole number) is an
    error naming the file and line. Nothing is written.
    """
    try:
        data = path.read_bytes()
    except OSError as error:
        raise JournalError(f"{path}: cannot read the journal: {error.strerror}") from error
    events: list[dict[str, Any]] = []
    numbers: list[int] = []
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            if number == len(lines):  # no newline after it: cut off mid-write
                return Journal(events, True, path, tuple(numbers))
            raise JournalError(
                f"{path}:{number}: not UTF-8 text (byte 0x{raw[error.start]:02x} at column {error.start + 1})"
            ) from None
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            if number == len(lines):  # no newline after it: cut off mid-write
                return Journal(events, True, path, tuple(numbers))
            raise JournalError(f"{path}:{number}: not a JSON event line") from None
        if not isinstance(event, dict) or not isinstance(event.get("event"), str):
            raise JournalError(f"{path}:{number}: not a journal event (no 'event' key)")
        attempt = event.get("attempt", 0)
        if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 0:
            raise JournalError(
                f"{path}:{number}: {event['event']} has attempt {json.dumps(attempt)}, not a whole number"
            )
        events.append(event)
        numbers.append(number)
    return Journal(events, False, path, tuple(numbers))


def last_step_written(layout: RunLayout, attempt: int) -> tuple[int, float] | None:
    """The training step a driver last wrote into ``state.json`` for ``attempt`` (it rewrites the
    file within a second of a new step), and when (epoch seconds: the file's last change); None when
    the file is missing or unreadable, speaks of another attempt or holds no step.

    Read by the driver that takes a dead driver's run over, before it writes its own: the dead
    driver journals the step at most once a minute, so this is how far its attempt trained.
    """
    try:
        written = layout.state.stat().st_mtime
        state = json.loads(layout.state.read_bytes())
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    if not isinstance(state, dict) or state.get("attempt") != attempt:
        return None
    step = state.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return None
    return step, written


def last_step_seen(layout: RunLayout, attempt: int, policy: ProgressPolicy) -> tuple[int, float] | None:
    """The highest step a dead driver's ``attempt`` was seen at, and when (epoch seconds): in the
    driver's ``state.json`` or in the last lines of the attempt's rank logs, whichever shows the
    higher (the later, at a tie); None when neither shows one."""
    seen = [s for s in (last_step_written(layout, attempt), last_step_logged(layout.attempt_dir(attempt), policy)) if s]
    return max(seen) if seen else None


def longest_init_marked(layout: RunLayout, attempts: int) -> float | None:
    """The longest distributed initialisation the ranks of a dead driver's first ``attempts``
    attempts marked as completed in their start-up files (``init_begin`` to ``init_end``): what its
    journal may not hold, an attempt's start-up profile being journaled only once every rank
    stepped or the attempt ended. None when no rank marked one."""
    longest: float | None = None
    for attempt in range(attempts):
        for path in layout.attempt_dir(attempt).glob("rank-*.startup"):
            try:
                marks = read_marks(path.read_text(errors="replace"))
            except OSError:
                continue
            if "init_begin" in marks and "init_end" in marks:
                seconds = max(0.0, marks["init_end"] - marks["init_begin"])
                longest = seconds if longest is None else max(longest, seconds)
    return longest
