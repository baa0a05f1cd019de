"""A cgroup v2 leaf for one spawner's ranks: detected, entered before exec, killed whole.

Used by :mod:`elastic.node.spawner.process` where the host allows it (a writable cgroup2
hierarchy with ``cgroup.kill``, Linux 5.14+): ``cgroup.kill`` ends every
process the ranks started, wherever it moved in the process tree, without a
pid to race on. Standard library only, like the spawner.
"""

from __future__ import annotations

import os
import time

__all__ = ["Cgroup"]

_CGROUP_PREFIX = "elastic-spawner-"
_STALE_WAIT_S = 1.0  # for a dead spawner's cgroup to empty once killed


class Cgroup:
    """A cgroup v2 leaf of our own for the ranks, where this host lets us make one."""

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def create(cls) -> Cgroup | None:
        """Make ``elastic-spawner-<pid namespace>-<pid>`` beside ourselves; None where not allowed.

        Detected, not assumed: a cgroup2 mount, our own cgroup in it, a writable
        directory with ``cgroup.kill`` (Linux 5.14+), and a probe child that
        really can move itself in. Leaves of spawners that died without
        removing theirs (SIGKILL) are emptied and removed first.
        """
        mount = _cgroup2_mount()
        own = _own_cgroup()
        if mount is None or own is None:
            return None
        parent = os.path.join(mount, own.lstrip("/"))
        prefix = f"{_CGROUP_PREFIX}{_pid_namespace()}-"
        _remove_stale(parent, prefix)
        path = os.path.join(parent, f"{prefix}{os.getpid()}")
        try:
            os.mkdir(path, 0o755)
        except OSError:
            return None
        cgroup = cls(path)
        if not os.path.exists(os.path.join(path, "cgroup.kill")) or not cgroup._probe():
            cgroup.remove()
            return None
        return cgroup

    def _probe(self) -> bool:
        pid = os.fork()
        if pid == 0:
            try:
                os._exit(0 if self.enter() else 1)
            finally:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status) == 0

    def enter(self, pid: int = 0) -> bool:
        """Move a process in: the calling one (a rank does this before its exec), or ``pid``
        (a warm interpreter, at its launch)."""
        try:
            fd = os.open(os.path.join(self.path, "cgroup.procs"), os.O_WRONLY)
            try:
                os.write(fd, str(pid).encode())
            finally:
                os.close(fd)
        except OSError:
            return False
        return True

    def kill(self) -> None:
        try:
            fd = os.open(os.path.join(self.path, "cgroup.kill"), os.O_WRONLY)
            try:
                os.write(fd, b"1")
            finally:
                os.close(fd)
        except OSError:
            pass

    def wait_empty(self, deadline_at: float) -> bool:
        """Wait (bounded) until no process is left in it: ``populated 0`` in ``cgroup.events``."""
        while True:
            try:
                with open(os.path.join(self.path, "cgroup.events")) as events:
                    if "populated 0" in events.read():
                        return True
            except OSError:
                return True  # gone already
            if time.monotonic() >= deadline_at:
                return False
            time.sleep(0.01)

    def remove(self) -> None:
        try:
            os.rmdir(self.path)
        except OSError:
            pass


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _is_spawner(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            # The spawner's mark, not its module path: spawners of every elastic
            # version on this host carry it (link._BOOT), so no version
            # takes another's live leaf for a stale one.
            return b"elastic.spawner" in cmdline.read()
    except OSError:
        return False


def _remove_stale(parent: str, prefix: str) -> None:
    """Kill what is left in the leaves of dead spawners of our pid namespace, then remove them.

    Only our pid namespace: there a pid tells for sure whether its spawner
    lives (a leaf of a container beside ours names a pid we cannot see).
    What such a leaf still holds are orphans nobody supervises any more.
    """
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        pid = name[len(prefix) :]
        if name.startswith(prefix) and pid.isdigit() and not _is_spawner(int(pid)):
            stale = Cgroup(os.path.join(parent, name))
            stale.kill()
            stale.wait_empty(time.monotonic() + _STALE_WAIT_S)
            stale.remove()  # EBUSY if still populated: the next spawner tries again


def _cgroup2_mount() -> str | None:
    try:
        with open("/proc/self/mountinfo") as mountinfo:
            for line in mountinfo:
                fields, _, rest = line.partition(" - ")
                if rest.split(" ", 1)[0] == "cgroup2":
                    return fields.split()[4]
    except OSError:
        pass
    return None


def _own_cgroup() -> str | None:
    try:
        with open("/proc/self/cgroup") as cgroups:
            for line in cgroups:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None
