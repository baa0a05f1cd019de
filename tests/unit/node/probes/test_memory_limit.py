"""The memory a process may use (elastic/node/probes/memory_limit.py): the host's /proc/meminfo,
lowered to the limit of its memory cgroup and those above it, on cgroup v2 and v1, as files."""

from __future__ import annotations

from pathlib import Path

from elastic.node.probes.memory_limit import memory_kb

GIB = 1 << 30
MEMINFO = "MemTotal:       33554432 kB\nMemFree:        1000 kB\nMemAvailable:   30000000 kB\n"  # 32 GiB


def _proc(tmp_path: Path, membership: str, mounts: str) -> Path:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(MEMINFO)
    (proc / "self" / "cgroup").write_text(membership)
    (proc / "self" / "mountinfo").write_text(mounts)
    return proc


def _cgroup(folder: Path, files: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)


def test_a_slurm_job_on_cgroup_v2_is_sized_by_its_memory_max_not_the_hosts(tmp_path: Path) -> None:
    """The step's own leaf sets none ("max"); the job above it has 4 GiB, 1 GiB of it in use of which
    half is inactive page cache (the kernel takes it back before it kills): 3.5 GiB is left."""
    root = tmp_path / "cgroup"
    proc = _proc(tmp_path, "0::/system.slice/slurmstepd.scope/job_7/step_0\n",
                 f"30 25 0:26 / {root} rw - cgroup2 cgroup2 rw\n")
    _cgroup(root / "system.slice/slurmstepd.scope/job_7", {
        "memory.max": f"{4 * GIB}\n", "memory.current": f"{GIB}\n",
        "memory.stat": f"anon 1\nfile 2\ninactive_file {GIB // 2}\nactive_file 0\n",
    })
    _cgroup(root / "system.slice/slurmstepd.scope/job_7/step_0", {"memory.max": "max\n", "memory.current": "0\n"})

    assert (4 * GIB // 1024, 7 * GIB // 2 // 1024) == memory_kb(proc=str(proc))


def test_the_tightest_limit_up_the_path_wins_and_room_is_the_least_left_under_any(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    proc = _proc(tmp_path, "0::/a/b\n", f"30 25 0:26 / {root} rw - cgroup2 cgroup2 rw\n")
    _cgroup(root / "a", {"memory.max": f"{8 * GIB}", "memory.current": f"{7 * GIB}"})  # 1 GiB left
    _cgroup(root / "a" / "b", {"memory.max": f"{2 * GIB}", "memory.current": "0"})

    assert (2 * GIB // 1024, GIB // 1024) == memory_kb(proc=str(proc))


def test_a_pod_whose_mount_shows_only_its_own_cgroup_reads_the_containers_limit(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    proc = _proc(tmp_path, "0::/kubepods/burstable/pod1234/c0ffee\n",
                 f"1200 1100 0:27 /kubepods/burstable/pod1234/c0ffee {root} ro - cgroup2 cgroup2 rw\n")
    _cgroup(root, {"memory.max": f"{GIB}", "memory.current": f"{GIB // 4}"})

    assert (GIB // 1024, 3 * GIB // 4 // 1024) == memory_kb(proc=str(proc))


def test_on_cgroup_v1_the_memory_controllers_limit_is_read_and_its_no_limit_is_the_hosts(tmp_path: Path) -> None:
    """A hybrid host: memory on v1 (its "no limit" is a number past any host's memory) beside v2."""
    v1, v2 = tmp_path / "memory", tmp_path / "unified"
    mounts = (f"30 25 0:26 / {v2} rw - cgroup2 cgroup2 rw\n"
              f"33 25 0:29 / {v1} rw,relatime - cgroup cgroup rw,memory\n")
    proc = _proc(tmp_path, "4:memory:/slurm/uid_1/job_9\n0::/\n", mounts)
    _cgroup(v1 / "slurm/uid_1/job_9", {
        "memory.limit_in_bytes": f"{6 * GIB}\n", "memory.usage_in_bytes": f"{2 * GIB}\n",
        "memory.stat": f"cache 5\ninactive_file 9\ntotal_inactive_file {GIB}\n",
    })
    _cgroup(v1 / "slurm", {"memory.limit_in_bytes": "9223372036854771712\n", "memory.usage_in_bytes": "0\n"})
    _cgroup(v2, {"memory.max": f"{GIB}", "memory.current": "0"})  # v2 holds no memory controller here

    assert (6 * GIB // 1024, 5 * GIB // 1024) == memory_kb(proc=str(proc))


def test_without_a_cgroup_limit_the_hosts_meminfo_stands(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    proc = _proc(tmp_path, "0::/user.slice\n", f"30 25 0:26 / {root} rw - cgroup2 cgroup2 rw\n")
    _cgroup(root / "user.slice", {"memory.max": "max", "memory.current": f"{GIB}"})

    assert (33554432, 30000000) == memory_kb(proc=str(proc))
    (proc / "self" / "cgroup").unlink()
    assert (33554432, 30000000) == memory_kb(proc=str(proc))
    (proc / "meminfo").unlink()
    assert (0, 0) == memory_kb(proc=str(proc))
