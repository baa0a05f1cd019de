"""Drains that match the cause: after a failure the survivors get --failure-grace, and a rank
SIGKILLed when its grace ran out is named, with how it held the stop signal."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from harness import Finished, Launcher, launcher_env, per_rank, read_pids, script, skip_unless_installed, status_text

# Far beyond the harness's bound on a whole run: a drain that gave the wrong grace fails the
# test by that bound, and the journal says which grace applied; no wall-clock assertion.
LONG_GRACE_S = 600



def _drain(finished: Finished) -> dict[str, Any]:
    [drain] = [e for e in finished.events("phase_changed") if e["dest"] == "draining"]
    return drain


def _killed(finished: Finished) -> dict[str, Any]:
    [stopped] = finished.events("workers_stopped")
    return stopped


def test_survivor_ignoring_sigterm_after_a_failure_gets_the_failure_grace_and_is_named(
    launcher: Launcher, pid_dir: Path
) -> None:
    """Rank 1 exits 3, rank 0 ignores SIGTERM: the drain journals --failure-grace (not
    --grace-period), and summary, report and status say rank 0 ignored SIGTERM and was killed."""
    finished = launcher.run(
        "--nproc-per-node", 2, "--grace-period", LONG_GRACE_S, "--failure-grace", 1,
        command=per_rank(
            ["ignore_sigterm.py", pid_dir],
            ["exit_with.py", 3, "--wait-for", pid_dir / "rank-0.pid"],
        ),
    )

    assert 3 == finished.returncode, finished.explain()
    drain = _drain(finished)
    assert (1, "--failure-grace") == (drain["grace_s"], drain["grace_option"])
    assert "collateral" in drain["grace_why"]
    [killed] = _killed(finished)["killed_at_grace"]
    assert (0, "SIGTERM", "ignored", False, "unseen") == (
        killed["rank"], killed["signal"], killed["disposition"], killed["jax"], killed["collateral"]
    )
    # No --checkpoint-dir: no write can be seen, so none is ruled out, and the survivor waits it out.
    line = (
        "rank 0 ignored SIGTERM; killed after 1 s (--failure-grace): no --checkpoint-dir to see a "
        "checkpoint write in"
    )
    assert line in finished.stderr
    attempt = finished.report()["attempts"][0]
    assert [line] == attempt["killed_at_grace"]["description"]
    assert "--failure-grace" == attempt["drain_grace"]["grace_option"]
    status = status_text(finished.run_dir)
    assert f"attempt 0: {line}" in status, status


def test_a_stop_of_the_launcher_gives_the_grace_period_not_the_failure_grace(
    launcher: Launcher, pid_dir: Path
) -> None:
    """SIGTERM to the launcher drains with --grace-period, the ignoring rank named with it."""
    process = launcher.start(
        "--grace-period", 1, "--failure-grace", LONG_GRACE_S, command=script("ignore_sigterm.py", pid_dir)
    )
    read_pids(pid_dir, 1)
    os.kill(process.pid, signal.SIGTERM)
    finished = launcher.finished(process)

    assert 143 == finished.returncode, finished.explain()
    assert (1, "--grace-period") == (_drain(finished)["grace_s"], _drain(finished)["grace_option"])
    assert ["rank 0 ignored SIGTERM; killed after 1 s (--grace-period)"] == (
        finished.report()["attempts"][0]["killed_at_grace"]["description"]
    )


def test_a_survivor_that_catches_sigterm_and_carries_on_is_told_apart(
    launcher: Launcher, tmp_path: Path
) -> None:
    """A handler that does not exit reads as caught, not ignored (SigCgt, not SigIgn), and as the
    rank's own that ran (the rank bootstrap's signals file)."""
    ready = tmp_path / "ready"
    finished = launcher.run(
        "--nproc-per-node", 2, "--grace-period", LONG_GRACE_S, "--failure-grace", 1,
        command=per_rank(["catch_sigterm.py", ready], ["exit_with.py", 3, "--wait-for", ready]),
    )

    assert 3 == finished.returncode, finished.explain()
    [killed] = _killed(finished)["killed_at_grace"]
    assert ("caught", False, True) == (killed["disposition"], killed["jax"], killed["handler_ran"])
    assert "rank 0 caught SIGTERM in its own handler but did not exit; killed after 1 s (--failure-grace)" in (
        finished.stderr
    )


def test_a_jax_survivor_is_named_with_the_preemption_service_hint(
    launcher: Launcher, tmp_path: Path
) -> None:
    """A rank that initialized JAX's distributed runtime never exits on SIGTERM: the summary says why."""
    skip_unless_installed("jax")  # the rank imports it; this process need not
    ready = tmp_path / "ready"
    finished = launcher.run(
        "--nproc-per-node", 2, "--grace-period", LONG_GRACE_S, "--failure-grace", 1,
        command=per_rank(["jax_survivor.py", ready], ["exit_with.py", 3, "--wait-for", ready]),
        env=launcher_env(JAX_PLATFORMS="cpu"),
    )

    assert 3 == finished.returncode, finished.explain()
    [killed] = _killed(finished)["killed_at_grace"]
    assert ("caught", True) == (killed["disposition"], killed["jax"])
    assert (
        "rank 0 ignored SIGTERM (JAX's preemption service catches it); killed after 1 s (--failure-grace)"
        in finished.stderr
    )
