"""The ray backend on a cluster started with Ray's raylet-subreaper option: exits are still exact.

With ``RAY_kill_child_processes_on_worker_exit_with_raylet_subreaper=true`` in
a raylet's environment when its node starts, every Ray worker on that node
(elastic's node agent actor included) makes itself a child subreaper and sets
``SIGCHLD`` to ``SIG_IGN`` (Ray's ``core_worker_process.cc``): the kernel then
reaps the worker's children itself, and ``Popen.wait()`` would read a rank's
SIGKILL as exit status 0. This module starts a cluster of its own with the
option set.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Launcher, allow_process_trees, descendants, is_alive, read_pids, script, wait_for

SUBREAPER_OPTION = "RAY_kill_child_processes_on_worker_exit_with_raylet_subreaper"
OBJECT_STORE_BYTES = 80 * 1024 * 1024
GONE_BOUND_S = 5.0


@pytest.fixture(scope="module")
def subreaper_cluster() -> Iterator[str]:
    """A one-node loopback cluster whose raylet (and so its workers) run with the option; its address."""
    from ray.cluster_utils import Cluster

    before = descendants()
    saved = os.environ.get(SUBREAPER_OPTION)
    os.environ[SUBREAPER_OPTION] = "true"  # read from the raylet's environment as the node starts
    try:
        cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 1, "object_store_memory": OBJECT_STORE_BYTES, "include_dashboard": False},
        )
        cluster.wait_for_nodes()
    finally:
        if saved is None:
            del os.environ[SUBREAPER_OPTION]
        else:
            os.environ[SUBREAPER_OPTION] = saved
    allow_process_trees(descendants() - before)
    yield str(cluster.address)
    cluster.shutdown()


def test_a_sigkilled_rank_is_killed_not_exited_0_under_the_raylet_subreaper(
    subreaper_cluster: str, launcher: Launcher, tmp_path: Path
) -> None:
    """The node agent actor ignores SIGCHLD there; a rank's SIGKILL is still reported, and the run exits 137."""
    out = tmp_path / "ancestors.json"
    finished = launcher.run(
        "--backend", "ray", "--address", subreaper_cluster, "--max-restarts", 0,
        command=script("report_agent_sigchld.py", out), timeout_s=120,
    )

    [agent] = [p for p in json.loads(out.read_text()) if "RayNodeAgent" in p["cmdline"]]
    assert agent["ignores_sigchld"], "the actor does not ignore SIGCHLD: the test proves nothing"
    assert 137 == finished.returncode, finished.explain()
    [failed] = finished.events("worker_failed")
    assert ("killed", "SIGKILL") == (failed["kind"], failed["signal"])


def test_a_ranks_setsid_daemon_is_gone_when_a_ray_run_ends(
    subreaper_cluster: str, launcher: Launcher, pid_dir: Path
) -> None:
    """Through the Ray backend too, a daemon a rank started in its own session does not outlive the run."""
    finished = launcher.run(
        "--backend", "ray", "--address", subreaper_cluster,
        command=script("start_daemon.py", pid_dir, "--double-fork", "--exit", 0), timeout_s=120,
    )

    assert 0 == finished.returncode, finished.explain()
    rank, daemon = read_pids(pid_dir, 1)
    wait_for(lambda: not is_alive(daemon), f"daemon {daemon} of rank {rank} gone", GONE_BOUND_S)
