"""A dead driver costs no step: a rerun with the same --run-id takes the running attempt over with
its ranks (same pids, no restart, no step lost or redone), and a rank that ended while no driver
was there is judged as if the driver had seen it end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from harness import REPO, Launcher, differing_tensors, is_alive, script, wait_for

from elastic.node.process_record import read_record, write_record

DDP_EXAMPLE = REPO / "examples" / "torch_ddp.py"

GRACE_S = 5.0
STEPS = 160  # 8 s of steps at 0.05 s each


def _pids(pid_dir: Path, attempt: int) -> list[int]:
    return [int((pid_dir / f"attempt-{attempt}-rank-{rank}.pid").read_text()) for rank in (0, 1)]


def _steps(log: str) -> list[int]:
    return [int(line.split()[1]) for line in log.splitlines() if line.startswith("step ")]


def _sigkill_driver_at_step(launcher: Launcher, pid_dir: Path, options: tuple[object, ...], step: int) -> list[int]:
    first = launcher.start(*options, command=script("steps_then_exit.py", pid_dir, STEPS))
    wait_for(lambda: (pid_dir / "attempt-0-rank-1.pid").exists() and (pid_dir / "attempt-0-rank-0.pid").exists(),
             "both ranks started")
    log = launcher.run_dir / "attempt-0" / "rank-0.log"
    wait_for(lambda: len(_steps(log.read_text())) >= step, f"rank 0 at step {step}")
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    return _pids(pid_dir, 0)


def test_a_rerun_takes_the_running_attempt_over_and_it_ends_as_if_its_driver_had_lived(
    launcher: Launcher, pid_dir: Path
) -> None:
    """The driver SIGKILLed at step 20; the rerun adopts attempt 0: the ranks keep their pids and
    print every step once, in order; no second attempt; the run succeeds."""
    options = ("--run-id", "adopt", "--nproc-per-node", 2, "--orphan-lease", 60, "--grace-period", GRACE_S)
    ranks = _sigkill_driver_at_step(launcher, pid_dir, options, 20)
    assert all(is_alive(pid) for pid in ranks)

    finished = launcher.run(*options, command=script("steps_then_exit.py", pid_dir, STEPS))

    assert 0 == finished.returncode, finished.explain()
    [adopted] = finished.events("attempt_adopted")
    assert (0, 2, 0) == (adopted["attempt"], adopted["world_size"], adopted["exits_kept"])
    assert [0] == [e["attempt"] for e in finished.events("attempt_started")]
    assert not finished.events("leftovers_stopped") and not finished.events("worker_failed")
    assert not list(pid_dir.glob("attempt-1-*"))  # no rank started again
    for rank in (0, 1):
        assert list(range(1, STEPS + 1)) == _steps(finished.rank_log(0, rank))  # no step lost or redone
    assert "succeeded" == finished.events("run_finished")[-1]["outcome"]


def test_a_rank_killed_while_no_driver_is_there_is_judged_as_if_the_driver_had_seen_it(
    launcher: Launcher, pid_dir: Path
) -> None:
    """Rank 1 SIGKILLed between the driver's death and the rerun: the rerun adopts the attempt,
    hears rank 1's SIGKILL dated before the takeover, stops rank 0 as a failure's survivor and
    restarts once, as a live driver does; the run succeeds on attempt 1."""
    options = ("--run-id", "adopt", "--nproc-per-node", 2, "--orphan-lease", 60, "--grace-period", GRACE_S,
               "--max-restarts", 1)
    ranks = _sigkill_driver_at_step(launcher, pid_dir, options, 20)
    os.kill(ranks[1], signal.SIGKILL)
    wait_for(lambda: not is_alive(ranks[1]), "rank 1 reaped by its keeper")
    time.sleep(0.5)

    finished = launcher.run(*options, command=script("steps_then_exit.py", pid_dir, STEPS))

    assert 0 == finished.returncode, finished.explain()
    [adopted] = finished.events("attempt_adopted")
    assert (0, 1) == (adopted["attempt"], adopted["exits_kept"])
    [failed] = [e for e in finished.events("worker_failed") if e["attempt"] == 0]
    assert (1, "SIGKILL") == (failed["rank"], failed.get("signal")), failed
    assert [0, 1] == [e["attempt"] for e in finished.events("attempt_started")]
    assert 1 == len(finished.events("restart_scheduled"))
    assert (pid_dir / "stopped-0-0").exists()  # rank 0 stopped with the grace, as a survivor
    assert STEPS == len(_steps(finished.rank_log(1, 0)))


def test_a_ddp_run_whose_driver_is_sigkilled_and_taken_over_ends_bit_identical_without_a_restart(
    launcher: Launcher, tmp_path: Path
) -> None:
    """Real DDP ranks (gloo): the driver SIGKILLed after step 20, a new `elastic run --run-id` 2 s
    later takes them over; they train on through the outage, no step lost or redone (each
    checkpoint line once, one start), and the final weights match an uninterrupted run's to the bit."""
    pytest.importorskip("torch")
    steps, every = 60, 10

    def options(name: str) -> tuple[object, ...]:
        return ("--run-id", f"ddp{name}", "--nproc-per-node", 2, "--max-restarts", 3, "--orphan-lease", 60,
                "--checkpoint-dir", tmp_path / f"ckpt{name}")

    def command(name: str, sleep_s: float) -> list[object]:
        return [sys.executable, DDP_EXAMPLE, "--steps", steps, "--checkpoint-every", every,
                "--output", tmp_path / f"final{name}.pt", "--step-sleep", sleep_s]

    launcher.run_dir = tmp_path / "runA"
    first = launcher.start(*options("A"), command=command("A", 0.1))
    log = launcher.run_dir / "attempt-0" / "rank-0.log"
    wait_for(lambda: log.exists() and f"step=20/{steps}" in log.read_text(), "rank 0 at step 20", 60)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    time.sleep(2.0)
    taken_over = launcher.run(*options("A"), command=command("A", 0.1))
    launcher.run_dir = tmp_path / "runB"
    uninterrupted = launcher.run(*options("B"), command=command("B", 0.0))

    assert 0 == taken_over.returncode, taken_over.explain()
    assert 0 == uninterrupted.returncode, uninterrupted.explain()
    assert [0] == [e["attempt"] for e in taken_over.events("attempt_adopted")]
    assert [0] == [e["attempt"] for e in taken_over.events("attempt_started")]  # no restart
    for rank in (0, 1):
        lines = taken_over.rank_log(0, rank).splitlines()
        assert 1 == sum("first_step=1" in line for line in lines)  # started once, never resumed
        assert [f"step={s}/{steps}" for s in range(every, steps + 1, every)] == [
            line.split()[1] for line in lines if f"/{steps} loss=" in line]  # every step once
    assert [] == differing_tensors(tmp_path / "finalB.pt", tmp_path / "finalA.pt")


def test_a_jax_job_whose_driver_is_sigkilled_is_taken_over_and_trains_every_step_once(
    launcher: Launcher, pid_dir: Path
) -> None:
    """A bare `jax.distributed.initialize()` job (its coordinator in process 0, not the driver):
    the driver SIGKILLed at step 20, the rerun takes both processes over; every step is printed
    once, no restart, and each process's sum over every collective is the uninterrupted one."""
    pytest.importorskip("jax")
    steps = 120
    options = ("--run-id", "jax", "--nproc-per-node", 2, "--orphan-lease", 60)
    command = script("jax_steps.py", pid_dir, steps)
    first = launcher.start(*options, command=command)
    log = launcher.run_dir / "attempt-0" / "rank-0.log"
    wait_for(lambda: log.exists() and len(_steps(log.read_text())) >= 20, "process 0 at step 20", 60)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)

    finished = launcher.run(*options, command=command)

    assert 0 == finished.returncode, finished.explain()
    assert [0] == [e["attempt"] for e in finished.events("attempt_adopted")]
    assert [0] == [e["attempt"] for e in finished.events("attempt_started")]
    for rank in (0, 1):
        assert list(range(1, steps + 1)) == _steps(finished.rank_log(0, rank))
    expected = sum(20 * step + 1 for step in range(1, steps + 1))  # each step gathers 10s+0 and 10s+1
    assert [expected, expected] == [int((pid_dir / f"final-{rank}.txt").read_text()) for rank in (0, 1)]


def test_a_rerun_with_another_command_drains_the_kept_ranks_and_starts_its_own(
    launcher: Launcher, pid_dir: Path
) -> None:
    """The rerun asks for another job (more steps): it does not go on with the old command's
    ranks; they are drained (SIGTERM, the grace), the journal says why, and attempt 1 runs the new one."""
    options = ("--run-id", "adopt", "--nproc-per-node", 2, "--orphan-lease", 60, "--grace-period", GRACE_S)
    ranks = _sigkill_driver_at_step(launcher, pid_dir, options, 20)

    finished = launcher.run(*options, command=script("steps_then_exit.py", pid_dir, 30))

    assert 0 == finished.returncode, finished.explain()
    assert not finished.events("attempt_adopted")
    [stopped] = finished.events("leftovers_stopped")
    assert stopped["keeper_refused"].startswith("the rerun's command")
    assert (pid_dir / "stopped-0-0").exists() and (pid_dir / "stopped-0-1").exists()  # drained with their grace
    assert [0, 1] == [e["attempt"] for e in finished.events("attempt_started")]
    assert not any(is_alive(pid) for pid in ranks)


def test_a_driver_that_took_the_ranks_over_can_die_and_be_taken_over_in_turn(
    launcher: Launcher, pid_dir: Path
) -> None:
    """Two driver deaths in a row: each rerun takes the same ranks over (the keeper serves the
    newest generation), and the run ends with every step once and no restart."""
    options = ("--run-id", "adopt", "--nproc-per-node", 2, "--orphan-lease", 60, "--grace-period", GRACE_S)
    command = script("steps_then_exit.py", pid_dir, STEPS)
    ranks = _sigkill_driver_at_step(launcher, pid_dir, options, 20)
    second = launcher.start(*options, command=command)
    launcher.wait_for_event("attempt_adopted")
    log = launcher.run_dir / "attempt-0" / "rank-0.log"
    wait_for(lambda: len(_steps(log.read_text())) >= 60, "rank 0 at step 60 under the second driver")
    os.kill(second.pid, signal.SIGKILL)
    second.wait(10)

    finished = launcher.run(*options, command=command)

    assert 0 == finished.returncode, finished.explain()
    assert [(0, 2), (0, 3)] == [(e["attempt"], e["generation"]) for e in finished.events("attempt_adopted")]
    assert [0] == [e["attempt"] for e in finished.events("attempt_started")]
    assert ranks == _pids(pid_dir, 0) and not list(pid_dir.glob("attempt-1-*"))
    for rank in (0, 1):
        assert list(range(1, STEPS + 1)) == _steps(finished.rank_log(0, rank))


def test_a_record_naming_a_pid_now_owned_by_another_process_takes_nothing_over_and_stops_nothing(
    launcher: Launcher, pid_dir: Path, tmp_path: Path
) -> None:
    """The dead driver's keeper is gone (its lease ran out) and keeper.json now names a pid another
    process holds (an unrelated sleeper put in its place, with the keeper's start time): the rerun
    believes none of it, leaves the sleeper alone, adopts nothing and starts attempt 1."""
    options = ("--run-id", "adopt", "--nproc-per-node", 2, "--orphan-lease", 1, "--grace-period", 1)
    ranks = _sigkill_driver_at_step(launcher, pid_dir, options, 5)
    record = launcher.run_dir / "keeper.json"
    fields, processes = read_record(record)
    keeper = next(p for p in processes if p.pid == fields["keeper"])
    wait_for(lambda: not any(is_alive(pid) for pid in [*ranks, keeper.pid]), "the lease over, everything drained")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        impostor = replace(keeper, pid=sleeper.pid)  # the keeper's start time and boot, another pid
        write_record(record, {**fields, "keeper": sleeper.pid}, [impostor])

        finished = launcher.run(*options, command=script("steps_then_exit.py", pid_dir, 10))

        assert 0 == finished.returncode, finished.explain()
        assert None is sleeper.poll()  # not the process recorded: left alone
        assert not finished.events("attempt_adopted") and not finished.events("leftovers_stopped")
        assert [0, 1] == [e["attempt"] for e in finished.events("attempt_started")]
    finally:
        sleeper.kill()
        sleeper.wait()
