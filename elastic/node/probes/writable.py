"""Whether this host can write in a directory, found out before anything is launched.

The directory and its missing parents are made, a small probe file is written, synced and
removed, and what was made is removed again, so the directory is left as it was found, its
times included. The first error says why not, as the OS put it (permission denied, read-only file system, not a
directory, no space left on device), naming the path it was about. Only that one file and
those folders are touched: a few milliseconds on a local disk.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PROBE_PREFIX", "write_problem"]

PROBE_PREFIX = ".elastic-write-probe-"  # hidden: no checkpoint scan takes it for a checkpoint
_PROBE_BYTES = b"elastic checks it can write here; this file is removed at once\n"


def write_problem(directory: Path) -> str | None:
    """Why this process cannot make ``directory`` (absolute) and write a file in it, in a few
    words naming the path; ``None`` when it can."""
    missing = _missing(directory)
    found = missing[-1].parent if missing else directory  # the deepest folder there already
    with _times_kept(found):
        made: list[Path] = []
        try:
            for folder in reversed(missing):
                try:
                    os.mkdir(folder)
                except FileExistsError:  # made meanwhile by another: not ours to remove
                    continue
                except OSError as error:
                    return _said(f"cannot create {folder}", error)
                made.append(folder)
            return _probe(directory)
        finally:
            for folder in reversed(made):
                with contextlib.suppress(OSError):
                    os.rmdir(folder)


@contextlib.contextmanager
def _times_kept(folder: Path) -> Iterator[None]:
    """``folder``'s access and modification times as they were, whatever was made and removed
    in it meanwhile: the node reads a checkpoint directory changed in the last second as a save
    under way (``elastic.core.failures.RECENT_WRITE_S``), and a rank failing that soon after the
    launch would have its survivors wait for a save there never was."""
    try:
        before = os.stat(folder)
    except OSError:
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.utime(folder, ns=(before.st_atime_ns, before.st_mtime_ns))


def _missing(directory: Path) -> list[Path]:
    """``directory`` and those of its parents that do not exist yet, deepest first."""
    missing = []
    for folder in (directory, *directory.parents):
        if os.path.lexists(folder):
            break
        missing.append(folder)
    return missing


def _probe(directory: Path) -> str | None:
    probe = directory / f"{PROBE_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as error:
        return _said(f"cannot write in {directory}", error)
    problem = None
    try:
        os.write(fd, _PROBE_BYTES)
        os.fsync(fd)  # a full disk may say so only here (delayed allocation)
    except OSError as error:
        problem = _said(f"cannot write in {directory}", error)
    finally:
        os.close(fd)
    try:
        os.unlink(probe)
    except OSError as error:
        problem = problem or _said(f"cannot remove a file from {directory}", error)
    return problem


def _said(what: str, error: OSError) -> str:
    why = (error.strerror or type(error).__name__).lower()
    return f"{what}: {why}"
