"""A driver killed mid-run is replaced by rerunning the same command with the same --run-id."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from harness import Launcher, is_alive, latest_step, rank_processes, read_pids, script, status_text, wait_for

from elastic.core.exit_codes import ExitCode


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


def test_rerun_after_driver_sigkill_keeps_the_crash_loop_streak_backoff_level_and_world(
    launcher: Launcher, pid_dir: Path, tmp_path: Path
) -> None:
    """What the dead driver had counted goes on: attempt 0's failure made the streak 1; the attempt
    it was running when it died (training, no failure) was ended by the death, not by the program,
    so the streak stays 1; the resumed attempts' two failures make three in a row (--max-no-progress
    3 fires), the last waiting at backoff level 1; its world is compared with the dead driver's last
    (ELASTIC_WORLD_CHANGED=1: the rerun asks for one rank per node, not two)."""
    checkpoints, out = tmp_path / "ckpt", tmp_path / "out"
    checkpoints.mkdir()
    out.mkdir()
    options = ("--run-id", "streak", "--max-restarts", 9, "--max-no-progress", 3,
               "--checkpoint-dir", checkpoints, "--backoff", "0.1:10")  # fmt: skip
    command = script("world_probe.py", pid_dir, out, "0=exit:1", "1=sleep", "2=exit:1", "3=exit:1")
    first = launcher.start(*options, "--nproc-per-node", 2, command=command)
    ranks = read_pids(pid_dir, 2)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    wait_for(lambda: not any(is_alive(rank) for rank in ranks), f"ranks {ranks} gone with their driver", 5)

    finished = launcher.run(*options, "--nproc-per-node", 1, command=command)

    assert ExitCode.CRASH_LOOP == finished.returncode, finished.explain()
    assert [0, 1, 2, 3] == [e["attempt"] for e in finished.events("attempt_started")]
    [resumed] = finished.events("run_resumed")
    assert 1 == resumed["no_progress_streak"]  # attempt 0 ended without a newer checkpoint
    [cut_short] = [e for e in finished.events("workers_stopped") if e.get("reason") == "its driver died"]
    assert (1, False, 1) == (cut_short["attempt"], cut_short["made_progress"], cut_short["no_progress_streak"])
    [backoff] = finished.events("backoff_started")
    assert (3, 1) == (backoff["attempt"], backoff["level"])
    assert 0.1 <= backoff["delay_s"] <= 0.15
    [crash_loop] = finished.events("crash_loop_detected")
    assert "3 attempts in a row" in crash_loop["reason"]
    assert ["2 0", "2 0"] == [(out / f"attempt-1-rank-{r}").read_text().strip() for r in (0, 1)]
    assert "1 1" == (out / "attempt-2-rank-0").read_text().strip()
    report = finished.report()  # the whole run: the dead driver's attempts too (1: ended by its death)
    assert [(0, True), (1, False), (2, True), (3, False)] == [(a["attempt"], a["restarted"]) for a in report["attempts"]]
    assert ("failed", 76) == (report["outcome"], report["exit_status"])


def _largest_cause(status: str) -> str:
    """The first cause of `elastic status`'s ledger table, the one with the most seconds, of the
    attempts' (the launcher's own, its start-up included, left out: on a busy machine it can outlast
    a short attempt)."""
    lines = status.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("where the time went"))
    return next(line for line in lines[start + 1:] if not line.strip().startswith("other (launcher)"))


def test_the_attempt_a_driver_died_in_says_so_with_the_steps_it_trained(launcher: Launcher) -> None:
    """A driver SIGKILLed at step 40 (2 s of steps) had journaled only its attempt's first step:
    `elastic status` of the dead driver's run and the driver that takes it over read how far the
    ranks got (their logs, its state.json), so the summary says the driver died after 40 steps at
    least, and the ledger counts that attempt's time after its first step as training, not start-up."""
    options = ("--run-id", "killed", "--max-restarts", 0)
    first = launcher.start(*options, command=script("prints_steps.py", "plain", "steps", 1000))
    log = launcher.run_dir / "attempt-0" / "rank-0.log"
    rank = wait_for(lambda: (rank_processes(first.pid).get(0)
                             if log.exists() and (latest_step(log.read_text()) or 0) >= 40 else None),
                    "rank 0 at step 40")
    os.kill(first.pid, signal.SIGKILL)  # by pid: the launcher this test started
    first.wait(10)
    wait_for(lambda: not is_alive(rank), f"rank {rank} gone with its driver", 5)
    trained = latest_step(log.read_text()) or 0
    before = status_text(launcher.run_dir)
    assert f"attempt 0: seen at step {trained} at least when its driver died" in before, before
    assert _largest_cause(before).strip().startswith("productive training"), before

    finished = launcher.run(*options, command=script("prints_steps.py", "plain", "steps", 5))

    assert 0 == finished.returncode, finished.explain()
    [died] = [e for e in finished.events("workers_stopped") if e.get("reason") == "its driver died"]
    assert died["last_step"] == trained
    line = next(line for line in finished.stderr.splitlines() if line.startswith("  attempt 0: "))
    assert f", its driver died after {trained} steps at least (to step {trained})" in line, line
    attempt = finished.report()["attempts"][0]
    assert (trained, True) == (attempt["driver_died"]["step"], attempt["driver_died"]["at_least"])
    ledger = attempt["ledger"]
    assert ledger["productive"] > ledger["startup"] and ledger["productive"] >= 1.5, ledger  # 40 steps of 0.05 s
    assert f"attempt 0: its driver died after {trained} steps at least" in status_text(launcher.run_dir)


@pytest.mark.parametrize(("code", "outcome"), [(0, "succeeded"), (3, "failed")])
def test_a_finished_run_is_not_rerun(launcher: Launcher, code: int, outcome: str) -> None:
    """Reusing the --run-id of a run that succeeded or failed is a one-line usage error that says so."""
    assert code == launcher.run("--run-id", "done-once", command=script("exit_with.py", code)).returncode
    again = launcher.run("--run-id", "done-once", command=script("exit_with.py", 0))

    assert 2 == again.returncode, again.explain()
    [line] = again.stderr.splitlines()
    assert f"already finished ({outcome}); choose another --run-id" in line, line
    assert 1 == len(again.events("run_started"))  # nothing launched, nothing written


@pytest.mark.parametrize(
    ("signum", "status"),
    [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)],
    ids=["SIGTERM", "SIGINT", "SIGHUP"],
)
def test_a_run_stopped_by_a_signal_is_continued_by_a_rerun_with_its_run_id(
    launcher: Launcher, pid_dir: Path, tmp_path: Path, signum: int, status: int
) -> None:
    """A launcher stopped from outside (a scheduler's SIGTERM before it requeues the job, an
    eviction, a Ctrl-C) leaves a paused run: rerun with the same --run-id, it goes on with the next
    attempt, the restarts already charged, the crash-loop streak (which the stopped attempt's new
    checkpoint ended: no crash loop at --max-no-progress 2) and the latest checkpoint."""
    checkpoints = tmp_path / "ckpt"
    checkpoints.mkdir()
    options = ("--run-id", "paused", "--max-restarts", 2, "--max-no-progress", 2,
               "--checkpoint-dir", checkpoints, "--backoff", "0:0")  # fmt: skip
    command = script("by_attempt.py", pid_dir, "0=exit:1", "1=sleep", "2=exit:1", "3=exit:0")
    process = launcher.start(*options, command=command)
    read_pids(pid_dir, 1)  # attempt 1 is running
    (checkpoints / "step_7").mkdir()
    (checkpoints / "step_7" / "COMMITTED").touch()
    os.kill(process.pid, signum)
    stopped = launcher.finished(process)
    assert (status, "stopped") == (stopped.returncode, stopped.report()["outcome"]), stopped.explain()
    assert "stopped, not over: rerun with --run-id paused to continue this run" in stopped.stderr

    continued = launcher.run(*options, command=command)

    assert 0 == continued.returncode, continued.explain()
    assert [0, 1, 2, 3] == [e["attempt"] for e in continued.events("attempt_started")]
    assert [None, None, 7, 7] == [e["resume_step"] for e in continued.events("attempt_started")]
    [resumed] = continued.events("run_resumed")
    assert (2, 1, "stopped", status) == (
        resumed["attempt"], resumed["failures_charged"], resumed["previous_outcome"], resumed["previous_exit_status"]
    )
    assert [1, 0] == [e["remaining"] for e in continued.events("restart_scheduled")]  # 2 allowed, 1 was spent
    assert [1, 0, 1, 1] == [e["no_progress_streak"] for e in continued.events("workers_stopped")]
    report = continued.report()
    assert ("succeeded", [0, 1, 2, 3]) == (report["outcome"], [a["attempt"] for a in report["attempts"]])


def test_a_rerun_while_the_driver_holds_the_lock_is_refused_and_after_its_death_accepted(
    launcher: Launcher, pid_dir: Path
) -> None:
    """The driver's flock on the run directory: held, a rerun exits 73 (its own status) naming its pid in
    one line; SIGKILLed, released."""
    options = ("--run-id", "locked", "--backoff", "0:0")
    command = script("by_attempt.py", pid_dir, "0=sleep")
    first = launcher.start(*options, command=command)
    [rank] = read_pids(pid_dir, 1)

    refused = launcher.run(*options, command=command)

    assert ExitCode.RUN_HELD == refused.returncode, refused.explain()
    [line] = refused.stderr.splitlines()
    assert f"still being driven by pid {first.pid}" in line, line
    assert is_alive(rank) and first.poll() is None
    assert [] == refused.events("run_resumed")

    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    wait_for(lambda: not is_alive(rank), f"rank {rank} gone with its driver", 5)
    accepted = launcher.run(*options, command=command)

    assert 0 == accepted.returncode, accepted.explain()
    [resumed] = accepted.events("run_resumed")
    assert first.pid == resumed["previous_driver_pid"]


def test_a_live_process_that_reuses_the_dead_drivers_pid_does_not_block_the_rerun(
    launcher: Launcher, pid_dir: Path, tmp_path: Path
) -> None:
    """Liveness is the lock, not a pid whose command line says 'elastic' (PID reuse)."""
    options = ("--run-id", "reused", "--backoff", "0:0")
    command = script("by_attempt.py", pid_dir, "0=sleep")
    first = launcher.start(*options, command=command)
    [rank] = read_pids(pid_dir, 1)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    wait_for(lambda: not is_alive(rank), f"rank {rank} gone with its driver", 5)
    impostor = launcher.start_argv(
        [sys.executable, "-c", "import time; time.sleep(60)", "elastic", "run"],
        env=None, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    journal = launcher.run_dir / "journal.jsonl"
    journal.write_text(journal.read_text().replace(f'"pid":{first.pid}', f'"pid":{impostor.pid}'))

    accepted = launcher.run(*options, command=command)

    assert 0 == accepted.returncode, accepted.explain()
    [resumed] = accepted.events("run_resumed")
    assert impostor.pid == resumed["previous_driver_pid"]


def test_a_run_whose_driver_was_killed_during_the_success_drain_is_finished_by_a_rerun(
    launcher: Launcher, tmp_path: Path
) -> None:
    """Every rank exited 0 and the drain was journaled, then the driver was SIGKILLed before it
    recorded the end: the rerun with its --run-id records the success (exit 0, report.json,
    the summary) and starts no rank. The driver is held right after the drain's journal sync by
    a FIFO where its next state.json write goes (it blocks opening it), so the kill lands in
    the drain every time; the FIFO is removed before the rerun, as a crash leaves none."""
    go, runs = tmp_path / "go", tmp_path / "runs"
    code = "import os, sys, time\nopen(sys.argv[2], 'a').write('ran\\n')\n" \
        "while not os.path.exists(sys.argv[1]): time.sleep(0.02)\n"
    command = [sys.executable, "-c", code, go, runs]
    options = ("--run-id", "drained")
    first = launcher.start(*options, command=command)
    wait_for(lambda: runs.exists(), "the rank started", 60)
    state = launcher.run_dir / "state.json"
    wait_for(lambda: state.exists() and '"phase": "running"' in state.read_text(), "state.json says running", 60)
    held = launcher.run_dir / ".state.json.tmp"
    os.mkfifo(held)
    go.touch()
    wait_for(lambda: '"dest":"draining"' in (launcher.run_dir / "journal.jsonl").read_text(), "the success drain", 60)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    held.unlink()
    dead = [json.loads(line) for line in (launcher.run_dir / "journal.jsonl").read_text().splitlines()]
    assert [] == [e for e in dead if e["event"] in ("workers_stopped", "run_finished")]
    assert not (launcher.run_dir / "report.json").exists()

    rerun = launcher.run(*options, command=command)

    assert 0 == rerun.returncode, rerun.explain()
    assert "ran\n" == runs.read_text()  # the rank's code ran once: nothing trained again
    assert [0] == [e["attempt"] for e in rerun.events("attempt_started")]
    [finished] = rerun.events("run_finished")
    assert ("succeeded", 0, 0) == (finished["outcome"], finished["exit_status"], finished["attempt"])
    assert "its driver died before it recorded the run's end" in finished["reason"]
    report = rerun.report()
    assert ("succeeded", [0]) == (report["outcome"], [a["attempt"] for a in report["attempts"]])
    assert "run drained succeeded after 1 attempt" in rerun.stderr, rerun.stderr
