"""A driver killed mid-run is replaced by rerunning the same command with the same --run-id."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from harness import Launcher, is_alive, read_pids, script, wait_for


def test_rerun_after_driver_sigkill_continues_attempts_and_budgets(launcher: Launcher, pid_dir: Path) -> None:
    """Attempt numbers go on from where the dead driver was and its restarts stay charged."""
    options = ("--run-id", "resumable", "--max-restarts", 2, "--backoff", "0:0")
    command = script("by_attempt.py", pid_dir, "0=exit:1", "1=sleep", "2=exit:1", "3=exit:1")
    first = launcher.start(*options, command=command)
    [rank] = read_pids(pid_dir, 1)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    wait_for(lambda: not is_alive(rank), f"rank {rank} gone with its driver", 5)
    with (launcher.run_dir / "journal.jsonl").open("a") as journal:
        journal.write('{"event": "phase_chan')  # what a write cut off by SIGKILL looks like

    finished = launcher.run(*options, command=command)

    assert 1 == finished.returncode, finished.explain()
    assert [0, 1, 2, 3] == [e["attempt"] for e in finished.events("attempt_started")]
    [resumed] = finished.events("run_resumed")
    assert (1, True) == (resumed["failures_charged"], resumed["journal_tail_truncated"])
    assert [1, 0] == [e["remaining"] for e in finished.events("restart_scheduled")]
    assert "budget_exhausted" == finished.events("budget_exhausted")[0]["event"]


def test_a_finished_run_is_not_rerun(launcher: Launcher) -> None:
    """Reusing the --run-id of a finished run is a usage error that says so."""
    assert 0 == launcher.run("--run-id", "done-once", command=script("exit_with.py", 0)).returncode
    again = launcher.run("--run-id", "done-once", command=script("exit_with.py", 0))

    assert 2 == again.returncode
    assert "already finished (succeeded)" in again.stderr
