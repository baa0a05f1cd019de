"""The worker-side helper: where to resume from, and checkpoints written atomically (stdlib only).

A training script imports this module, so it imports nothing beyond the
standard library: no Ray, no structlog, not even ``elastic.run.watches.checkpoint_scan`` (which
pulls in tenacity). The launcher finds what this module writes:
``step_{step}`` directories holding a ``COMMITTED`` marker (DESIGN §6), and when each save
began and was committed (``.elastic-save-times.json``, the goodput ledger's checkpoint time)::

    from elastic.worker import atomic_checkpoint, checkpoint_dir, resume_point
    start = resume_point()
    if start is not None: model.load_state_dict(torch.load(start.path / "model.pt"))
    with atomic_checkpoint(checkpoint_dir() or "checkpoints", step) as tmp:
        torch.save(model.state_dict(), tmp / "model.pt")
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import stat
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CHECKPOINT_DIR_VAR",
    "COMMIT_MARKER",
    "JSON_STATE_NAME",
    "RESUME_FROM_VAR",
    "RESUME_STEP_VAR",
    "ResumePoint",
    "atomic_checkpoint",
    "checkpoint_dir",
    "resume_point",
    "save_json_checkpoint",
    "step_dir_name",
]

CHECKPOINT_DIR_VAR = "ELASTIC_CHECKPOINT_DIR"
RESUME_FROM_VAR = "ELASTIC_RESUME_FROM"
RESUME_STEP_VAR = "ELASTIC_RESUME_STEP"

# One of elastic.run.watches.checkpoint_scan.COMMIT_MARKERS; a unit test keeps the two in step.
COMMIT_MARKER = "COMMITTED"
JSON_STATE_NAME = "state.json"
# When the save began and was committed (wall clock), for the goodput ledger: read by
# elastic.run.watches.checkpoints.SAVE_TIMES (a unit test keeps the two in step).
SAVE_TIMES = ".elastic-save-times.json"

_NAME_ATTEMPTS = 100


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint this attempt starts from: its path and the step it holds."""

    path: Path
    step: int


def resume_point(environ: Mapping[str, str] | None = None) -> ResumePoint | None:
    """Where the launcher says to resume from, or ``None`` on a fresh start.

    Reads ``ELASTIC_RESUME_FROM`` and ``ELASTIC_RESUME_STEP`` (from ``environ``,
    by default the process environment)::

        start = resume_point()
        first_step = 0 if start is None else start.step + 1
        if start is not None:
            model.load_state_dict(torch.load(start.path / "model.pt"))
        ...
    """
    env = os.environ if environ is None else environ
    path = env.get(RESUME_FROM_VAR, "")
    if not path:
        return None
    raw_step = env.get(RESUME_STEP_VAR, "")
    if not raw_step.isdecimal() or not raw_step.isascii():
        raise ValueError(f"{RESUME_STEP_VAR}={raw_step!r}: expected a non-negative integer with {RESUME_FROM_VAR} set")
    return ResumePoint(Path(path), int(raw_step))


def checkpoint_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """The directory the launcher watches for checkpoints (``ELASTIC_CHECKPOINT_DIR``), or ``None``.

    Save into it with :func:`atomic_checkpoint`::

        directory = checkpoint_dir() or Path("checkpoints")
        with atomic_checkpoint(directory, step) as tmp:
            torch.save(model.state_dict(), tmp / "model.pt")
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        # directory / f"step_{step}" now holds both files and a COMMITTED marker
    """
    env = os.environ if environ is None else environ
    value = env.get(CHECKPOINT_DIR_VAR, "")
    return Path(value) if value else None


def step_dir_name(step: int) -> str:
    """``step_{step}``: the name :func:`atomic_checkpoint` commits a step under."""
    return f"step_{_checked_step(step)}"


@contextlib.contextmanager
def atomic_checkpoint(directory: str | os.PathLike[str], step: int) -> Iterator[Path]:
    """Yield a temporary directory to write a checkpoint into; commit it as ``step_{step}`` on success.

    Call it from one process (rank 0, say); sharded savers have their own
    commit (torch DCP's ``.metadata``). Usage::

        with atomic_checkpoint(checkpoint_dir() or "checkpoints", step) as tmp:
            torch.save(model.state_dict(), tmp / "model.pt")
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
            (tmp / "step.txt").write_text(str(step))
        # a crash anywhere above leaves the previous checkpoint the latest one

    The temporary directory is ``DIRECTORY/.step_{step}.tmp-<random>``: hidden,
    so the launcher never chooses it. On a clean exit every file in it is
    fsynced, a ``COMMITTED`` marker is written and fsynced, the directory is
    renamed to ``step_{step}`` and the parent is fsynced. An existing
    ``step_{step}`` is first renamed aside (hidden) and removed afterwards; a
    crash in between leaves the previous step the latest complete one. On an
    exception the temporary directory is removed and the exception re-raised.
    """
    parent = Path(directory)
    final = parent / step_dir_name(step)
    parent.mkdir(parents=True, exist_ok=True)
    tmp = _make_hidden_dir(parent, f".step_{step}.tmp-")
    began = time.time()
    try:
        yield tmp
        _commit(tmp, final, step, began)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def save_json_checkpoint(directory: str | os.PathLike[str], step: int, data: object) -> Path:
    """Save a small JSON-serialisable state atomically as ``step_{step}/state.json``; return the step dir.

    ::

        final = save_json_checkpoint(checkpoint_dir() or "checkpoints", step, {"step": step, "lr": lr})
        start = resume_point()
        state = json.loads((start.path / "state.json").read_text()) if start else {"step": 0}
    """
    # Serialise before anything touches the disk: bad data leaves no trace.
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    with atomic_checkpoint(directory, step) as tmp:
        (tmp / JSON_STATE_NAME).write_text(text, encoding="utf-8")
    return Path(directory) / step_dir_name(step)


def _checked_step(step: int) -> int:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step={step!r}: expected a non-negative integer")
    return step


def _make_hidden_dir(parent: Path, prefix: str) -> Path:
    # os.mkdir with 0o777 honours the umask (tempfile.mkdtemp would force 0700,
    # and the committed checkpoint would keep it).
    for _ in range(_NAME_ATTEMPTS):
        path = parent / f"{prefix}{secrets.token_hex(4)}"
        try:
            os.mkdir(path, 0o777)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{parent}: no free name starting with {prefix!r}")


def _commit(tmp: Path, final: Path, step: int, began: float) -> None:
    _fsync_tree(tmp)
    (tmp / SAVE_TIMES).write_text(json.dumps({"began": began, "committed": time.time()}))
    marker = tmp / COMMIT_MARKER
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        os.write(fd, f"{step}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    _fsync_dir(tmp)
    parent = final.parent
    aside: Path | None = None
    if os.path.lexists(final):
        # rename() cannot replace a non-empty directory: move the old step aside
        # under a hidden name, put the new one in place, then remove the old one.
        aside = _free_hidden_name(parent, f".{final.name}.old-")
        os.rename(final, aside)
    try:
        os.rename(tmp, final)
    except BaseException:
        if aside is not None:
            os.rename(aside, final)
        raise
    _fsync_dir(parent)
    if aside is not None:
        _remove(aside)


def _free_hidden_name(parent: Path, prefix: str) -> Path:
    for _ in range(_NAME_ATTEMPTS):
        path = parent / f"{prefix}{secrets.token_hex(4)}"
        if not os.path.lexists(path):
            return path
    raise FileExistsError(f"{parent}: no free name starting with {prefix!r}")


def _fsync_tree(root: Path) -> None:
    for here, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(here, name)
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue  # a symlink's target is not ours; opening a FIFO would block
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(here))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)
