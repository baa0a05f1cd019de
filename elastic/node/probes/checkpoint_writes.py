"""Whether a checkpoint write is under way on this node, read when a failure's drain stops its survivors.

Two signs, read from files (Linux): the latest write under each rank's checkpoint
directory (``ELASTIC_CHECKPOINT_DIR``; :func:`elastic.node.watchers.steps.latest_write`,
the scan the stall detector and the exit-hang check use), and a file under it held open
for writing by a process of a rank still running (its ``/proc/PID/fd`` and
``fdinfo``), which a save shows for as long as it writes a file, however slowly, and
whatever the clock of the storage it writes to. The ranks' processes are those of
their sessions: each rank leads one, and its children (a checkpoint writer in a
process of its own, a shell's child) stay in it. What the signs mean is
:class:`elastic.core.failures.CheckpointWrite`'s to say.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from dataclasses import replace

from elastic.core.failures import CheckpointWrite, Collateral
from elastic.node.supervisor import RunningWorker
from elastic.node.watchers.steps import latest_write
from elastic.worker.checkpoint import CHECKPOINT_DIR_VAR

__all__ = ["checkpoint_writes", "open_for_write", "session_processes"]

_FDS_LOOKED_AT = 4096  # per process: a rank with more (sockets, say) is judged on the directory's time
_ACCESS_MODE = 0o3  # O_ACCMODE: O_RDONLY 0, O_WRONLY 1, O_RDWR 2


def session_processes(sessions: Collection[int]) -> list[int]:
    """The pids of every process in one of ``sessions`` (session ids), read from ``/proc``."""
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return list(sessions)
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                # pid (comm) state ppid pgrp session ...: comm may hold spaces and parentheses.
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:
            continue  # gone since the listing
        if len(fields) > 3 and int(fields[3]) in sessions:
            found.append(int(entry))
    return found


def open_for_write(pids: Sequence[int], directories: Collection[str]) -> bool:
    """Whether one of ``pids`` holds a file under one of ``directories`` open for writing."""
    roots = tuple(os.path.join(os.path.realpath(d), "") for d in directories)
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")[:_FDS_LOOKED_AT]
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if not target.startswith(roots):
                continue
            try:
                with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as info:
                    flags = next((line.split()[1] for line in info if line.startswith("flags:")), "0")
            except (OSError, IndexError):
                continue
            if int(flags, 8) & _ACCESS_MODE:
                return True
    return False


def checkpoint_writes(workers: Sequence[RunningWorker], *, wall: float) -> CheckpointWrite:
    """What this node shows of a checkpoint write now, for the ranks still running in ``workers``.

    ``wall``: this node's ``time.time()``, the clock files are stamped in (a write stamped
    later, by a file server's clock ahead of it, reads as just now).
    """
    directories = sorted({d for w in workers if (d := w.spec.env.get(CHECKPOINT_DIR_VAR, ""))})
    if not directories:
        return CheckpointWrite(directory=False)
    stamps = [t for t in (latest_write(d) for d in directories) if t is not None]
    seen = CheckpointWrite(directory=True, written_s=max(0.0, wall - max(stamps)) if stamps else None)
    if seen.collateral is not Collateral.AT_ONCE:
        return seen  # written just now: no need to look at the ranks' files
    writing = open_for_write(session_processes({w.pid for w in workers}), directories)
    return replace(seen, open_for_write=writing)
