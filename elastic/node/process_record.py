"""A record of processes a run keeps outside its driver's own (the embedded Ray's), and stopping
those that an earlier driver of the run left alive: by pid, and only while each pid is still the
process recorded, told by its start time.

The record is a JSON file in the run directory, rewritten whole (by rename) as processes come and
go: ``{"fields": {...}, "processes": [{"pid", "started", "name", "boot"}, ...]}``. ``started`` is
the process's start time in clock ticks since boot (``/proc/PID/stat``, field 22): with the pid, it
names one process for one boot of the machine, where a pid alone may be reused. ``boot`` is that
boot's id (``/proc/sys/kernel/random/boot_id``): after a reboot, or read on another machine (a
requeued job's driver on another node of a shared file system), pids and ticks start over and may
name anything; a process recorded under another boot id is gone, never signalled. A record
written before the boot id was kept (no ``boot``) is judged by pid and start time alone, as then.

Stopping uses a pidfd where the kernel has them (Linux 5.3+): the process is pinned first, its start
time checked next, and the signal goes to the pinned process, so no reused pid can be hit between
the check and the kill.
"""

from __future__ import annotations

import json
import os
import signal
import functools
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from elastic.core.redact import redact_argv
from elastic.node.spawner import keeper_socket

__all__ = [
    "RecordedProcess", "boot_id", "identify", "process_tree", "read_record", "signal_recorded", "still_recorded",
    "stop_recorded", "write_record",
]

_STOP_WAIT_S = 10.0
_POLL_S = 0.05


@dataclass(frozen=True)
class RecordedProcess:
    """One process as recorded: its pid, its start time (clock ticks since boot), what it runs,
    and the id of the boot it ran in ("": a record from before boot ids were kept)."""

    pid: int
    started: int
    name: str
    boot: str = ""

    def is_now(self, now: RecordedProcess | None) -> bool:
        """Whether ``now`` (what :func:`identify` finds at the pid today) is this very process."""
        return (now is not None and now.started == self.started
                and (not self.boot or self.boot == now.boot))


@functools.cache
def boot_id() -> str:
    """This boot of the machine's id (a random UUID the kernel makes at boot), read once; "" where unread."""
    return keeper_socket.boot_id()


def _stat(pid: int) -> tuple[str, int, int] | None:
    """``(state, ppid, start ticks)`` of ``pid``; None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return None
    fields = text[text.rfind(b")") + 2 :].split()  # after the name, which may hold anything
    return fields[0].decode(), int(fields[1]), int(fields[19])


def _name(pid: int) -> str:
    """What ``pid`` runs, as ``ps`` shows it (a retitled Ray worker's ``ray::IDLE`` included),
    secret-looking arguments redacted: the journal shows it."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            words = [w for w in cmdline.read().split(b"\0") if w]
    except OSError:
        words = []
    if not words:
        try:
            with open(f"/proc/{pid}/comm", "rb") as comm:
                return comm.read().decode(errors="replace").strip()
        except OSError:
            return "?"
    return " ".join(redact_argv([w.decode(errors="replace") for w in words]))[:120]


def identify(pid: int) -> RecordedProcess | None:
    """``pid`` as a record would hold it; None when it is gone (or a zombie: dead already)."""
    stat = _stat(pid)
    if stat is None or stat[0] in ("Z", "X"):
        return None
    return RecordedProcess(pid, stat[2], _name(pid), boot_id())


def _children(pid: int) -> list[int]:
    """The children of ``pid``, from each of its threads' list (a kernel without those lists:
    from every process's parent)."""
    if not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"):
        return [p for p in _all_pids() if (stat := _stat(p)) is not None and stat[1] == pid]
    children: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return children
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as listing:
                children += [int(child) for child in listing.read().split()]
        except OSError:
            continue
    return children


def _all_pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def process_tree(root: int) -> list[RecordedProcess]:
    """``root`` and every live descendant of it, parents before children."""
    found: list[RecordedProcess] = []
    queue, visited = [root], set()
    while queue:
        pid = queue.pop(0)
        if pid in visited:
            continue
        visited.add(pid)
        if (process := identify(pid)) is not None:
            found.append(process)
            queue += _children(pid)
    return found


def write_record(path: Path, fields: Mapping[str, Any], processes: Iterable[RecordedProcess]) -> None:
    """Replace the record at ``path`` whole (a temporary file beside it, then a rename); 0600."""
    data = {"fields": dict(fields), "processes": [asdict(p) for p in processes]}
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview((json.dumps(data, indent=1) + "\n").encode())
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    os.replace(temporary, path)


def read_record(path: Path) -> tuple[dict[str, Any], list[RecordedProcess]]:
    """The fields and processes of the record at ``path``; empty when there is none, or none readable
    (a record cut off by a crash names no process anyone could check)."""
    try:
        data = json.loads(path.read_text())
        fields = dict(data.get("fields") or {})
        processes = [
            RecordedProcess(int(p["pid"]), int(p["started"]), str(p.get("name", "?")), str(p.get("boot") or ""))
            for p in data.get("processes") or ()
        ]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}, []
    return fields, processes


def _pin(process: RecordedProcess) -> int | None:
    """``process`` pinned, if it is still the one recorded: a pidfd, or -1 where the kernel (or
    Python, or the open-file limit) has none for it; None when it is gone or another process
    holds its pid now."""
    if process.boot and process.boot != boot_id():  # recorded in another boot, or on another machine
        return None
    try:
        fd = os.pidfd_open(process.pid)
    except ProcessLookupError:
        return None
    except (AttributeError, OSError):
        fd = -1
    now = identify(process.pid)  # checked after the pin: the pidfd is this very process
    if not process.is_now(now):
        if fd >= 0:
            os.close(fd)
        return None
    return fd


def _kill(process: RecordedProcess, fd: int) -> None:
    try:
        if fd >= 0:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        elif _still(process):  # not pinned: checked again right before the signal
            os.kill(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # ended meanwhile (its parent's death took it along)


def stop_recorded(path: Path, timeout_s: float = _STOP_WAIT_S) -> tuple[RecordedProcess, ...]:
    """SIGKILL every process of the record at ``path`` that is still the process recorded, wait
    (bounded) until each is gone, and return those, as recorded.

    Called by a driver that took the run over: the record's writer is dead, and so is what it
    recorded, or should be. Every live one is found (and pinned) before any is signalled, so one
    that dies of another's death (a parent-death signal) is still said stopped; children are
    signalled before their parents. The record is left in place: its processes are checked,
    never trusted.
    """
    _, processes = read_record(path)
    pinned = [(p, fd) for p in processes if (fd := _pin(p)) is not None]
    try:
        for process, fd in reversed(pinned):  # the record lists parents first
            _kill(process, fd)
    finally:
        for _, fd in pinned:
            if fd >= 0:
                os.close(fd)
    stopped = tuple(p for p, _ in pinned)
    deadline_at = time.monotonic() + timeout_s
    while time.monotonic() < deadline_at:
        if not any(_still(p) for p in stopped):
            break
        time.sleep(_POLL_S)
    return stopped


def signal_recorded(process: RecordedProcess, signum: int) -> bool:
    """Send ``signum`` to ``process`` if it is still the process recorded (pinned by a pidfd
    where the kernel has them, as :func:`stop_recorded` does); whether it was."""
    fd = _pin(process)
    if fd is None:
        return False
    try:
        if fd >= 0:
            signal.pidfd_send_signal(fd, signum)
        elif _still(process):
            os.kill(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    finally:
        if fd >= 0:
            os.close(fd)
    return True


def still_recorded(process: RecordedProcess) -> bool:
    """Whether ``process`` is alive and still the process recorded."""
    return _still(process)


def _still(process: RecordedProcess) -> bool:
    return process.is_now(identify(process.pid))
