"""Stack dumps of live ranks with py-spy, bounded in time: the one place that runs it.

py-spy is optional (the ``elastic-launch[debug]`` extra). Without it, the dump file
and the failure message say so plainly instead of failing. Dumps take native
frames (``py-spy dump --native``: a destructor deadlocked at exit, a wait inside
gloo or NCCL) where py-spy can; where it cannot (no permission to unwind, no
unwinding support, out of time) the Python frames are dumped instead and the
dump says so. The frame that explains a hang is picked from the dump by
:func:`elastic.core.training.stack_frames.explain_hang`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from elastic.core.training.stack_frames import HangFrame, explain_hang, parse_dump
from elastic.node.private_dirs import make_private_dirs

__all__ = [
    "DUMP_TIMEOUT_S",
    "NATIVE_UNAVAILABLE",
    "dump_and_explain",
    "dump_before_kill",
    "dump_ranks",
    "find_ranks",
    "PY_SPY_MISSING",
    "StackTarget",
    "dump_group",
    "find_py_spy",
    "group_members",
    "write_stack_dumps",
]

PY_SPY_MISSING = "py-spy not installed: pip install 'elastic-launch[debug]'"
# One rank's dump; a rank whose process group has several Python processes gets
# this much for all of them together. A native dump takes longer (symbols of
# large libraries: 0.2-0.7 s for a torch rank on CPU against 0.03 s without); it may
# use all but _PLAIN_RESERVE_S of a process's time, kept for the Python-only dump
# that replaces it when it fails.
DUMP_TIMEOUT_S = 10.0
_PLAIN_RESERVE_S = 2.0
# Heads a dump taken without native frames because the native one failed.
NATIVE_UNAVAILABLE = "# native frames unavailable"
_MAX_MEMBERS = 32
# Ranks whose stuck frame a hang's note names; the rest are in their dumps' headers.
_EXPLAINED_RANKS = 3
_MAX_PARALLEL = 16


@dataclass(frozen=True)
class StackTarget:
    """A rank to dump: its process (the leader of its own process group) and its file."""

    rank: int
    pid: int
    path: str


def find_py_spy() -> str | None:
    """py-spy beside this Python (its venv, also inside a Ray actor), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def group_members(pgid: int) -> list[int]:
    """The live processes of process group ``pgid``, its leader first (from /proc)."""
    members: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return [pgid]
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                data = stat.read()
        except OSError:
            continue  # gone meanwhile
        # The command name sits in parentheses and may hold anything: read after the last ')'.
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    members.sort(key=lambda pid: (pid != pgid, pid))
    return members[:_MAX_MEMBERS] or [pgid]


def _py_spy(py_spy: str, pid: int, timeout_s: float, *, native: bool) -> tuple[str | None, str]:
    """py-spy's dump of ``pid`` and ``""``, or None and why there is none."""
    argv = [py_spy, "dump", "--pid", str(pid)] + (["--native"] if native else [])
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=max(timeout_s, 0.1),
            check=False,
        )
    except subprocess.TimeoutExpired:  # run() has killed the py-spy it started
        return None, f"timed out after {timeout_s:.1f}s"
    except OSError as error:
        return None, f"could not run: {error}"
    if done.returncode == 0:
        return done.stdout.decode("utf-8", errors="replace"), ""
    # py-spy's error is its first line; a Rust backtrace follows.
    error_lines = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
    return None, f"failed: {error_lines[0] if error_lines else f'exit status {done.returncode}'}"


def _dump_one(py_spy: str, pid: int, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> str:
    """``pid``'s stacks with native frames; failing that, its Python frames, saying why."""
    deadline_at = clock() + timeout_s
    native_s = timeout_s - min(_PLAIN_RESERVE_S, timeout_s / 2)
    text, why = _py_spy(py_spy, pid, native_s, native=True)
    if text is not None:
        return text
    text, plain_why = _py_spy(py_spy, pid, deadline_at - clock(), native=False)
    if text is None:
        return f"Process {pid}: py-spy dump {plain_why}\n"
    return f"{NATIVE_UNAVAILABLE} (py-spy dump --native {why}): Python frames only\n{text}"


def dump_group(
    py_spy: str, pgid: int, timeout_s: float = DUMP_TIMEOUT_S, clock: Callable[[], float] = time.monotonic
) -> str:
    """py-spy's dump of every process in the group (a wrapper shell's Python child too),
    with native frames where py-spy can take them, all within ``timeout_s`` on
    ``clock`` (monotonic seconds)."""
    deadline_at = clock() + timeout_s
    parts = []
    for pid in group_members(pgid):
        remaining_s = deadline_at - clock()
        if remaining_s <= 0:
            parts.append(f"Process {pid}: not dumped, out of time\n")
            continue
        parts.append(_dump_one(py_spy, pid, remaining_s, clock))
    return "\n".join(parts)


def _write(path: str, text: str) -> None:
    make_private_dirs(Path(path).parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with open(fd, "w", encoding="utf-8") as out:
        out.write(text)


def dump_ranks(
    rank_pids: Mapping[int, int], timeout_s: float = DUMP_TIMEOUT_S, clock: Callable[[], float] = time.monotonic
) -> dict[int, str]:
    """Each rank's stacks now (all its process group), dumped in parallel, headed by where
    its main thread is; for ``elastic stack``."""
    py_spy = find_py_spy()

    def dump(pid: int) -> str:
        if py_spy is None:
            return PY_SPY_MISSING + "\n"
        text = dump_group(py_spy, pid, timeout_s, clock)
        explained = explain_hang(parse_dump(text))
        return text if explained is None else f"# main thread {explained.describe()}\n{text}"

    if not rank_pids:
        return {}
    with ThreadPoolExecutor(max_workers=min(len(rank_pids), _MAX_PARALLEL)) as pool:
        texts = list(pool.map(dump, rank_pids.values()))
    return dict(zip(rank_pids, texts))


def find_ranks(run_id: str, attempt: int) -> dict[int, int]:
    """Rank -> pid of a run's live ranks on this machine, found by their environment in /proc.

    A rank leads its own process group and carries ``ELASTIC_RUN_ID`` and
    ``ELASTIC_ATTEMPT``; its children share the variables but not the leadership.
    """
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            if os.getpgid(pid) != pid:
                continue
            raw = (entry / "environ").read_bytes()
        except (OSError, ProcessLookupError):
            continue
        env = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
        if env.get("ELASTIC_RUN_ID") == run_id and env.get("ELASTIC_ATTEMPT") == str(attempt):
            try:
                found[int(env["RANK"])] = pid
            except (KeyError, ValueError):
                continue
    return dict(sorted(found.items()))


def dump_before_kill(
    targets: Sequence[StackTarget],
    *,
    header: str,
    clock: Callable[[], float] = time.monotonic,
    found: str = "stacks in",
    explain: Collection[int] | None = None,
) -> str:
    """Dump the targets' stacks, then say what a killed rank's reason should add: why
    there are no stacks, or ``f"{found} <directory>"`` where they are and, for each rank
    of ``explain`` (default: every target), the frame its main thread is stuck in."""
    return dump_and_explain(targets, header=header, clock=clock, found=found, explain=explain)[0]


def dump_and_explain(
    targets: Sequence[StackTarget],
    *,
    header: str,
    clock: Callable[[], float] = time.monotonic,
    found: str = "stacks in",
    explain: Collection[int] | None = None,
) -> tuple[str, dict[int, HangFrame | None]]:
    """:func:`dump_before_kill`'s note, and each dumped rank's frame that explains its hang
    (None: its dump could not be read; no rank at all without py-spy)."""
    py_spy = find_py_spy()
    if py_spy is None:
        write_stack_dumps(targets, header=header, py_spy=None, clock=clock)
        return PY_SPY_MISSING, {}
    if not targets:
        return "no stack dump asked for", {}
    frames = _dump_targets(targets, header, py_spy, DUMP_TIMEOUT_S, clock)
    ranks = sorted(frames if explain is None else explain)
    said = [f"rank {rank}'s main thread {hang.describe()}" for rank in ranks if (hang := frames.get(rank))]
    if len(said) > _EXPLAINED_RANKS:  # the note goes into every named rank's message
        more = len(said) - _EXPLAINED_RANKS
        said[_EXPLAINED_RANKS:] = [f"{more} more rank{'s' if more > 1 else ''}: see the dumps"]
    return "; ".join([f"{found} {Path(targets[0].path).parent}", *said]), frames


def write_stack_dumps(
    targets: Sequence[StackTarget],
    *,
    header: str,
    py_spy: str | None,
    timeout_s: float = DUMP_TIMEOUT_S,
    clock: Callable[[], float] = time.monotonic,
) -> str | None:
    """Dump every target at once into its file; ``None``, or why there are no stacks.

    Each file starts with ``header`` (why the dump was taken) and the frame its
    main thread is stuck in. ``py_spy`` is the executable (:func:`find_py_spy`);
    when it is ``None`` the files say py-spy is not installed and so does the
    returned :data:`PY_SPY_MISSING`. Bounded: every py-spy call is killed after
    ``timeout_s`` on ``clock``.
    """
    _dump_targets(targets, header, py_spy, timeout_s, clock)
    return PY_SPY_MISSING if py_spy is None else None


def _dump_targets(
    targets: Sequence[StackTarget],
    header: str,
    py_spy: str | None,
    timeout_s: float,
    clock: Callable[[], float],
) -> dict[int, HangFrame | None]:
    """Dump every target at once into its file; each rank's frame that explains its hang."""

    def dump(target: StackTarget) -> HangFrame | None:
        title = f"# rank {target.rank}, pid {target.pid}: {header}\n"
        body = PY_SPY_MISSING + "\n" if py_spy is None else dump_group(py_spy, target.pid, timeout_s, clock)
        explained = explain_hang(parse_dump(body))
        if explained is not None:
            title += f"# rank {target.rank}'s main thread {explained.describe()}\n"
        try:
            _write(target.path, title + "\n" + body)
        except OSError:
            pass  # a dump that cannot be written must not stop the restart
        return explained

    if not targets:
        return {}
    with ThreadPoolExecutor(max_workers=min(len(targets), _MAX_PARALLEL)) as pool:
        explained = list(pool.map(dump, targets))
    return {target.rank: hang for target, hang in zip(targets, explained)}
