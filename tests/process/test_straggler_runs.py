"""Stragglers for real: ranks that step at their own pace, and ranks in lockstep with compute_s."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from harness import Finished, Launcher, scrape, script, status_text, wait_for

from elastic.core.training.stragglers import STRAGGLER_MARGIN

pytest.importorskip("prometheus_client.parser")

STEP_S = 0.05



def _after_first_step_s(finished: Finished, record: dict[str, Any]) -> float:
    """Seconds from the attempt's first step to ``record``: the detection delay, as journaled."""
    [first] = [e for e in finished.events("first_step_seen") if e["attempt"] == record["attempt"]]
    return (datetime.fromisoformat(record["time"]) - datetime.fromisoformat(first["time"])).total_seconds()


def test_a_rank_stepping_at_half_the_pace_is_reported_with_its_node(launcher: Launcher) -> None:
    """Three independent ranks print steps; rank 2 takes twice as long a step: one
    straggler_seen names rank 2 and its node (from its step intervals); status, report,
    summary and metrics show it; ranks 0 and 1 are not reported."""
    process = launcher.start("--nproc-per-node", 3, "--metrics-port", 0,
                             command=script("straggles.py", "free", 2, STEP_S, 200))
    port = launcher.wait_for_event("metrics_serving")["port"]
    seen = launcher.wait_for_event("straggler_seen", timeout_s=30)
    samples = scrape(port)
    finished = launcher.finished(process)

    assert 0 == finished.returncode, finished.explain()
    [record] = finished.events("straggler_seen")
    assert seen == record
    [started] = finished.events("attempt_started")
    assert (2, started["nodes"][0], "interval", "warn") == (
        record["rank"], record["node"], record["source"], record["action"]
    )
    assert 1.6 < record["ratio"] < 2.6, record
    assert record["step_time_s"] > record["median_s"] > 0
    print(f"detected at step {record['step']}, {_after_first_step_s(finished, record):.2f} s after the first step")

    assert 1.0 == samples[("elastic_straggler", (("node", record["node"]), ("rank", "2")))]
    assert ("elastic_straggler", (("node", record["node"]), ("rank", "0"))) not in samples
    times = {r: samples[("elastic_step_time_seconds", (("rank", str(r)),))] for r in range(3)}
    assert times[2] > 1.5 * max(times[0], times[1]), times

    [row] = finished.report()["attempts"]
    assert [2] == [s["rank"] for s in row["stragglers"]]
    assert row["stragglers"][0]["description"].startswith(f"rank 2 on {record['node']}: ")
    status = status_text(finished.run_dir)
    assert "stragglers: 1" in status and "attempt 0: rank 2 on" in status, status


def test_ranks_at_one_pace_have_no_straggler(launcher: Launcher) -> None:
    """The same ranks, all at one pace: no straggler_seen, and status lists none."""
    finished = launcher.run("--nproc-per-node", 3, command=script("straggles.py", "free", -1, STEP_S, 160))

    assert 0 == finished.returncode, finished.explain()
    assert [] == finished.events("straggler_seen")
    assert [] == finished.report()["attempts"][0]["stragglers"]
    assert "stragglers" not in status_text(finished.run_dir)


def test_in_lockstep_compute_s_shows_the_slow_rank(launcher: Launcher) -> None:
    """Ranks meet at a barrier every step, so their lines come at one pace; rank 1 works twice as
    long and says so with compute_s: reported from compute_s."""
    finished = launcher.run("--nproc-per-node", 3, command=script("straggles.py", "lockstep", 1, STEP_S, 120, "compute"))

    assert 0 == finished.returncode, finished.explain()
    [record] = finished.events("straggler_seen")
    assert (1, "compute") == (record["rank"], record["source"])
    assert 1.6 < record["ratio"] < 2.6, record
    print(f"detected at step {record['step']}, {_after_first_step_s(finished, record):.2f} s after the first step")


def test_in_lockstep_without_compute_s_no_straggler_shows(launcher: Launcher) -> None:
    """The limit, documented: the same lockstep ranks without compute_s step at the slowest's
    pace, so their intervals are alike and no straggler is reported."""
    finished = launcher.run("--nproc-per-node", 3, command=script("straggles.py", "lockstep", 1, STEP_S, 120))

    assert 0 == finished.returncode, finished.explain()
    assert [] == finished.events("straggler_seen")
    assert finished.report()["attempts"][0]["step_reached"]["step"] == 120


def test_steps_arriving_in_a_burst_after_a_restore_name_no_straggler(launcher: Launcher, tmp_path: Path) -> None:
    """Two ranks at one pace; rank 1 SIGKILLed after checkpoint 20. In the restored attempt rank 0's
    first 40 step lines arrive at once, ahead of their work, and rank 1's one by one: no rank is
    a straggler (step times right after a restore are not compared with steady ones), and the
    restored attempt still times both ranks once their steps settle."""
    checkpoints = tmp_path / "ckpt"
    checkpoints.mkdir()
    process = launcher.start(
        "--nproc-per-node", 2, "--max-restarts", 1, "--checkpoint-dir", checkpoints, "--metrics-port", 0,
        command=script("bursts_after_restore.py", checkpoints, STEP_S, 240, 40),
    )
    port = launcher.wait_for_event("metrics_serving")["port"]
    launcher.kill_rank_at_step(process, rank=1, step=25)

    def timed_after_restore() -> dict[int, float] | None:
        samples = scrape(port)
        times = {r: samples.get(("elastic_step_time_seconds", (("rank", str(r)),))) for r in (0, 1)}
        restored = samples.get(("elastic_attempt", ())) == 1
        return {r: t for r, t in times.items() if t is not None} if restored and None not in times.values() else None

    times = wait_for(timed_after_restore, "both ranks timed in the restored attempt", timeout_s=30)
    finished = launcher.finished(process)

    assert 0 == finished.returncode, finished.explain()
    assert [20] == [e["resume_step"] for e in finished.events("attempt_started")][1:]
    assert [] == finished.events("straggler_seen"), finished.events("straggler_seen")
    assert max(times.values()) < STRAGGLER_MARGIN * min(times.values()), times
    assert 240 == finished.report()["attempts"][1]["step_reached"]["step"]
