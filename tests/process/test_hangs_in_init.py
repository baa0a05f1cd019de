"""A rank hung in its distributed initialisation, for real: found within --init-timeout, killed, restarted."""

from __future__ import annotations

import pytest
from harness import Launcher, script

pytest.importorskip("torch")


def test_rank_stopped_inside_init_process_group_is_hung_killed_and_restarted(launcher: Launcher) -> None:
    """Rank 0 (the TCPStore's host) SIGSTOPs itself inside ``init_process_group`` in attempt 0, so
    rank 1 blocks there too: the rank is hung in its initialisation within ``--init-timeout``,
    killed though stopped, and attempt 1 finishes."""
    finished = launcher.run(
        "--nproc-per-node", 2,
        "--max-restarts", 1,
        "--init-timeout", 5,
        command=script("stops_in_init.py"),
        timeout_s=240,
    )

    assert 0 == finished.returncode, finished.explain()
    failed = [e for e in finished.events("worker_failed") if e["kind"] != "collateral"]
    assert failed, finished.explain()
    assert {("hung", 0)} <= {(e["kind"], e["attempt"]) for e in failed}, finished.explain()
    assert 0 in {e["rank"] for e in failed}, finished.explain()
    stopped = next(e for e in failed if e["rank"] == 0)
    assert "SIGKILL" == stopped["signal"]
    assert "hung in distributed initialisation for" in stopped["message"]
    assert "(--init-timeout 5)" in stopped["message"]
    [scheduled] = finished.events("restart_scheduled")
    assert "failures" == scheduled["budget"]
    report = finished.report()
    assert ("succeeded", 2) == (report["outcome"], len(report["attempts"])), finished.explain()
    assert "hung in distributed initialisation for" in report["attempts"][0]["root_cause"]["description"]
    assert "rank 0 attempt 1 sum 2" in (finished.run_dir / "attempt-1" / "rank-0.log").read_text()
