"""Nodes an attempt goes on without, on a real two-node Ray cluster: a node drained through Ray's
own API (a preemption notice), and a straggler's node (``--on-straggler restart``)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
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
    """Two ranks on two nodes; once both step, Ray drains rank 1's node. Returns the run and that
    node's name."""
    out, checkpoints = tmp_path / "out", tmp_path / "ckpt"
    out.mkdir()
    process = launcher.start(
        "--backend", "ray", "--address", cluster.address, "--nnodes", nnodes, "--nproc-per-node", 1,
        "--checkpoint-dir", checkpoints, "--max-restarts", 0, "--max-preemptions", 0,
        command=script("save_on_notice.py", out, "sigterm"),
    )
    wait_for(lambda: all((out / f"ready-0-{r}").exists() for r in (0, 1)) or None, "both ranks stepping", 90)
    started = launcher.wait_for_event("attempt_started")
    leaving = str(started["nodes"][1])  # its name; Ray knows it by its id
    drain(cluster, started["node_ids"][leaving], NOTICE_S)
    try:
        return launcher.finished(process, timeout_s=120), leaving
    except BaseException:
        replace(cluster, started["node_ids"][leaving])
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
        assert (f"ray drain of node {leaving}", [leaving], "notice", "relaunch") == (
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
        replace(two_node_cluster, _ray_id(finished, leaving))


def _ray_id(finished: Finished, node: str) -> str:
    """Ray's id of a node the run named, from the plan the journal holds."""
    return str(finished.events("attempt_started")[0]["node_ids"][node])


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
        replace(two_node_cluster, _ray_id(finished, leaving))


def run_with_a_slow_rank_1(cluster: Any, launcher: Launcher, nnodes: str, slow: str = "1x3") -> Finished:
    """One rank a node on two nodes, stepping at their own pace; rank 1 at a third of the pace
    (``slow``: ``RANKxFACTOR``) in attempt 0."""
    return launcher.run(
        "--backend", "ray", "--address", cluster.address, "--nnodes", nnodes, "--nproc-per-node", 1,
        "--max-restarts", 0, "--on-straggler", "restart",
        command=script("straggles.py", "free", slow, 0.05, 200), timeout_s=150,
    )


def test_a_stragglers_node_is_left_out_when_the_world_can_spare_it(
    two_node_cluster: Any, launcher: Launcher
) -> None:
    """--on-straggler restart --nnodes 1:2, rank 1 at 3x: one node alone (half the pace) beats
    both held to a third, so the run drains, attempt 1 runs on the other node alone, no budget is
    charged (--max-restarts 0) and the run succeeds; the journal names the node."""
    finished = run_with_a_slow_rank_1(two_node_cluster, launcher, "1:2")

    assert 0 == finished.returncode, finished.explain()
    [straggler] = finished.events("straggler_seen")
    attempts = finished.events("attempt_started")
    slow_node = attempts[0]["nodes"][1]
    assert (0, 1, slow_node, "restart") == (
        straggler["attempt"], straggler["rank"], straggler["node"], straggler["action"]
    )
    assert straggler["reason"].startswith(f"without node {slow_node} the 1 of 2 nodes left (--nnodes needs at "
                                          "least 1) train faster: 0.50 of the full pace"), straggler["reason"]
    assert [0, 1] == [a["attempt"] for a in attempts]
    assert slow_node not in attempts[1]["nodes"] and 1 == attempts[1]["world_size"]
    assert [] == finished.events("restart_scheduled")
    [drain] = [e for e in finished.events("phase_changed") if e["dest"] == "draining" and e["attempt"] == 0]
    assert f"the next attempt runs without node {slow_node}" in drain["reason"]
    report = finished.report()
    assert report["attempts"][0]["restarted"] and report["attempts"][0]["root_cause"] is None
    assert "node left out of the next attempt" in report["attempts"][0]["stragglers"][0]["description"]
    assert f"straggler: rank 1 on {slow_node}" in finished.stdout + finished.stderr


@pytest.mark.parametrize(
    ("nnodes", "slow", "why"),
    [("2", "1x3", "no spare node: without node "), ("1:2", "1x1.5", "no spare node (")],
    ids=["no-world-without-it", "one-node-alone-is-slower"],
)
def test_a_straggler_whose_node_the_world_cannot_spare_is_only_warned_of(
    two_node_cluster: Any, launcher: Launcher, nnodes: str, slow: str, why: str
) -> None:
    """--on-straggler restart on two nodes, no spare: with --nnodes 2 there is no world without the
    node; with --nnodes 1:2 and rank 1 at 1.5x one node alone (half the pace) would be slower than
    both held to two thirds. Either way a warning whose reason says so, and the one attempt runs on."""
    finished = run_with_a_slow_rank_1(two_node_cluster, launcher, nnodes, slow)

    assert 0 == finished.returncode, finished.explain()
    [straggler] = finished.events("straggler_seen")
    assert (1, "warn") == (straggler["rank"], straggler["action"])
    assert straggler["reason"].startswith(why), straggler["reason"]
    assert [0] == [a["attempt"] for a in finished.events("attempt_started")]