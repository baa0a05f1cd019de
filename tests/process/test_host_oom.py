"""A rank the kernel's OOM killer ends is ``host-oom``, read from its memory cgroup's own count of
OOM kills (elastic/node/probes/oom_kills.py): a real memory cgroup with a limit, a real rank
taking memory until the kernel kills it, and a bare SIGKILL beside it for contrast. And what
elastic spends by choice (``--prewarm-memory``) is sized from that limit, not the host's memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Finished, Launcher, script

from elastic.node.probes.oom_kills import counter_file, read_count

LIMIT = 1 << 30  # the launcher, its spawner and the idle rank take far less


def _limited_cgroup(name: str) -> Path | None:
    """A new memory cgroup under our own with a limit of LIMIT bytes, where this host allows one."""
    found = counter_file(os.getpid())
    if found is None:
        return None
    own = Path(found[1]).parent
    child = own / name
    try:
        child.mkdir()
    except OSError:
        return None
    for limit_file, value in (("memory.limit_in_bytes", str(LIMIT)), ("memory.max", str(LIMIT))):
        if (child / limit_file).exists():
            try:
                (child / limit_file).write_text(value)
            except OSError:
                break
            return child
    child.rmdir()
    return None


@pytest.fixture
def memory_cgroup(tmp_path: Path) -> Iterator[Path]:
    """A memory-limited cgroup for one launcher; removed once everything in it is gone."""
    cgroup = _limited_cgroup(f"elastic-test-{os.getpid()}-{tmp_path.name}")
    if cgroup is None:
        pytest.skip("needs a memory cgroup this test may create (cgroup v1 memory, or v2 with memory delegated)")
    yield cgroup
    deadline = time.monotonic() + 10
    while (cgroup / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    cgroup.rmdir()


def _run_inside(launcher: Launcher, cgroup: Path, *options: object, command: list[str]) -> Finished:
    """The launcher started inside ``cgroup`` (as a Slurm step or a pod starts it inside theirs)."""
    enter = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(cgroup / "cgroup.procs")]
    return launcher.run(raw_argv=[*enter, *launcher.argv(options, command)], command=None)


def _oom_count(cgroup: Path) -> int | None:
    for name in ("memory.oom_control", "memory.events"):
        if (cgroup / name).exists():
            return read_count(str(cgroup / name))
    return None


def test_a_rank_the_kernel_oom_kills_is_host_oom_and_a_bare_sigkill_beside_it_is_not(
    launcher: Launcher, memory_cgroup: Path, tmp_path: Path
) -> None:
    """Rank 1 outgrows the cgroup's limit: the kernel kills it, the cgroup counts one OOM kill, and
    the root cause is ``host-oom`` with how the node knows; its peer, SIGKILLed by the launcher
    after it, is not counted again. Then, in the same cgroup, a rank that SIGKILLs itself is no
    ``host-oom``: its cgroup counted no OOM kill while it ran."""
    oom = _run_inside(launcher, memory_cgroup, "--nproc-per-node", 2, "--max-restarts", 0,
                      command=script("eat_memory.py"))

    assert 1 == _oom_count(memory_cgroup), oom.explain()
    assert 0 != oom.returncode, oom.explain()
    cause = oom.report()["attempts"][0]["root_cause"]
    assert 1 == cause["rank"], oom.explain()
    diagnosis = cause["diagnosis"]
    assert ("host-oom", "transient") == (diagnosis["signature"], diagnosis["class"]), oom.explain()
    assert diagnosis["line"].startswith("the kernel's OOM killer ended it (memory cgroup "), diagnosis
    assert diagnosis["line"].endswith("counted 1 OOM kill while it ran)"), diagnosis
    assert "host-oom (transient): the kernel's OOM killer ended it" in oom.stderr
    peers = [e for e in oom.events("worker_failed") if e.get("rank") == 0]
    assert all((e.get("diagnosis") or {}).get("signature") != "host-oom" for e in peers), peers

    launcher.run_dir = tmp_path / "run-bare"
    bare = _run_inside(launcher, memory_cgroup, "--nproc-per-node", 1, "--max-restarts", 0,
                       command=script("kill_self.py", "SIGKILL"))

    assert 1 == _oom_count(memory_cgroup)
    assert 0 != bare.returncode, bare.explain()
    assert bare.report()["attempts"][-1]["root_cause"]["diagnosis"] is None, bare.explain()


# A spawner's warm-interpreter pool inside the cgroup, asked to start a successor whose estimate
# (200 MiB) is far within 10 % of the host's memory but past 10 % of the cgroup's 1 GiB.
_POOL = """
import json, os, sys
from elastic.core.launch.spec import LAUNCH_VARIABLES
from elastic.node.spawner.prewarm_pool import PrewarmPool
pool = PrewarmPool(cgroup=None)
argv = [sys.executable, sys.argv[1]]
command = {"prewarm": [], "prewarm_memory_pct": 10.0, "launch_vars": sorted(LAUNCH_VARIABLES), "attempt": 0}
key = pool.note_spawn(argv, dict(os.environ), os.getcwd(), command)
pool.schedule(1001, key, argv, dict(os.environ), os.getcwd(), command)
print(json.dumps(pool.learned(1001, ["json"], 200 * 1024)))
"""


def test_the_prewarm_budget_is_a_percent_of_the_cgroups_limit_not_of_the_hosts_memory(
    memory_cgroup: Path, tmp_path: Path
) -> None:
    """--prewarm-memory 10 inside a 1 GiB cgroup holds at most ~102 MiB of warm interpreters, however
    much the host has: a 200 MiB successor is refused, over --prewarm-memory."""
    enter = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(memory_cgroup / "cgroup.procs")]
    done = subprocess.run([*enter, sys.executable, "-c", _POOL, str(tmp_path / "train.py")],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False)

    assert 0 == done.returncode, done.stderr
    report = json.loads(done.stdout)
    assert (LIMIT // 1024 // 10, False, "over --prewarm-memory") == (report["budget_kb"], report["started"], report["why"])
