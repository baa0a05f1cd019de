"""The next attempt's first sign of life (a rank's first output line or heartbeat) is journaled
and shown next to the relaunch latency: what a restart costs, the ranks' start-up included."""

from __future__ import annotations

from pathlib import Path

from harness import Launcher, per_rank, status_text



def test_the_next_attempts_first_output_line_is_its_sign_of_life(launcher: Launcher) -> None:
    """Rank 1 fails in attempt 0; rank 0's first line in attempt 1 is journaled and reported."""
    finished = launcher.run(
        "--nproc-per-node", 2, "--max-restarts", 1,
        command=per_rank(
            ["exit_with.py", 0, "--say", "hello", "--sleep", 0.5],
            ["exit_with.py", 3, "--attempt", 0, "--sleep", 0.2],
        ),
    )

    assert 0 == finished.returncode, finished.explain()
    signs = {e["attempt"]: e for e in finished.events("sign_of_life_seen")}
    assert (0, "output") == (signs[1]["rank"], signs[1]["source"])
    report = finished.report()
    seen = report["attempts"][1]["first_sign_of_life"]
    assert (0, "output") == (seen["rank"], seen["source"])
    # Not before the ranks were running: the launcher's latency is part of it.
    assert seen["after_failure_s"] == report["sign_of_life_s"]
    assert report["sign_of_life_s"] >= report["downtime_s"]
    assert seen["after_launch_s"] >= 0
    assert f"; {report['sign_of_life_s']:.2f}s to their first output or heartbeat" in finished.stderr
    status = status_text(finished.run_dir)
    assert "attempt 1: first sign of life " in status and "(rank 0's output)" in status, status


def test_a_heartbeat_without_output_is_a_sign_of_life(launcher: Launcher) -> None:
    """A rank that prints nothing but calls elastic.heartbeat() shows life by its heartbeat."""
    finished = launcher.run(
        "--nproc-per-node", 2, "--max-restarts", 1,
        command=per_rank(
            ["beats_silently.py", 0, "--sleep", 0.5],
            ["exit_with.py", 3, "--attempt", 0, "--sleep", 0.2],
        ),
    )

    assert 0 == finished.returncode, finished.explain()
    signs = {e["attempt"]: e for e in finished.events("sign_of_life_seen")}
    assert (0, "heartbeat") == (signs[1]["rank"], signs[1]["source"])
    assert "heartbeat" == finished.report()["attempts"][1]["first_sign_of_life"]["source"]


def test_ranks_that_print_and_exit_at_once_still_show_their_attempts_sign_of_life(launcher: Launcher) -> None:
    """Each rank prints one line and exits within the watcher's look interval: the line is read
    before the exit is reported, so every attempt has its sign of life, the last one too (its
    exits end the run, and a sign arriving after them would be dropped)."""
    finished = launcher.run(
        "--nproc-per-node", 2, "--max-restarts", 2,
        command=per_rank(
            ["exit_with.py", 0, "--say", "rank 0"],
            ["exit_with.py", 3, "--attempt", 0, "--say", "rank 1"],
        ),
    )

    assert 0 == finished.returncode, finished.explain()
    signs = {e["attempt"]: e["source"] for e in finished.events("sign_of_life_seen")}
    assert {0: "output", 1: "output"} == signs
