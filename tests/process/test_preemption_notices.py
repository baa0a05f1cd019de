"""Preemption notices for real: SIGUSR1 to the launcher, ranks that save, exit 75, a rerun that resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from harness import Launcher, script, wait_for


def _read(out: Path, name: str, attempt: int, rank: int) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((out / f"{name}-{attempt}-{rank}").read_text())
    return value


def _ready(out: Path, attempt: int, ranks: int) -> bool | None:
    return all((out / f"ready-{attempt}-{r}").exists() for r in range(ranks)) or None


@pytest.mark.parametrize(
    ("mode", "preempt_signal"),
    [("flag", "none"), ("sigterm", "TERM")],
    ids=["loop-checks-preemption_requested", "sigterm-handler"],
)
def test_sigusr1_makes_ranks_checkpoint_then_exit_75_and_a_rerun_resumes(
    launcher: Launcher, tmp_path: Path, mode: str, preempt_signal: str
) -> None:
    """SIGUSR1 to the launcher: every rank is told (flag, then signal), rank 0 saves, the run ends
    with 75 charged to no budget, journaled with source and deadline; rerun, it resumes there."""
    out, checkpoints = tmp_path / "out", tmp_path / "ckpt"
    out.mkdir()
    options = (
        "--nproc-per-node", 2, "--checkpoint-dir", checkpoints, "--run-id", "notice-run",
        "--preempt-signal", preempt_signal, "--grace-period", 20,
    )
    process = launcher.start(*options, command=script("save_on_notice.py", out, mode))
    wait_for(lambda: _ready(out, 0, 2), "both ranks stepping")
    os.kill(process.pid, signal.SIGUSR1)
    first = launcher.finished(process)

    assert 75 == first.returncode, first.explain()
    [notice] = first.events("preemption_noticed")
    assert ("signal SIGUSR1", 20.0, "--grace-period", "requeue") == (
        notice["source"], notice["deadline_s"], notice["deadline_from"], notice["then"]
    )
    assert [] == first.events("restart_scheduled")  # no budget charged
    told = [_read(out, "notice", 0, rank) for rank in (0, 1)]
    assert [("signal SIGUSR1", "none" if mode == "flag" else "SIGTERM")] * 2 == [
        (t["notice"]["source"], t["notice"]["signal"]) for t in told
    ]
    if mode == "sigterm":  # the flag was already true when the signal arrived
        assert [[True], [True]] == [t["flag_at_signal"] for t in told]
    saved = told[0]["step"]
    assert (checkpoints / f"step_{saved}" / "COMMITTED").exists()
    report = first.report()
    assert ("stopped", 75) == (report["outcome"], report["exit_status"])
    assert "signal SIGUSR1" == report["attempts"][0]["preemption_notice"]["source"]

    second = launcher.run(*options, command=script("save_on_notice.py", out, mode, saved + 5))

    assert 0 == second.returncode, second.explain()
    assert [saved, saved] == [_read(out, "done", 1, rank)["resume_step"] for rank in (0, 1)]
    [resumed] = second.events("run_resumed")
    assert (0, 0) == (resumed["failures_charged"], resumed["preemptions_charged"])
    assert 1 == second.report()["attempts"][-1]["attempt"]


def test_a_notice_signal_that_stops_the_run_is_refused_before_launch(launcher: Launcher) -> None:
    """--notice-signal TERM: a one-line error naming the flag, status 2, nothing launched."""
    finished = launcher.run("--notice-signal", "SIGTERM", command=["true"])

    assert 2 == finished.returncode
    [line] = finished.stderr.strip().splitlines()
    assert "--notice-signal" in line and "SIGTERM" in line
    assert not launcher.run_dir.exists()


def _catches(pid: int, signum: int) -> bool | None:
    """Whether process ``pid`` has a handler for ``signum`` (its SigCgt mask in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1) or None
    return None


# Blocks SIGUSR1, sends it to itself (pending), then becomes the launcher: a notice sent during the exec.
_EXEC_BLOCKED = ("import os, signal, sys; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1}); "
                 "os.kill(os.getpid(), signal.SIGUSR1); os.execv(sys.argv[1], sys.argv[1:])")


def test_a_sigusr1_pending_through_the_exec_of_a_launcher_started_blocked_is_its_notice(
    launcher: Launcher, tmp_path: Path
) -> None:
    """The one moment no handler can hold a notice is the interpreter's own start; a wrapper that
    starts elastic with SIGUSR1 blocked keeps a notice sent then pending, and the run ends as a
    notice does, exit 75. Before, the hold left it blocked: the notice was never heard."""
    argv = launcher.argv(("--nproc-per-node", 1), script("save_on_notice.py", tmp_path, "flag"))
    with (tmp_path / "launcher.stderr").open("wb") as stderr:
        process = launcher.start_argv([sys.executable, "-c", _EXEC_BLOCKED, *argv], env=None,
                                      stdout=subprocess.DEVNULL, stderr=stderr.fileno())
    run = launcher.finished(process)

    assert 75 == run.returncode, run.explain()
    [notice] = run.events("preemption_noticed")
    assert "signal SIGUSR1" == notice["source"]


@pytest.mark.parametrize(("notice_signal", "ends"), [("USR1", 75), ("USR2", -signal.SIGUSR1)],
                         ids=["the-notice-signal-is-held", "another-signal-does-what-it-did"])
def test_a_sigusr1_while_the_launcher_imports_itself_is_a_notice_not_its_death(
    launcher: Launcher, tmp_path: Path, notice_signal: str, ends: int
) -> None:
    """SIGUSR1 the moment `python -m elastic` has its first handler, while it still imports itself
    (a second or more, before any flag is read): with the default --notice-signal the run ends as
    a notice does, exit 75 to be requeued, where it used to die of the signal (a spot notice to a
    job that had just been requeued failed it). When --notice-signal names another signal,
    SIGUSR1 does what it always did."""
    process = launcher.start("--nproc-per-node", 1, "--notice-signal", notice_signal,
                             command=script("save_on_notice.py", tmp_path, "flag"))
    wait_for(lambda: _catches(process.pid, signal.SIGUSR1), "the launcher's first handler", timeout_s=30)
    os.kill(process.pid, signal.SIGUSR1)
    run = launcher.finished(process)

    assert ends == run.returncode, run.explain()
    if ends == 75:
        [notice] = run.events("preemption_noticed")
        assert "signal SIGUSR1" == notice["source"]
