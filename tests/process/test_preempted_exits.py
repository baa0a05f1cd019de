"""Stopped is not finished, for real: a rank that catches a SIGTERM sent from outside the launcher,
saves and exits 0 was preempted; the run goes on from that save (charged to the preemption budget),
or, when the launcher itself is stopping, ends stopped and a rerun continues it. A run that really
finished, or whose rank said so before the signal, or that was signalled while exiting, succeeds."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from harness import Launcher, script, wait_for

from elastic.core.evidence import read_account

STEPS, PAUSE_S = 40, 0.1


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    checkpoints, out = tmp_path / "ckpt", tmp_path / "out"
    checkpoints.mkdir()
    out.mkdir()
    return checkpoints, out


def start(launcher: Launcher, dirs: tuple[Path, Path], *options: object, mode: str = "") -> object:
    checkpoints, out = dirs
    return launcher.start(
        "--nproc-per-node", 2, "--checkpoint-dir", checkpoints, *options,
        command=script("stops_on_signal.py", checkpoints, out, STEPS, PAUSE_S, *([mode] if mode else [])),
    )


def pid_of(out: Path, rank: int, attempt: int = 0) -> int:
    ready = out / f"ready-{attempt}-{rank}"
    return int(wait_for(lambda: ready.exists() and ready.read_text() or None, f"{ready}"))


def sigterm_at_step(launcher: Launcher, out: Path, rank: int, step: int) -> None:
    """SIGTERM from outside the launcher (a scheduler, an operator) to one rank, by its pid."""
    log = launcher.run_dir / "attempt-0" / f"rank-{rank}.log"
    pid = pid_of(out, rank)
    wait_for(lambda: log.exists() and f"step {step}\n" in log.read_text(), f"step {step} in {log}")
    os.kill(pid, signal.SIGTERM)


def first_steps(out: Path, attempt: int) -> list[int]:
    return [int((out / f"attempt-{attempt}-rank-{r}").read_text()) for r in (0, 1)]


def test_a_rank_that_saves_and_exits_0_on_an_outside_sigterm_is_preempted_and_the_run_finishes(
    launcher: Launcher, dirs: tuple[Path, Path]
) -> None:
    """SIGTERM to rank 1 at step 12: it exits 0 (before: 'succeeded' at step 12 of 40). Now the
    attempt is preempted, not finished: restarted with --max-restarts 0 (the preemption budget
    pays), its peer saved on the drain's SIGTERM, attempt 1 resumes after that save, to the end."""
    checkpoints, out = dirs
    process = start(launcher, dirs)
    sigterm_at_step(launcher, out, rank=1, step=12)
    finished = launcher.finished(process)  # type: ignore[arg-type]

    assert 0 == finished.returncode, finished.explain()
    first, second = finished.report()["attempts"]
    cause = first["root_cause"]
    assert ("preempted", 1, "SIGTERM", 0) == (cause["kind"], cause["rank"], cause["signal"], cause["exit_code"])
    assert "caught SIGTERM in its handler stop (stops_on_signal.py:" in cause["message"], cause
    [scheduled] = finished.events("restart_scheduled")
    assert "preemptions" == scheduled["budget"]
    resume = second["resume_step"]
    assert resume is not None and resume >= 12, second
    assert [resume + 1] * 2 == first_steps(out, 1)
    assert f"step {STEPS - 1}\n" in finished.rank_log(1, 0)
    assert "preempted: exited 0 after it caught SIGTERM" in finished.stderr


def test_a_run_that_finishes_with_no_signal_succeeds_in_one_attempt(launcher: Launcher, dirs: tuple[Path, Path]) -> None:
    """The same loop, its handler installed but never run: one attempt, success (no false restart)."""
    finished = launcher.finished(start(launcher, dirs))  # type: ignore[arg-type]

    assert 0 == finished.returncode, finished.explain()
    assert ("succeeded", 1) == (finished.report()["outcome"], len(finished.report()["attempts"]))
    signals = finished.run_dir / "attempt-0" / "rank-1.signals"  # the handler's install, no catch
    assert () == read_account(signals.read_text() if signals.exists() else "", now=0.0).caught


@pytest.mark.parametrize("mode", ["--done", "--at-exit"])
def test_a_signal_after_the_work_is_done_is_no_preemption(
    launcher: Launcher, dirs: tuple[Path, Path], mode: str
) -> None:
    """Rank 1 finished its steps, then got a SIGTERM from outside and exited 0 on it: after saying
    it was done (heartbeat(done=True)), or while its interpreter was exiting (an at-exit handler).
    The run succeeds in one attempt; the signals file says why the signal did not count."""
    _, out = dirs
    process = start(launcher, dirs, mode=mode)
    pid = pid_of(out, 1)
    marker = out / f"{'done' if mode == '--done' else 'exiting'}-0-1"
    wait_for(lambda: marker.exists(), f"{marker}")
    os.kill(pid, signal.SIGTERM)
    finished = launcher.finished(process)  # type: ignore[arg-type]

    assert 0 == finished.returncode, finished.explain()
    assert ("succeeded", 1) == (finished.report()["outcome"], len(finished.report()["attempts"])), finished.explain()
    assert [] == finished.events("worker_failed")
    signals = (finished.run_dir / "attempt-0" / "rank-1.signals").read_text()
    assert '"name": "SIGTERM"' in signals
    assert ('"at_exit": true' in signals) == (mode == "--at-exit")


def test_an_outside_sigterm_while_the_launcher_is_stopping_leaves_the_run_continuable(
    launcher: Launcher, dirs: tuple[Path, Path]
) -> None:
    """A scheduler signals a rank and the launcher together: the run ends stopped (143), and a
    rerun with the same --run-id continues it from the rank's save to the end."""
    checkpoints, out = dirs
    process = start(launcher, dirs, "--run-id", "stopping")
    sigterm_at_step(launcher, out, rank=1, step=12)
    os.kill(process.pid, signal.SIGTERM)  # type: ignore[attr-defined]  # by pid: the launcher this test started
    stopped = launcher.finished(process)  # type: ignore[arg-type]

    assert 143 == stopped.returncode, stopped.explain()
    assert "stopped" == stopped.report()["outcome"]
    assert "rerun with --run-id stopping to continue this run" in stopped.stderr
    saved = sorted(int(p.name.split("_")[1]) for p in checkpoints.glob("step_*"))
    assert saved and saved[-1] >= 11, saved
    rerun = launcher.finished(start(launcher, dirs, "--run-id", "stopping"))  # type: ignore[arg-type]
    assert 0 == rerun.returncode, rerun.explain()
    resumed = [e for e in rerun.events("attempt_started") if e["attempt"] > 0]
    assert resumed and saved[-1] == resumed[-1]["resume_step"], resumed
    assert f"step {STEPS - 1}\n" in rerun.rank_log(resumed[-1]["attempt"], 0)
