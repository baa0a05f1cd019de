"""Drains on a real loopback Ray cluster: the failure grace, the grace kills and the next
attempt's first sign of life reach the driver from the node agents' actors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import Launcher, per_rank

LONG_GRACE_S = 600  # far beyond the run's bound: waiting it out fails the test by that bound


def test_a_survivor_ignoring_sigterm_on_another_node_is_killed_at_the_failure_grace_and_named(
    ray_cluster: Any, launcher: Launcher, pid_dir: Path
) -> None:
    """Rank 1 (node 1) exits 3; rank 0 (node 0) ignores SIGTERM: its agent reads how it held the
    signal before the SIGKILL, the drain used --failure-grace, and attempt 1's first line is journaled."""
    finished = launcher.run(
        "--backend", "ray", "--address", ray_cluster.address, "--nnodes", 2, "--nproc-per-node", 1,
        "--max-restarts", 1, "--grace-period", LONG_GRACE_S, "--failure-grace", 1,
        command=per_rank(
            ["ignore_sigterm.py", pid_dir, 0],
            ["exit_with.py", 3, "--attempt", 0, "--wait-for", pid_dir / "rank-0.pid", "--say", "rank 1"],
        ),
        timeout_s=90,
    )

    assert 0 == finished.returncode, finished.explain()
    [drain, _] = [e for e in finished.events("phase_changed") if e["dest"] == "draining"]
    assert (1, "--failure-grace") == (drain["grace_s"], drain["grace_option"])
    [killed] = finished.events("workers_stopped")[0]["killed_at_grace"]
    assert (0, "ignored") == (killed["rank"], killed["disposition"])
    assert "rank 0 ignored SIGTERM; killed after 1 s (--failure-grace)" in finished.stderr
    signs = {e["attempt"]: e for e in finished.events("sign_of_life_seen")}
    assert "output" == signs[1]["source"]
    assert finished.report()["attempts"][1]["first_sign_of_life"]["after_failure_s"] is not None


def test_a_survivor_ignoring_sigterm_on_another_node_is_killed_at_once_when_no_checkpoint_write_is_under_way(
    ray_cluster: Any, launcher: Launcher, pid_dir: Path, tmp_path: Path
) -> None:
    """The same failure with a quiet --checkpoint-dir and --failure-grace 600: the drain tells the
    agents the ranks are collateral, and rank 0's agent SIGKILLs it at once (the run's bound
    catches one that waited out the grace)."""
    checkpoints = tmp_path / "ckpt"  # never written: no write under way
    finished = launcher.run(
        "--backend", "ray", "--address", ray_cluster.address, "--nnodes", 2, "--nproc-per-node", 1,
        "--max-restarts", 1, "--failure-grace", LONG_GRACE_S, "--checkpoint-dir", checkpoints,
        command=per_rank(
            ["ignore_sigterm.py", pid_dir, 0],
            ["exit_with.py", 3, "--attempt", 0, "--wait-for", pid_dir / "rank-0.pid", "--say", "rank 1"],
        ),
        timeout_s=90,
    )

    assert 0 == finished.returncode, finished.explain()
    [killed] = finished.events("workers_stopped")[0]["killed_at_grace"]
    assert (0, "ignored", "at_once") == (killed["rank"], killed["disposition"], killed["collateral"])
    assert (
        f"rank 0 ignored SIGTERM; killed at once, not after {LONG_GRACE_S} s (--failure-grace): "
        "no checkpoint write was under way"
    ) in finished.stderr


def test_ranks_on_two_nodes_that_print_and_exit_at_once_show_each_attempts_sign_of_life(
    ray_cluster: Any, launcher: Launcher
) -> None:
    """Each rank prints one line and exits before its agent's next look: the agent reads the
    line before it sends the exit, and the driver hears the sign before the exits that end
    the attempt (the last attempt's end is the run's, after which a sign would be dropped)."""
    finished = launcher.run(
        "--backend", "ray", "--address", ray_cluster.address, "--nnodes", 2, "--nproc-per-node", 1,
        "--max-restarts", 1,
        command=per_rank(
            ["exit_with.py", 0, "--say", "rank 0"],
            ["exit_with.py", 3, "--attempt", 0, "--say", "rank 1"],
        ),
        timeout_s=90,
    )

    assert 0 == finished.returncode, finished.explain()
    signs = {e["attempt"]: e["source"] for e in finished.events("sign_of_life_seen")}
    assert {0: "output", 1: "output"} == signs
