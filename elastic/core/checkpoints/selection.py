"""Which checkpoint a run resumes from: the complete entry with the highest step. Pure.

The shell's scan (:mod:`elastic.run.watches.checkpoint_scan`) gathers facts about each
name in the checkpoint directory (names, sizes, commit markers, a file's first
and last bytes); the rules here, in :mod:`elastic.core.checkpoints.names`,
:mod:`elastic.core.checkpoints.formats` and :mod:`elastic.core.checkpoints.dirs`
decide. Entries whose name is a checkpoint's but whose content is not whole are
*rejected*, with a reason the driver journals; names that are no checkpoint's
are *unrecognised*.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from elastic.core.checkpoints.dirs import (
    ORBAX_METADATA,
    TRAINER_STATE,
    deepspeed_tag_problem,
    is_deepspeed_tag,
    orbax_metadata_problem,
    trainer_problem,
)
from elastic.core.checkpoints.formats import FileFacts, lightning_global_step, structure_problem
from elastic.core.checkpoints.names import LIGHTNING_LAST, StepName, is_temporary, parse_name

__all__ = [
    "COMMIT_MARKERS", "Checkpoint", "Entry", "Rejection", "Selection", "choose", "choose_latest",
    "entry_problem", "is_complete", "newest_first", "parse_step",
]


# Files whose presence in a checkpoint directory says every other file is written:
# ours (elastic.worker), Orbax's on object stores, torch.distributed.checkpoint's
# (written by the coordinator once every rank's write is gathered); then one
# written last by savers that commit by renaming a temporary directory and leave
# no marker of their own: Orbax on POSIX file systems (_CHECKPOINT_METADATA), which
# counts only once it records a commit (Orbax's commit-file mode creates it first).
# Last, the Hugging Face Trainer's trainer_state.json: its main process writes
# it after its own files, but not after other processes' (each writes its
# rng_state_N.pth unsynchronised) nor atomically, so a directory holding only
# this marker has its content checked too (see elastic.core.checkpoints.dirs).
COMMIT_MARKERS = (
    "COMMITTED",
    "commit_success.txt",
    ".metadata",
    "_CHECKPOINT_METADATA",
    "trainer_state.json",
)


@dataclass(frozen=True)
class Entry:
    """One name in the checkpoint directory, with what the scan read of it.

    ``markers`` are the commit markers found inside a directory; ``file`` is what
    was read of a plain file (``None``: nothing, it is judged on its name);
    ``contents`` are the files of a directory whose marker alone does not
    prove it whole (paths relative to it, two levels deep), ``subdirs`` its
    directories.
    """

    name: str
    is_dir: bool
    markers: frozenset[str] = frozenset()
    file: FileFacts | None = None
    contents: tuple[FileFacts, ...] | None = None
    subdirs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: where it is and the step it holds."""

    path: Path
    step: int


@dataclass(frozen=True)
class Rejection:
    """A checkpoint-named entry newer than the chosen one that is not whole, and why."""

    name: str
    step: int | None
    reason: str


@dataclass(frozen=True)
class Selection:
    """What a look at the checkpoint directory found.

    ``rejected`` are the entries newer than ``latest`` that were passed over;
    ``unrecognised`` the names that are no checkpoint's (sorted; hidden and
    temporary names are not listed).
    """

    latest: Checkpoint | None
    rejected: tuple[Rejection, ...] = ()
    unrecognised: tuple[str, ...] = field(default=())

    @property
    def recognised_none(self) -> bool:
        """The directory holds entries, but none is named like a checkpoint."""
        return self.latest is None and not self.rejected and bool(self.unrecognised)


def parse_step(name: str) -> int | None:
    """The step a directory entry's name holds, or ``None`` if it holds none or is temporary.

    ``step_100``, ``step-100``, ``checkpoint-100``, ``100``, ``ckpt_100.pt``,
    ``model_100.safetensors`` and ``epoch=0-step=100.ckpt`` are step 100. A name
    with extensions is read as a file's (they must be checkpoint extensions), one
    without as a directory's. Hidden names (``.step_100.tmp-x``), ``*.tmp``,
    ``*.partial``, ``tmp-checkpoint-100``, Orbax's ``100.orbax-checkpoint-tmp-<ts>``,
    dates and config names are never steps.
    """
    parsed = parse_name(name, is_dir="." not in name)
    return None if parsed is None else parsed.step


def _step_name(entry: Entry, pattern: re.Pattern[str] | None) -> StepName | None:
    """The step an entry holds: from its name, or for Lightning's ``last.ckpt`` from its content."""
    if entry.name == LIGHTNING_LAST and not entry.is_dir and pattern is None:
        step = lightning_global_step(entry.file.head) if entry.file is not None else None
        return None if step is None else StepName(step, -1)  # a step-named copy wins a tie
    return parse_name(entry.name, is_dir=entry.is_dir, pattern=pattern)


def _is_candidate(entry: Entry, pattern: re.Pattern[str] | None) -> bool:
    """Named like a checkpoint (``last.ckpt`` is, whatever it holds)."""
    if entry.name == LIGHTNING_LAST and not entry.is_dir and pattern is None:
        return True
    return parse_name(entry.name, is_dir=entry.is_dir, pattern=pattern) is not None


def entry_problem(entry: Entry) -> str | None:
    """Why an entry named like a checkpoint is not a whole one, or ``None`` if it is."""
    if not entry.is_dir:
        if entry.file is None:
            return None
        problem = structure_problem(entry.file)
        if problem is None and entry.name == LIGHTNING_LAST and lightning_global_step(entry.file.head) is None:
            return "no global_step found in it (not a Lightning checkpoint?)"
        return problem
    trusted = entry.markers.intersection(COMMIT_MARKERS).difference({TRAINER_STATE, ORBAX_METADATA})
    if trusted:
        return None
    if ORBAX_METADATA in entry.markers:
        metadata = next((f for f in entry.contents or () if f.name == ORBAX_METADATA), None)
        return None if metadata is None else orbax_metadata_problem(metadata)
    if TRAINER_STATE in entry.markers:
        return None if entry.contents is None else trainer_problem(entry.contents, entry.subdirs)
    if entry.contents is not None and is_deepspeed_tag(entry.contents):
        # DeepSpeed's own save_checkpoint(save_dir) leaves global_stepN/ without a marker.
        return deepspeed_tag_problem(entry.contents)
    return f"no commit marker (one of {', '.join(COMMIT_MARKERS)})"


def is_complete(entry: Entry) -> bool:
    """A plain file whose structure checks out, or a directory with a commit marker (and whole content)."""
    return entry_problem(entry) is None


def _sort_key(pair: tuple[StepName, Entry]) -> tuple[int, int, str]:
    return pair[0].step, pair[0].version, pair[1].name


def newest_first(
    entries: Iterable[Entry], pattern: re.Pattern[str] | None = None
) -> list[tuple[int, Entry]]:
    """The step-numbered entries with their steps, highest step first (then ``-vN`` copies, then by name)."""
    numbered = [(step, entry) for entry in entries if (step := _step_name(entry, pattern)) is not None]
    return [(step.step, entry) for step, entry in sorted(numbered, key=_sort_key, reverse=True)]


def choose(entries: Iterable[Entry], pattern: re.Pattern[str] | None = None) -> Selection:
    """The complete entry with the highest step, the newer ones rejected, and the unrecognised names.

    The returned path is the entry's name; :func:`~elastic.run.watches.checkpoint_scan.scan_checkpoints` makes it absolute.
    """
    entries = list(entries)
    rejected: list[Rejection] = []
    latest: Checkpoint | None = None
    for step, entry in newest_first(entries, pattern):
        problem = entry_problem(entry)
        if problem is None:
            latest = Checkpoint(Path(entry.name), step)
            break
        rejected.append(Rejection(entry.name, step, problem))
    unnumbered = [e for e in entries if _is_candidate(e, pattern) and _step_name(e, pattern) is None]
    rejected.extend(Rejection(e.name, None, entry_problem(e) or "no step in it") for e in unnumbered)
    unrecognised = sorted(e.name for e in entries if not is_temporary(e.name) and not _is_candidate(e, pattern))
    return Selection(latest, tuple(rejected), tuple(unrecognised))


def choose_latest(entries: Iterable[Entry], pattern: re.Pattern[str] | None = None) -> Checkpoint | None:
    """The complete entry with the highest step; an incomplete newer one falls back to older ones."""
    return choose(entries, pattern).latest
