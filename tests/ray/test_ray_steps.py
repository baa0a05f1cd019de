"""Steps and stalls on a real loopback Ray cluster: each node's agent reads its ranks' steps,
they reach the driver through the event pump (with each rank's start-up), and a stalled rank on
another node is killed."""

from __future__ import annotations

from typing import Any

from harness import Launcher, script


def test_steps_reach_the_driver_and_a_stalled_rank_on_another_node_is_killed(
    ray_cluster: Any, launcher: Launcher
) -> None:
    """Rank 1 (node 1) stops stepping but keeps printing: hung as stalled, stacks dumped on its
    node; attempt 1's steps, read on both nodes, are journaled by the driver."""
    finished = launcher.run(
        "--backend", "ray", "--address", ray_cluster.address, "--nnodes", 2, "--nproc-per-node", 1,
        "--max-restarts", 1, "--stall-floor", 2,
        command=script("prints_steps.py", "plain", "stalls"),
        timeout_s=120,
    )

    assert 0 == finished.returncode, finished.explain()
    [stalled] = [e for e in finished.events("worker_failed") if e["kind"] != "collateral"]
    assert ("hung", 1, 0) == (stalled["kind"], stalled["rank"], stalled["attempt"])
    assert stalled["message"].startswith("stalled: no new step for "), stalled["message"]
    assert "(last step 20)" in stalled["message"]
    firsts = {e["attempt"]: e for e in finished.events("first_step_seen")}
    assert {0, 1} == set(firsts) and "output" == firsts[1]["source"]
    assert 20 == finished.report()["attempts"][1]["step_reached"]["step"]
    # Each node's agent reads its ranks' start-up at their first step: one record an attempt, both ranks.
    profiled = {e["attempt"]: e for e in finished.events("startup_profiled")}
    assert {0, 1} == set(profiled) and all(2 == e["ranks"] for e in profiled.values())
    assert all({"spawn", "imports"} <= set(e["phases"]) for e in profiled.values()), profiled
