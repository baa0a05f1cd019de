"""The memory a process may use, and what is left of it: the host's, lowered to its memory cgroup's limit.

A Slurm job (``--mem``), a Kubernetes pod (``resources.limits.memory``) or a systemd
slice runs its processes in a memory cgroup whose limit is far below the host's
``/proc/meminfo``; past it, the kernel's OOM killer ends a process of the cgroup, a
training rank as likely as anything else. So what elastic spends by choice (the warm
interpreters of ``--prewarm-memory``) is sized from the smaller of the two: the host's
``MemTotal`` and ``MemAvailable``, and for each cgroup from the process's own up to
the mount's root that sets a limit (v2 ``memory.max``; v1 ``memory.limit_in_bytes``,
whose "no limit" is a number above any host's memory), the limit and the room under
it: the limit less what the cgroup uses, its inactive page cache (which the kernel
reclaims before it kills) not counted, as the kubelet counts a pod's working set.
The cgroup is found as :mod:`elastic.node.probes.oom_kills` finds it.
Standard library only, like the rest of the node's probes (the spawner reads it).
"""

from __future__ import annotations

import os

from elastic.node.probes.oom_kills import cgroup_texts, inside_mount, memory_cgroup, mount_point

__all__ = ["cgroup_limits", "memory_kb"]

# (limit, usage, inactive page cache) file names of cgroup v2, and of v1's memory controller.
_V2 = ("memory.max", "memory.current", "inactive_file")
_V1 = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")


def memory_kb(pid: int | str = "self", proc: str = "/proc") -> tuple[int, int]:
    """What process ``pid`` may use of memory, and what is available of it now, KiB: the host's
    (``/proc/meminfo``) each lowered to the tightest memory cgroup limit above it (0, 0 where
    the host's cannot be read)."""
    total_kb, available_kb = _meminfo_kb(proc)
    if not total_kb:
        return 0, 0
    for limit_kb, room_kb in cgroup_limits(pid, proc):
        total_kb, available_kb = min(total_kb, limit_kb), min(available_kb, room_kb)
    return total_kb, available_kb


def cgroup_limits(pid: int | str = "self", proc: str = "/proc") -> list[tuple[int, int]]:
    """(limit, room under it), KiB, of each memory cgroup from ``pid``'s up to its mount's root
    that sets a limit: v1's memory controller where it is mounted (a hybrid host), else v2's."""
    texts = cgroup_texts(pid, proc)
    if texts is None:
        return []
    membership, mounts = texts
    v1, v2 = memory_cgroup(membership)
    for path, v1_here, names in ((v1, True, _V1), (v2, False, _V2)):
        mount = None if path is None else mount_point(mounts, v1=v1_here)
        if path is not None and mount is not None:  # a hybrid host's v1 memory line wins, as for OOM kills
            return [limit for folder in _folders_up(mount, path) if (limit := _limit_kb(folder, names)) is not None]
    return []


def _folders_up(mount: tuple[str, str], path: str) -> list[str]:
    """The cgroup ``path``'s folder on disk and each above it, up to the mount point (a container's
    mount shows only its own part of the hierarchy: what is above is not there to read)."""
    folders = []
    point = os.path.normpath(mount[1])
    folder = os.path.normpath(inside_mount(mount, path))
    while folder.startswith(point):
        folders.append(folder)
        if folder == point:
            break
        folder = os.path.dirname(folder)
    return folders


def _limit_kb(folder: str, names: tuple[str, str, str]) -> tuple[int, int] | None:
    """(limit, room under it), KiB, of one cgroup folder; None where it sets none ("max", no file)."""
    limit_file, usage_file, inactive_key = names
    try:
        with open(os.path.join(folder, limit_file)) as text:
            limit = text.read().strip()
        if not limit.isdigit():  # v2's "max"
            return None
        with open(os.path.join(folder, usage_file)) as text:
            usage = int(text.read().strip())
    except (OSError, ValueError):
        return None
    inactive = 0
    try:
        with open(os.path.join(folder, "memory.stat")) as lines:
            for line in lines:
                key, _, value = line.partition(" ")
                if key == inactive_key:
                    inactive = int(value)
                    break
    except (OSError, ValueError):
        pass
    working_set = max(0, usage - inactive)
    return int(limit) // 1024, max(0, int(limit) - working_set) // 1024


def _meminfo_kb(proc: str) -> tuple[int, int]:
    """The host's ``MemTotal`` and ``MemAvailable``, KiB (0, 0 where unread)."""
    found = {}
    try:
        with open(os.path.join(proc, "meminfo"), "rb") as meminfo:
            for line in meminfo:
                name, _, rest = line.partition(b":")
                if name in (b"MemTotal", b"MemAvailable"):
                    found[name] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return found.get(b"MemTotal", 0), found.get(b"MemAvailable", 0)
