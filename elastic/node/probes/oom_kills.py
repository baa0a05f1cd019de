"""The kernel's OOM kills in a rank's memory cgroup, read from the cgroup's own counter.

A rank the kernel's OOM killer ends dies of SIGKILL without a word, like a rank that a
person or a scheduler SIGKILLed. What tells the two apart is the count of OOM kills its
memory cgroup keeps: ``oom_kill`` in cgroup v2's ``memory.events`` (of the cgroup and
everything below it), and in cgroup v1's ``memory.oom_control`` (Linux 4.13+). Both count
a kill by the cgroup's own limit and one by the host running out of memory alike. That is
the cgroup of a Slurm job step, of a Kubernetes pod, or of the host's session.

:class:`OomKills` reads the count for each rank when it starts, and again when one dies of
SIGKILL: each kill the count rose by since explains one such death, in the order they are
reported, so a peer the launcher SIGKILLs after the killed rank is not counted again.
Standard library only, like the rest of the node's probes.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

__all__ = ["OomKills", "OomWatch", "cgroup_texts", "counter_file", "inside_mount", "memory_cgroup", "mount_point", "read_count"]


@dataclass(frozen=True)
class OomWatch:
    """One rank's memory cgroup: where its OOM kill count is, and the count when it started."""

    cgroup: str  # as /proc/<pid>/cgroup names it
    file: str
    at_start: int


class OomKills:
    """The OOM kill counts of one node's ranks, and which kills have explained a death."""

    def __init__(self, proc: str = "/proc") -> None:
        self._proc = proc
        self._explained: dict[str, int] = {}  # counter file -> the count up to which kills are explained
        self._lock = threading.Lock()

    def watch(self, pid: int) -> OomWatch | None:
        """Read ``pid``'s memory cgroup count now (as it starts); ``None`` where there is none to read."""
        found = counter_file(pid, self._proc)
        if found is None:
            return None
        cgroup, file = found
        count = read_count(file)
        if count is None:
            return None
        with self._lock:
            self._explained.setdefault(file, count)
        return OomWatch(cgroup, file, count)

    def explain(self, watch: OomWatch) -> str | None:
        """Why a rank that died of SIGKILL died, if its cgroup counted an OOM kill that no other
        death has explained since the rank started; ``None`` otherwise."""
        now = read_count(watch.file)
        if now is None:
            return None
        with self._lock:
            explained = max(self._explained.get(watch.file, now), watch.at_start)
            if now <= explained:
                return None
            self._explained[watch.file] = explained + 1
        kills = "1 OOM kill" if now - watch.at_start == 1 else f"{now - watch.at_start} OOM kills"
        return f"the kernel's OOM killer ended it (memory cgroup {watch.cgroup} counted {kills} while it ran)"


def counter_file(pid: int, proc: str = "/proc") -> tuple[str, str] | None:
    """``pid``'s memory cgroup and the file that counts its OOM kills, or ``None``.

    A host may mount the memory controller on cgroup v1 beside a v2 hierarchy without it
    (a hybrid host): v1's memory line wins. On v2 the nearest cgroup up the path with a
    ``memory.events`` is used, since a leaf of the spawner's own may lack the controller
    and a parent's count includes its children's.
    """
    texts = cgroup_texts(pid, proc)
    if texts is None:
        return None
    membership, mounts = texts
    v1, v2 = memory_cgroup(membership)
    if v1 is not None:
        mount = mount_point(mounts, v1=True)
        if mount is not None:
            file = os.path.join(inside_mount(mount, v1), "memory.oom_control")
            if os.path.exists(file):
                return v1, file
    if v2 is not None:
        mount = mount_point(mounts, v1=False)
        if mount is not None:
            path = v2
            while True:
                file = os.path.join(inside_mount(mount, path), "memory.events")
                if os.path.exists(file):
                    return path, file
                if path in ("", "/"):
                    return None
                path = os.path.dirname(path)
    return None


def cgroup_texts(pid: int | str, proc: str = "/proc") -> tuple[str, str] | None:
    """``pid``'s ``/proc/<pid>/cgroup`` text and this process's ``mountinfo`` (where the cgroup files
    are opened from), or None when either cannot be read."""
    try:
        with open(os.path.join(proc, str(pid), "cgroup")) as lines:
            membership = lines.read()
        with open(os.path.join(proc, "self", "mountinfo")) as lines:
            mounts = lines.read()
    except OSError:
        return None
    return membership, mounts


def memory_cgroup(membership: str) -> tuple[str | None, str | None]:
    """From a ``/proc/<pid>/cgroup`` text: the path in cgroup v1's memory hierarchy, and in v2's."""
    v1 = v2 = None
    for line in membership.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v1, v2


def mount_point(mountinfo: str, *, v1: bool) -> tuple[str, str] | None:
    """From a ``/proc/<pid>/mountinfo`` text: (the root of the hierarchy the mount shows, where it
    is mounted) for v1's memory controller, or for cgroup v2."""
    for line in mountinfo.splitlines():
        fields, _, after = line.partition(" - ")
        parts, tail = fields.split(), after.split()
        if len(parts) < 5 or len(tail) < 3:
            continue
        if v1 and tail[0] == "cgroup" and "memory" in tail[2].split(","):
            return parts[3], parts[4]
        if not v1 and tail[0] == "cgroup2":
            return parts[3], parts[4]
    return None


def read_count(file: str) -> int | None:
    """The ``oom_kill`` count in a ``memory.events`` or ``memory.oom_control`` file, or ``None``."""
    try:
        with open(file) as lines:
            for line in lines:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        return None
    return None


def inside_mount(mount: tuple[str, str], path: str) -> str:
    """Where the cgroup ``path`` is on disk under a mount that shows the hierarchy from its ``root``
    (a container's mount may show only its own part)."""
    root, point = mount
    relative = path
    if root != "/" and (path == root or path.startswith(root + "/")):
        relative = path[len(root):]
    return os.path.join(point, relative.lstrip("/"))
