"""Finding the latest complete checkpoint: pure selection rules, and one retried directory scan."""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

__all__ = [
    "COMMIT_MARKERS",
    "TRANSIENT_ERRNOS",
    "Checkpoint",
    "CheckpointDirError",
    "Entry",
    "choose_latest",
    "find_latest",
    "is_complete",
    "is_transient",
    "newest_first",
    "parse_step",
]

# Files whose presence in a checkpoint directory says every other file is written:
# ours (elastic.worker), Orbax's on object stores, torch.distributed.checkpoint's;
# then two written last by savers that commit by renaming a temporary directory
# and leave no marker of their own: Orbax on POSIX file systems
# (_CHECKPOINT_METADATA) and the Hugging Face Trainer (trainer_state.json).
COMMIT_MARKERS = (
    "COMMITTED",
    "commit_success.txt",
    ".metadata",
    "_CHECKPOINT_METADATA",
    "trainer_state.json",
)

# Errors a network file system (NFS, Lustre, GPFS, FUSE mounts) returns for a
# moment and then stops returning: worth a few quick retries.
TRANSIENT_ERRNOS = frozenset({errno.ESTALE, errno.EIO, errno.EAGAIN, errno.EINTR, errno.ETIMEDOUT})

_SCAN_ATTEMPTS = 4
_SCAN_WAIT_MULTIPLIER_S = 0.05
_SCAN_WAIT_MAX_S = 1.0

# A step-numbered stem: an optional prefix that starts with a letter and ends
# in a separator (``step_``, ``checkpoint-``, ``model_v2_``), or one of a few
# words glued to the number (``step100``, ``global_step100``), then the digits.
# ``zero_to_fp32`` has no separator before its digits and is not a step.
_STEM = re.compile(
    r"(?:[A-Za-z][A-Za-z0-9_-]*[_-]|(?:[A-Za-z0-9_-]*[_-])?(?:step|iter|ckpt|checkpoint))?(?P<step>[0-9]+)",
    re.IGNORECASE,
)
# File extensions after the stem: ``.pt``, ``.safetensors``, ``.tar.gz``, ``.h5``.
_EXTENSION = re.compile(r"[A-Za-z][A-Za-z0-9]*")
# Extensions and prefixes of entries still being written, by us or by others
# (``tmp-checkpoint-100`` is what Hugging Face's Trainer renames into place).
_TEMPORARY_EXTENSIONS = frozenset({"tmp", "partial", "incomplete"})
_TEMPORARY_PREFIX = re.compile(r"tmp[_-]", re.IGNORECASE)
_ORBAX_TEMPORARY = ".orbax-checkpoint-tmp-"


@dataclass(frozen=True)
class Entry:
    """One name in the checkpoint directory; ``markers`` are the commit markers found inside."""

    name: str
    is_dir: bool
    markers: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: where it is and the step it holds."""

    path: Path
    step: int


class CheckpointDirError(Exception):
    """The checkpoint directory exists but cannot be read; the message is one line."""

    def __init__(self, directory: Path, problem: str) -> None:
        super().__init__(f"checkpoint directory {directory}: {problem}")
        self.directory = directory
        self.problem = problem


def parse_step(name: str) -> int | None:
    """The step a directory entry's name holds, or ``None`` if it holds none or is temporary.

    ``step_100``, ``step-100``, ``checkpoint-100``, ``100``, ``ckpt_100.pt`` and
    ``model_100.safetensors`` are step 100. Hidden names (``.step_100.tmp-x``),
    ``*.tmp``, ``*.partial``, ``tmp-checkpoint-100`` and Orbax's
    ``100.orbax-checkpoint-tmp-<ts>`` are never steps.
    """
    if name.startswith(".") or _ORBAX_TEMPORARY in name or _TEMPORARY_PREFIX.match(name):
        return None
    stem, *extensions = name.split(".")
    if any(not _EXTENSION.fullmatch(ext) or ext.lower() in _TEMPORARY_EXTENSIONS for ext in extensions):
        return None
    match = _STEM.fullmatch(stem)
    return None if match is None else int(match.group("step"))


def is_complete(entry: Entry) -> bool:
    """A plain file is complete (it was written by rename); a directory needs a commit marker."""
    return not entry.is_dir or not entry.markers.isdisjoint(COMMIT_MARKERS)


def newest_first(entries: Iterable[Entry]) -> list[tuple[int, Entry]]:
    """The step-numbered entries with their steps, highest step first (then by name, for ties)."""
    numbered = [(step, entry) for entry in entries if (step := parse_step(entry.name)) is not None]
    return sorted(numbered, key=lambda pair: (pair[0], pair[1].name), reverse=True)


def choose_latest(entries: Iterable[Entry]) -> Checkpoint | None:
    """The complete entry with the highest step; an incomplete newer one falls back to older ones.

    The returned path is the entry's name; :func:`find_latest` makes it absolute.
    """
    for step, entry in newest_first(entries):
        if is_complete(entry):
            return Checkpoint(Path(entry.name), step)
    return None


def is_transient(error: BaseException) -> bool:
    """An ``OSError`` a network file system may stop returning if asked again."""
    return isinstance(error, OSError) and error.errno in TRANSIENT_ERRNOS


def find_latest(directory: Path) -> Checkpoint | None:
    """The latest complete checkpoint in ``directory`` (absolute path), or ``None``.

    A missing directory is a fresh start (``None``). Transient errors of network
    file systems are retried a few times, quickly; a directory that cannot be
    read (permission denied, not a directory, errors that persist) raises
    :class:`CheckpointDirError`.
    """
    directory = Path(os.path.abspath(directory))
    retrying = Retrying(
        retry=retry_if_exception(is_transient),
        stop=stop_after_attempt(_SCAN_ATTEMPTS),
        wait=wait_exponential(multiplier=_SCAN_WAIT_MULTIPLIER_S, max=_SCAN_WAIT_MAX_S),
        reraise=True,
    )
    try:
        return retrying(_scan, directory)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise CheckpointDirError(directory, "not a directory") from None
    except PermissionError:
        raise CheckpointDirError(directory, "permission denied") from None
    except OSError as error:
        raise CheckpointDirError(directory, error.strerror or type(error).__name__) from error


def _scan(directory: Path) -> Checkpoint | None:
    # Only the newest entries have their markers read: one stat per marker and
    # directory, down to the first complete one, however many steps are kept.
    # A dangling symlink, a socket or a FIFO is neither and is never chosen.
    with os.scandir(directory) as listing:
        listed = [
            Entry(item.name, item.is_dir())
            for item in listing
            if parse_step(item.name) is not None and (item.is_dir() or item.is_file())
        ]
    for step, entry in newest_first(listed):
        if entry.is_dir:
            try:
                entry = replace(entry, markers=_markers(directory / entry.name))
            except PermissionError:
                raise CheckpointDirError(directory / entry.name, "permission denied") from None
        if is_complete(entry):
            return Checkpoint(directory / entry.name, step)
    return None


def _markers(path: Path) -> frozenset[str]:
    found = set()
    for marker in COMMIT_MARKERS:
        try:
            if stat.S_ISREG(os.stat(path / marker).st_mode):
                found.add(marker)
                break  # one is enough
        except (FileNotFoundError, NotADirectoryError):
            # Absent, or the entry went away (a trainer pruning old steps).
            continue
    return frozenset(found)
