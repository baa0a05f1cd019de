"""Finding the latest complete checkpoint on disk: one retried scan of the checkpoint directory.

The scan gathers facts (names, sizes, commit markers, a file's first and last
bytes) and hands them to the pure rule, :func:`elastic.core.checkpoints.selection.choose`,
which decides. A network file system's passing errors are retried (``tenacity``);
a directory that cannot be read is a :class:`CheckpointDirError` of one line.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import replace
from pathlib import Path, PurePosixPath

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from elastic.core.checkpoints.dirs import DEEPSPEED_LATEST, ORBAX_METADATA, TRAINER_STATE
from elastic.core.checkpoints.formats import MAX_HEAD_BYTES, TAIL_BYTES, FileFacts, head_bytes_needed
from elastic.core.checkpoints.names import CHECKPOINT_EXTENSIONS, LIGHTNING_LAST
from elastic.core.checkpoints.selection import (
    COMMIT_MARKERS, Checkpoint, Entry, Selection, choose, is_complete, newest_first,
)

__all__ = ["TRANSIENT_ERRNOS", "CheckpointDirError", "find_latest", "is_transient", "scan_checkpoints"]

# Errors a network file system (NFS, Lustre, GPFS, FUSE mounts) returns for a
# moment and then stops returning: worth a few quick retries.
TRANSIENT_ERRNOS = frozenset({errno.ESTALE, errno.EIO, errno.EAGAIN, errno.EINTR, errno.ETIMEDOUT})

_SCAN_ATTEMPTS = 4
_SCAN_WAIT_MULTIPLIER_S = 0.05
_SCAN_WAIT_MAX_S = 1.0

# Files read whole (small JSON) or head and tail (checkpoint formats) inside a trainer's directory.
_JSON_SUFFIX = ".json"


class CheckpointDirError(Exception):
    """The checkpoint directory exists but cannot be read; the message is one line."""

    def __init__(self, directory: Path, problem: str) -> None:
        super().__init__(f"checkpoint directory {directory}: {problem}")
        self.directory = directory
        self.problem = problem


def is_transient(error: BaseException) -> bool:
    """An ``OSError`` a network file system may stop returning if asked again."""
    return isinstance(error, OSError) and error.errno in TRANSIENT_ERRNOS


def find_latest(directory: Path, pattern: re.Pattern[str] | None = None) -> Checkpoint | None:
    """The latest complete checkpoint in ``directory`` (absolute path), or ``None``."""
    return scan_checkpoints(directory, pattern).latest


def scan_checkpoints(directory: Path, pattern: re.Pattern[str] | None = None) -> Selection:
    """Look at ``directory``: its latest complete checkpoint (absolute path), rejections, other names.

    A missing directory is a fresh start (nothing found). Transient errors of
    network file systems are retried a few times, quickly; a directory that
    cannot be read (permission denied, not a directory, errors that persist)
    raises :class:`CheckpointDirError`.
    """
    directory = Path(os.path.abspath(directory))
    retrying = Retrying(
        retry=retry_if_exception(is_transient),
        stop=stop_after_attempt(_SCAN_ATTEMPTS),
        wait=wait_exponential(multiplier=_SCAN_WAIT_MULTIPLIER_S, max=_SCAN_WAIT_MAX_S),
        reraise=True,
    )
    try:
        return retrying(_scan, directory, pattern)
    except FileNotFoundError:
        return Selection(None)
    except NotADirectoryError:
        raise CheckpointDirError(directory, "not a directory") from None
    except PermissionError:
        raise CheckpointDirError(directory, "permission denied") from None
    except OSError as error:
        raise CheckpointDirError(directory, error.strerror or type(error).__name__) from error


def _scan(directory: Path, pattern: re.Pattern[str] | None) -> Selection:
    # Only the newest entries are read: markers, a file's ends, a trainer's
    # directory, down to the first complete one, however many steps are kept.
    # A dangling symlink, a socket or a FIFO is neither and is never chosen.
    with os.scandir(directory) as listing:
        listed = [Entry(item.name, item.is_dir()) for item in listing if item.is_dir() or item.is_file()]
    # last.ckpt holds its step inside: read it first so it can be ranked.
    listed = [_read(directory, e) if e.name == LIGHTNING_LAST and pattern is None else e for e in listed]
    inspected: dict[str, Entry] = {}
    for _, entry in newest_first(listed, pattern):
        entry = _read(directory, entry)
        inspected[entry.name] = entry
        if is_complete(entry):
            break
    selection = choose([inspected.get(e.name, e) for e in listed], pattern)
    if selection.latest is None:
        return selection
    return replace(selection, latest=Checkpoint(directory / selection.latest.path, selection.latest.step))


def _read(directory: Path, entry: Entry) -> Entry:
    """The entry with the facts its judgement needs; one that vanished meanwhile is read as empty."""
    path = directory / entry.name
    try:
        if not entry.is_dir:
            if entry.file is not None:
                return entry
            try:
                return replace(entry, file=_file_facts(path, entry.name))
            except PermissionError:  # the ranks could not load it either: passed over, not fatal
                return replace(entry, file=FileFacts(entry.name, 0, unreadable="permission denied"))
        markers = _markers(path)
        if markers == {ORBAX_METADATA}:  # judged on what it records
            return replace(entry, markers=markers, contents=(_file_facts(path / ORBAX_METADATA, ORBAX_METADATA),))
        if not markers or markers == {TRAINER_STATE}:  # judged on content: a trainer's, DeepSpeed's
            contents, subdirs = _contents(path)
            return replace(entry, markers=markers, contents=contents, subdirs=subdirs)
        return replace(entry, markers=markers)
    except PermissionError:
        raise CheckpointDirError(path, "permission denied") from None
    except (FileNotFoundError, NotADirectoryError):
        # Gone (a trainer pruning old steps): judged as an empty file or unmarked directory.
        return replace(entry, file=FileFacts(entry.name, 0)) if not entry.is_dir else entry


def _file_facts(path: Path, name: str, *, whole: bool = False) -> FileFacts:
    """Size, first and last bytes of a file (the whole of it, up to a bound, when ``whole``)."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        first = handle.read(8)
        want = MAX_HEAD_BYTES if whole else head_bytes_needed(name, first)
        head = first + handle.read(max(0, want - len(first)))
        if size <= len(head):
            return FileFacts(name, size, head, head[-TAIL_BYTES:])
        handle.seek(max(0, size - TAIL_BYTES))
        return FileFacts(name, size, head, handle.read(TAIL_BYTES))


def _contents(path: Path) -> tuple[tuple[FileFacts, ...], tuple[str, ...]]:
    """A trainer directory's files (two levels) with what their checks need, and its subdirectories."""
    files: list[FileFacts] = []
    subdirs: list[str] = []
    for folder in ("", *_subdirectories(path)):
        if folder:
            subdirs.append(folder)
        with os.scandir(path / folder) as listing:
            for item in listing:
                if not item.is_file():
                    continue
                name = f"{folder}/{item.name}" if folder else item.name
                files.append(_inner_facts(path / name, name, item))
    return tuple(files), tuple(subdirs)


def _subdirectories(path: Path) -> list[str]:
    with os.scandir(path) as listing:
        return sorted(item.name for item in listing if item.is_dir())


def _inner_facts(path: Path, name: str, item: os.DirEntry[str]) -> FileFacts:
    base = PurePosixPath(name).name
    if base.endswith(_JSON_SUFFIX) or base == DEEPSPEED_LATEST:
        return _file_facts(path, name, whole=True)
    if PurePosixPath(name).suffix.lstrip(".").lower() in CHECKPOINT_EXTENSIONS:
        return _file_facts(path, name)
    return FileFacts(name, item.stat().st_size)


def _markers(path: Path) -> frozenset[str]:
    found = set()
    for marker in COMMIT_MARKERS:
        try:
            if stat.S_ISREG(os.stat(path / marker).st_mode):
                found.add(marker)
                break  # one is enough: trainer_state.json, the one needing more, comes last
        except (FileNotFoundError, NotADirectoryError):
            # Absent, or the entry went away (a trainer pruning old steps).
            continue
    return frozenset(found)
