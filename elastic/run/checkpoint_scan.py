"""Finding the latest complete checkpoint: pure selection rules, and one retried directory scan.

The scan gathers facts (names, sizes, commit markers, a file's first and last
bytes); pure functions here, in :mod:`elastic.core.checkpoints.names` and in
:mod:`elastic.core.checkpoints.formats` decide. Entries whose name is a checkpoint's
but whose content is not whole are *rejected*, with a reason the driver
journals; names that are no checkpoint's are *unrecognised*.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from elastic.core.checkpoints.dirs import (
    DEEPSPEED_LATEST,
    ORBAX_METADATA,
    TRAINER_STATE,
    deepspeed_tag_problem,
    is_deepspeed_tag,
    orbax_metadata_problem,
    trainer_problem,
)
from elastic.core.checkpoints.formats import (
    MAX_HEAD_BYTES,
    TAIL_BYTES,
    FileFacts,
    head_bytes_needed,
    lightning_global_step,
    structure_problem,
)
from elastic.core.checkpoints.names import (
    CHECKPOINT_EXTENSIONS,
    LIGHTNING_LAST,
    StepName,
    is_temporary,
    parse_name,
)

__all__ = [
    "COMMIT_MARKERS",
    "TRANSIENT_ERRNOS",
    "Checkpoint",
    "CheckpointDirError",
    "Entry",
    "Rejection",
    "Selection",
    "choose",
    "choose_latest",
    "entry_problem",
    "find_latest",
    "is_complete",
    "is_transient",
    "newest_first",
    "parse_step",
    "scan_checkpoints",
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

# Errors a network file system (NFS, Lustre, GPFS, FUSE mounts) returns for a
# moment and then stops returning: worth a few quick retries.
TRANSIENT_ERRNOS = frozenset({errno.ESTALE, errno.EIO, errno.EAGAIN, errno.EINTR, errno.ETIMEDOUT})

_SCAN_ATTEMPTS = 4
_SCAN_WAIT_MULTIPLIER_S = 0.05
_SCAN_WAIT_MAX_S = 1.0

# Files read whole (small JSON) or head and tail (checkpoint formats) inside a trainer's directory.
_JSON_SUFFIX = ".json"


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


class CheckpointDirError(Exception):
    """The checkpoint directory exists but cannot be read; the message is one line."""

    def __init__(self, directory: Path, problem: str) -> None:
        super().__init__(f"checkpoint directory {directory}: {problem}")
        self.directory = directory
        self.problem = problem


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

    The returned path is the entry's name; :func:`scan_checkpoints` makes it absolute.
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
