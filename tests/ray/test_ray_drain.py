"""Preemption notices on Ray: a node drained through Ray's own API, on a real two-node cluster."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from harness import Finished, Launcher, script, wait_for

NOTICE_S = 30  # the drain's deadline, from when it is asked


def drain(cluster: Any, node_id: str, deadline_s: float) -> None:
    """What an autoscaler or KubeRay does before a spot node goes: Ray's DrainNode, reason
    preemption, with a deadline (``ray drain-node`` calls the same)."""
    import ray._raylet
    from ray.core.generated import autoscaler_pb2

    client = ray._raylet.GcsClient(address=cluster.address)
    accepted, why = client.drain_node(
        node_id,
        autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
        "spot instance reclaimed (test)",
        int((time.time() + deadline_s) * 1000),
    )
    assert accepted, why


def replace(cluster: Any, node_id: str) -> None:
    """The drained node goes (as it would at its deadline) and a fresh one takes its place."""
    cluster.remove_node(next(w for w in cluster.workers if w.node_id == node_id))
    cluster.restore()


def _read(out: Path, name: str, attempt: int, rank: int) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((out / f"{name}-{attempt}-{rank}").read_text())
    return value


def run_draining_rank_1(cluster: Any, launcher: Launcher, tmp_path: Path, nnodes: str) -> tuple[Finished, str]:
    """Two ranks on two nodes; once both step, Ray drains rank 1's node. Returns the run and that node."""
    out, checkpoints = tmp_path / "out", tmp_path / "ckpt"
    out.mkdir()
    process = launcher.start(
        "--backend", "ray", "--address", cluster.address, "--nnodes", nnodes, "--nproc-per-node", 1,
        "--checkpoint-dir", checkpoints, "--max-restarts", 0, "--max-preemptions", 0,
        command=script("save_on_notice.py", out, "sigterm"),
    )
    wait_for(lambda: all((out / f"ready-0-{r}").exists() for r in (0, 1)) or None, "both ranks stepping", 90)
    leaving = str(launcher.wait_for_event("attempt_started")["nodes"][1])
    drain(cluster, leaving, NOTICE_S)
    try:
        return launcher.finished(process, timeout_s=120), leaving
    except BaseException:
        replace(cluster, leaving)
        raise


def test_a_drained_node_makes_ranks_checkpoint_and_the_run_goes_on_without_it(
    two_node_cluster: Any, launcher: Launcher, tmp_path: Path
) -> None:
    """--nnodes 1:2 and Ray drains a node: every rank is told and saves, attempt 1 resumes from
    that checkpoint on the node left, charged to no budget (both are 0)."""
    finished, leaving = run_draining_rank_1(two_node_cluster, launcher, tmp_path, "1:2")
    try:
        assert 0 == finished.returncode, finished.explain()
        [notice] = finished.events("preemption_noticed")
        assert (f"ray drain of node {leaving[:12]}", [leaving], "notice", "relaunch") == (
            notice["source"], notice["nodes"], notice["deadline_from"], notice["then"]
        )
        assert 0 < notice["deadline_s"] <= NOTICE_S
        out = tmp_path / "out"
        told = [_read(out, "notice", 0, rank) for rank in (0, 1)]
        assert [notice["source"]] * 2 == [t["notice"]["source"] for t in told]
        saved = told[0]["step"]
        attempts = finished.events("attempt_started")
        assert [0, 1] == [a["attempt"] for a in attempts]
        assert leaving not in attempts[1]["nodes"] and 1 == attempts[1]["world_size"]
        assert saved == attempts[1]["resume_step"] == _read(out, "done", 1, 0)["resume_step"]
        assert [] == finished.events("restart_scheduled")
        report = finished.report()
        assert report["attempts"][0]["restarted"] and report["attempts"][0]["root_cause"] is None
        assert "relaunch" == report["attempts"][0]["preemption_notice"]["then"]
    finally:
        replace(two_node_cluster, leaving)


def test_a_drained_node_below_the_minimum_ends_the_run_with_75_after_the_save(
    two_node_cluster: Any, launcher: Launcher, tmp_path: Path
) -> None:
    """--nnodes 2 and Ray drains one of the two: the ranks save, then 'requeue me' (75)."""
    finished, leaving = run_draining_rank_1(two_node_cluster, launcher, tmp_path, "2")
    try:
        assert 75 == finished.returncode, finished.explain()
        [notice] = finished.events("preemption_noticed")
        assert ("requeue", [leaving]) == (notice["then"], notice["nodes"])
        saved = _read(tmp_path / "out", "notice", 0, 0)["step"]
        assert (tmp_path / "ckpt" / f"step_{saved}" / "COMMITTED").exists()
        assert [0] == [a["attempt"] for a in finished.events("attempt_started")]
        assert ("stopped", 75) == (finished.report()["outcome"], finished.report()["exit_status"])
    finally:
        replace(two_node_cluster, leaving)
