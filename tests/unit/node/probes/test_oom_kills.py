"""Reading a rank's memory cgroup and its count of OOM kills (elastic/node/probes/oom_kills.py):
the /proc texts of real hosts, and the counts as real files, one kill explaining one death."""

from __future__ import annotations

from pathlib import Path

from elastic.node.probes.oom_kills import OomKills, memory_cgroup, mount_point, read_count

# A hybrid host (this CI machine's kind): memory on cgroup v1, a v2 hierarchy without it.
HYBRID_CGROUP = """\
9:name=systemd:/
4:memory:/process_api/2164f3
1:cpu:/
0::/
"""
HYBRID_MOUNTS = """\
30 25 0:26 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
33 25 0:29 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
34 25 0:30 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
"""
# A Kubernetes container on cgroup v2: the mount shows only the pod's part of the hierarchy.
POD_CGROUP = "0::/kubepods/burstable/pod1234/c0ffee\n"
POD_MOUNTS = "1200 1100 0:27 /kubepods/burstable/pod1234/c0ffee /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n"


def test_on_a_hybrid_host_the_v1_memory_line_and_mount_are_read() -> None:
    assert ("/process_api/2164f3", "/") == memory_cgroup(HYBRID_CGROUP)
    assert ("/", "/sys/fs/cgroup/memory") == mount_point(HYBRID_MOUNTS, v1=True)
    assert ("/", "/sys/fs/cgroup/unified") == mount_point(HYBRID_MOUNTS, v1=False)


def test_in_a_pod_the_v2_path_is_read_under_the_mounts_own_root() -> None:
    assert (None, "/kubepods/burstable/pod1234/c0ffee") == memory_cgroup(POD_CGROUP)
    assert ("/kubepods/burstable/pod1234/c0ffee", "/sys/fs/cgroup") == mount_point(POD_MOUNTS, v1=False)
    assert mount_point(POD_MOUNTS, v1=True) is None


def test_the_count_is_read_from_either_file_and_nothing_else_is_a_count(tmp_path: Path) -> None:
    v2 = tmp_path / "memory.events"
    v2.write_text("low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n")
    v1 = tmp_path / "memory.oom_control"
    v1.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    assert (2, 3) == (read_count(str(v2)), read_count(str(v1)))
    assert read_count(str(tmp_path / "missing")) is None


def _host(tmp_path: Path, pids: list[int]) -> tuple[Path, Path]:
    """A /proc with ``pids`` in one v2 cgroup whose leaf has no memory controller, and that
    cgroup's parent with a ``memory.events``: the layout of the spawner's own leaf."""
    proc, cgroups = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(f"30 25 0:26 / {cgroups} rw - cgroup2 cgroup2 rw\n")
    for pid in pids:
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "cgroup").write_text("0::/job/elastic-spawner-1\n")
    (cgroups / "job" / "elastic-spawner-1").mkdir(parents=True)
    events = cgroups / "job" / "memory.events"
    events.write_text("oom 0\noom_kill 0\n")
    return proc, events


def test_one_oom_kill_explains_one_sigkill_and_not_the_peer_killed_after_it(tmp_path: Path) -> None:
    """Two ranks in one cgroup; the kernel kills one (the count goes 0 → 1): the first SIGKILL
    reported is explained, the peer the launcher SIGKILLs next is not."""
    proc, events = _host(tmp_path, [101, 102])
    kills = OomKills(str(proc))
    first, second = kills.watch(101), kills.watch(102)
    assert first is not None and second is not None and ("/job", 0) == (first.cgroup, first.at_start)

    events.write_text("oom 1\noom_kill 1\n")

    assert "the kernel's OOM killer ended it (memory cgroup /job counted 1 OOM kill while it ran)" == kills.explain(first)
    assert kills.explain(second) is None


def test_kills_before_a_rank_started_explain_none_of_its_deaths(tmp_path: Path) -> None:
    proc, events = _host(tmp_path, [201])
    events.write_text("oom_kill 4\n")
    kills = OomKills(str(proc))
    rank = kills.watch(201)
    assert rank is not None and 4 == rank.at_start
    assert kills.explain(rank) is None


def test_a_process_without_a_memory_cgroup_is_not_watched(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text("")
    (proc / "7").mkdir()
    (proc / "7" / "cgroup").write_text("0::/\n")
    assert OomKills(str(proc)).watch(7) is None
    assert OomKills(str(proc)).watch(8) is None  # gone already
