"""Exit hangs across nodes on a real loopback cluster: the driver's timer, the agents' kill."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness import Launcher, script

from elastic.node.probes.stacks import find_py_spy


def test_a_rank_on_another_node_hung_at_exit_is_dumped_killed_and_the_run_succeeds(
    ray_cluster: Any, launcher: Launcher, tmp_path: Path
) -> None:
    """Rank 0 on one node exits 0; rank 1 on another said it finished and hangs: its agent
    dumps and kills it 2 s later, and the run succeeds after one attempt."""
    checkpoints, out = tmp_path / "ckpt", tmp_path / "out"
    checkpoints.mkdir()
    out.mkdir()
    finished = launcher.run(
        "--backend", "ray", "--address", ray_cluster.address,
        "--nnodes", 2, "--nproc-per-node", 1, "--checkpoint-dir", checkpoints, "--exit-timeout", 2,
        command=script("hangs_at_exit.py", checkpoints, out, 5, 0, "done"),
        timeout_s=90,
    )

    assert 0 == finished.returncode, finished.explain()
    [started] = finished.events("attempt_started")
    assert 2 == len(set(started["nodes"]))  # one rank per node
    [failed] = [e for e in finished.events("worker_failed") if e["kind"] != "collateral"]
    assert ("exit-hung", 1, started["nodes"][1]) == (failed["kind"], failed["rank"], failed["node"])
    # The agent's check comes at the timeout or a tick after it: the message says when.
    assert re.match(r"still running [\d.]+ s after rank 0 exited 0 and silent for 2 s", failed["message"]), failed

    [killed] = finished.events("exit_hung_killed")
    assert [1] == killed["declared_finished"]
    report = finished.report()
    assert ("succeeded", 1, "finished; rank 1 hung at exit and was killed, judged finished: it said so (elastic.heartbeat(done=True))") == (
        report["outcome"], len(report["attempts"]), report["reason"]
    )
    dump = (finished.run_dir / "attempt-0" / "stacks" / "rank-1.txt").read_text()
    if find_py_spy() is not None:
        assert "stuck_at_exit" in dump, dump


def test_a_rank_still_working_on_its_node_after_a_peers_exit_0_on_another_is_left_to_finish(
    ray_cluster: Any, launcher: Launcher, tmp_path: Path
) -> None:
    """Rank 1 exits 0 on one node; rank 0 on another prints upload progress every 0.6 s for 6 s:
    its agent says it is not silent at each --exit-timeout 3 check, and the run succeeds."""
    finished = launcher.run(
        "--backend", "ray", "--address", ray_cluster.address,
        "--nnodes", 2, "--nproc-per-node", 1, "--exit-timeout", 3,
        command=script("works_after_peer.py", 10, 0.6),
        timeout_s=90,
    )

    assert 0 == finished.returncode, finished.explain()
    [started] = finished.events("attempt_started")
    assert 2 == len(set(started["nodes"]))
    assert [] == finished.events("worker_failed")
    spared = finished.events("exit_hang_spared")
    assert spared and all([0] == s["ranks"] and "output" == s["signs"]["0"]["sign"] for s in spared), spared
    assert "upload complete" in finished.rank_log(0, 0)
