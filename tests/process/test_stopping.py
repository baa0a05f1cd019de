"""Draining and dying with real signals: nothing a rank started outlives the launcher."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from harness import RUN_TIMEOUT_S, Launcher, is_alive, launcher_env, per_rank, read_pids, script, wait_for

# Generous bound on "gone at once" checks; the spec says within 1 s (DESIGN §12).
GONE_BOUND_S = 5.0


def _alive(pids: list[int]) -> list[int]:
    return [pid for pid in pids if is_alive(pid)]


def test_rank_ignoring_sigterm_is_sigkilled_after_the_grace_period(
    launcher: Launcher, pid_dir: Path
) -> None:
    """A rank ignoring SIGTERM is SIGKILLed once --grace-period passes; the run ends, it is gone."""
    finished = launcher.run(
        "--nproc-per-node",
        2,
        "--grace-period",
        0.5,
        command=per_rank(
            ["exit_with.py", 3, "--wait-for", pid_dir / "rank-1.pid"],
            ["ignore_sigterm.py", pid_dir],
        ),
    )

    assert 3 == finished.returncode, finished.explain()
    [stubborn] = read_pids(pid_dir, 1)
    assert not is_alive(stubborn)
    by_rank = {e["rank"]: e for e in finished.events("worker_failed")}
    assert ("collateral", "SIGKILL") == (by_rank[1]["kind"], by_rank[1]["signal"])


@pytest.mark.parametrize("code", [0, 3], ids=["rank-succeeds", "rank-fails"])
def test_a_ranks_grandchild_is_killed_when_the_group_is_drained(
    launcher: Launcher, pid_dir: Path, code: int
) -> None:
    """A child left running by a rank that exited is killed with the rank's group on drain."""
    finished = launcher.run(command=script("spawn_grandchild.py", pid_dir, "--exit", code))

    assert code == finished.returncode, finished.explain()
    rank, grandchild = read_pids(pid_dir, 1)
    wait_for(
        lambda: not _alive([rank, grandchild]),
        f"rank {rank} and its child {grandchild} gone",
        GONE_BOUND_S,
    )


@pytest.mark.parametrize(
    ("signum", "status"),
    [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)],
    ids=["SIGTERM", "SIGINT", "SIGHUP"],
)
def test_stop_signal_to_the_launcher_drains_everything_and_exits_128_plus_n(
    launcher: Launcher, pid_dir: Path, signum: int, status: int
) -> None:
    """A stop signal N to the launcher ends it with 128+N, and no rank or grandchild survives."""
    process = launcher.start(
        "--nproc-per-node", 2, "--grace-period", 5, command=script("spawn_grandchild.py", pid_dir)
    )
    pids = read_pids(pid_dir, 2)
    assert pids == _alive(pids)

    os.kill(process.pid, signum)
    finished = launcher.finished(process)

    assert status == finished.returncode, finished.explain()
    wait_for(lambda: not _alive(pids), f"ranks and grandchildren {pids} gone", GONE_BOUND_S)
    report = finished.report()
    assert ("stopped", status) == (report["outcome"], report["exit_status"])
    [stop] = finished.events("stop_requested")
    assert signal.Signals(signum).name == stop["signal"]


def test_a_sigterm_to_every_process_leaves_the_ranks_their_grace_to_save(launcher: Launcher, tmp_path: Path) -> None:
    """SIGTERM to every process of the run at once (Slurm's scancel and requeue signal the job's
    whole cgroup; a node's shutdown): the ranks' own handlers get the grace period to save; nothing
    of elastic's on the node (its process spawner) ends them sooner."""
    out = tmp_path / "out"
    out.mkdir()
    process = launcher.start(
        "--nproc-per-node", 2, "--grace-period", 20, command=script("save_on_sigterm.py", out, 1.5)
    )
    wait_for(lambda: all((out / f"ready-{r}").exists() for r in (0, 1)), "both ranks ready", RUN_TIMEOUT_S)
    # As Slurm's step cgroup is signalled: the launcher and everything under it, at once.
    everyone = [process.pid, *(child.pid for child in psutil.Process(process.pid).children(recursive=True))]
    for pid in everyone:
        os.kill(pid, signal.SIGTERM)
    finished = launcher.finished(process)

    assert 143 == finished.returncode, finished.explain()
    assert [True, True] == [(out / f"saved-{r}").exists() for r in (0, 1)], finished.explain()


def test_second_sigint_kills_ranks_at_once_instead_of_waiting_out_the_grace_period(
    launcher: Launcher, pid_dir: Path
) -> None:
    """Ranks ignoring SIGINT, 30 s grace: a second SIGINT ends the run at once with 130."""
    grace_s = 30.0
    process = launcher.start(
        "--nproc-per-node",
        2,
        "--grace-period",
        grace_s,
        command=script("ignore_sigterm.py", pid_dir),
    )
    pids = read_pids(pid_dir, 2)
    started_at = time.monotonic()
    os.kill(process.pid, signal.SIGINT)
    launcher.wait_for_event("stop_requested")
    assert pids == _alive(pids), "ranks ignore the first SIGINT"

    os.kill(process.pid, signal.SIGINT)
    finished = launcher.finished(process, timeout_s=grace_s - 5)
    took_s = time.monotonic() - started_at

    assert 130 == finished.returncode, finished.explain()
    assert took_s < grace_s / 2, f"the run took {took_s:.2f}s, the grace period is {grace_s}s"
    assert [] == _alive(pids)


def test_sigkill_to_the_launcher_takes_ranks_and_grandchildren_with_it(
    launcher: Launcher, pid_dir: Path
) -> None:
    """A SIGKILLed launcher's ranks and their children die within a second (bound here: 5 s)."""
    process = launcher.start("--nproc-per-node", 2, command=script("spawn_grandchild.py", pid_dir))
    pids = read_pids(pid_dir, 2)
    assert pids == _alive(pids)

    os.kill(process.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    process.wait(10)
    deadline_at = killed_at + GONE_BOUND_S
    while _alive(pids) and time.monotonic() < deadline_at:
        time.sleep(0.01)
    took_s = time.monotonic() - killed_at

    assert [] == _alive(pids), f"still alive {took_s:.2f}s after the launcher's SIGKILL"


def test_stop_signal_during_a_restart_drain_ends_the_run_instead_of_relaunching(
    launcher: Launcher, pid_dir: Path
) -> None:
    """SIGTERM to the launcher while it drains for a restart stops the run (143), no relaunch."""
    process = launcher.start(
        "--nproc-per-node",
        2,
        "--max-restarts",
        3,
        "--grace-period",
        2,  # the window in which the SIGTERM must land
        command=per_rank(
            ["exit_with.py", 1, "--wait-for", pid_dir / "rank-1.pid"],
            ["ignore_sigterm.py", pid_dir],
        ),
    )
    launcher.wait_for_event("restart_scheduled")

    os.kill(process.pid, signal.SIGTERM)
    finished = launcher.finished(process)

    assert 143 == finished.returncode, finished.explain()
    assert 1 == len(finished.events("attempt_started"))
    report = finished.report()
    assert ("stopped", 1, False) == (
        report["outcome"],
        len(report["attempts"]),
        report["attempts"][0]["restarted"],
    )
    assert [] == _alive(read_pids(pid_dir, 1))


def test_a_stop_after_a_recovered_failure_reports_no_root_cause(
    launcher: Launcher, tmp_path: Path, pid_dir: Path
) -> None:
    """Rank 1 exits 3 in attempt 0 and the run restarts; SIGTERM in attempt 1 stops it (143).
    The recovered failure of attempt 0 is no root cause: not in run_finished, report.json
    or `elastic status`, which still list it as attempt 0's failure."""
    unused = tmp_path / "rank-0-pids"
    unused.mkdir()
    process = launcher.start(
        "--nproc-per-node",
        2,
        "--max-restarts",
        2,
        command=per_rank(
            ["by_attempt.py", unused, "0=sleep", "1=sleep"],
            ["by_attempt.py", pid_dir, "0=exit:3", "1=sleep"],
        ),
    )
    [rank_1] = read_pids(pid_dir, 1)  # written in attempt 1 only: attempt 1 is running

    os.kill(process.pid, signal.SIGTERM)
    finished = launcher.finished(process)

    assert 143 == finished.returncode, finished.explain()
    [done] = finished.events("run_finished")
    assert ("stopped", None) == (done["outcome"], done["root_cause"])
    report = finished.report()
    assert ("stopped", None, 2) == (report["outcome"], report["root_cause"], len(report["attempts"]))
    assert 3 == report["attempts"][0]["root_cause"]["exit_status"]
    shown = subprocess.run(
        [sys.executable, "-m", "elastic", "status", str(launcher.run_dir)],
        check=False, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
        env=launcher_env(), stdin=subprocess.DEVNULL,
    )
    assert 0 == shown.returncode, shown.stderr
    assert "stopped" in shown.stdout and "root cause" not in shown.stdout, shown.stdout
    assert not is_alive(rank_1)


def test_a_kill_just_before_the_launchers_sigterm_is_part_of_the_stop_and_the_run_continues(
    launcher: Launcher, pid_dir: Path
) -> None:
    """A scheduler that ends a whole job (Slurm's requeue) signals every process at once, and a rank
    can die a moment before the launcher handles its SIGTERM: with no restart left, that kill would
    have ended the run as failed (137) and a rerun of the requeued job been refused. It is taken as
    the stop's doing: the run is stopped (143), and a rerun with its --run-id continues it."""
    options = ("--run-id", "job-stopped", "--nproc-per-node", 2, "--failure-grace", 5)
    command = script("ignore_sigterm.py", pid_dir, 0)  # rank 1 keeps the failure's drain open
    process = launcher.start(*options, command=command)
    rank_0, _ = read_pids(pid_dir, 2)
    os.kill(rank_0, signal.SIGKILL)  # by pid: a rank of the launcher this test started
    launcher.wait_for_event("budget_exhausted")
    os.kill(process.pid, signal.SIGTERM)
    stopped = launcher.finished(process)

    assert 143 == stopped.returncode, stopped.explain()
    [stop] = stopped.events("stop_requested")
    assert stop["failure_taken"].startswith("rank 0 on "), stop
    assert "taken as part of the stop" in stop["failure_taken"], stop
    report = stopped.report()
    assert ("stopped", 143, "killed") == (report["outcome"], report["exit_status"], report["root_cause"]["kind"])

    continued = launcher.run(*options, command=command)

    assert 0 == continued.returncode, continued.explain()
    assert [0, 1] == [e["attempt"] for e in continued.events("attempt_started")]


def test_an_exit_just_before_the_launchers_sigterm_leaves_the_run_failed(launcher: Launcher, pid_dir: Path) -> None:
    """A failure that is not a kill (an exit 3) just before the launcher's SIGTERM still ends the
    run as failed: a rerun with its --run-id is refused."""
    options = ("--run-id", "job-failed", "--nproc-per-node", 2, "--failure-grace", 5)
    command = per_rank(["exit_with.py", 3, "--wait-for", pid_dir / "rank-1.pid"], ["ignore_sigterm.py", pid_dir, 0])
    process = launcher.start(*options, command=command)
    launcher.wait_for_event("budget_exhausted")
    os.kill(process.pid, signal.SIGTERM)
    failed = launcher.finished(process)

    assert 3 == failed.returncode, failed.explain()
    assert "failure_taken" not in failed.events("stop_requested")[0]
    again = launcher.run(*options, command=command)
    assert 2 == again.returncode and "already finished (failed)" in again.stderr, again.explain()
