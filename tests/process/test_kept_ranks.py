"""--orphan-lease: a dead driver's ranks are kept by their spawner for the lease, then drained; a
clean end never waits for the lease; a rerun drains kept ranks before it starts its own; a new
driver can take a keeper over and hear its ranks' exits; a rank's output never waits for a
reader."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import replace
from pathlib import Path

import psutil
from harness import Launcher, is_alive, per_rank, read_pids, script, wait_for

from elastic.core.failures import WorkerExit
from elastic.core.messages import SignOfLife, StepsSeen
from elastic.core.takeover.lease import Lease
from elastic.core.training.stall import ProgressPolicy
from elastic.node.agent import NodeAgent
from elastic.node.process_record import read_record
from elastic.node.spawner.kept import AdoptedKeeper, KeepTerms, resume_keeper
from elastic.node.spawner.messages import OP_SIGNAL_ALL
from elastic.node.supervisor import ProcessSupervisor

LEASE_S = 3.0
GRACE_S = 5.0
# Past the lease and the grace: the keeper's turn of its loop, its sweep and its exit, on a busy machine.
MARGIN_S = 10.0


def _log_size(launcher: Launcher, rank: int) -> int:
    return (launcher.run_dir / "attempt-0" / f"rank-{rank}.log").stat().st_size


def _launcher_killed_with_ranks_kept(
    launcher: Launcher, pid_dir: Path, *, stepped: bool = False
) -> tuple[list[int], int]:
    """Two ranks of steps_until_stopped.py under a launcher with a lease (run id ``adopt``), which
    is then SIGKILLed (once rank 0 printed a step, if ``stepped``): the ranks' pids and their keeper's."""
    first = launcher.start("--run-id", "adopt", "--nproc-per-node", 2, "--orphan-lease", LEASE_S,
                           "--grace-period", GRACE_S, command=script("steps_until_stopped.py", pid_dir))
    ranks = read_pids(pid_dir, 2)
    keeper = int(read_record(launcher.run_dir / "keeper.json")[0]["keeper"])
    if stepped:
        wait_for(lambda: _log_size(launcher, 0) > 0, "rank 0's first step")
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    return ranks, keeper


def test_ranks_outlive_a_sigkilled_driver_for_the_lease_then_are_drained_and_nothing_is_left(
    launcher: Launcher, pid_dir: Path
) -> None:
    """The driver SIGKILLed, its ranks run on (same pids, output still growing) under their
    spawner; at the lease's end they get SIGTERM (they save), and once the grace is over
    nothing of the run is left: ranks and spawner gone (the suite's orphan check too)."""
    first = launcher.start("--nproc-per-node", 2, "--orphan-lease", LEASE_S, "--grace-period", GRACE_S,
                           command=script("steps_until_stopped.py", pid_dir))
    ranks = read_pids(pid_dir, 2)
    [keeper] = {psutil.Process(rank).ppid() for rank in ranks}
    wait_for(lambda: _log_size(launcher, 0) > 0, "rank 0's first step")
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    lost_at = time.time()
    size = _log_size(launcher, 0)

    wait_for(lambda: _log_size(launcher, 0) > size, "rank 0 stepping on without its driver", LEASE_S)
    assert all(is_alive(pid) for pid in [*ranks, keeper])
    assert {keeper} == {psutil.Process(rank).ppid() for rank in ranks}  # kept by their spawner still

    wait_for(lambda: not any(is_alive(pid) for pid in [*ranks, keeper]), "the ranks and their spawner gone",
             LEASE_S + GRACE_S + MARGIN_S)
    stops = [(pid_dir / f"stopped-{rank}").read_text().split() for rank in (0, 1)]
    assert all(float(at) >= lost_at + LEASE_S - 1.0 for _, at in stops), (lost_at, stops)  # not before the lease
    assert all(int(step) > 0 for step, _ in stops)


def test_a_run_that_ends_releases_its_spawner_without_waiting_for_the_lease(launcher: Launcher) -> None:
    """A clean end is no loss: with a lease of a minute, the run still ends at once, nothing left."""
    started_at = time.monotonic()
    finished = launcher.run("--nproc-per-node", 2, "--orphan-lease", 60, command=script("exit_with.py", 0))
    assert 0 == finished.returncode, finished.explain()
    assert time.monotonic() - started_at < 30.0


def test_a_rerun_reads_what_the_keeper_saw_and_drains_the_kept_ranks_of_an_attempt_that_had_begun_to_end(
    launcher: Launcher, pid_dir: Path
) -> None:
    """Rank 2 exited 0 under the first driver (its exit timer started: the attempt had begun to
    end, so it is not adopted). The rerun reaches the keeper the run directory names, proves it,
    reads how rank 1, killed while no driver was there, ended (SIGKILL), has it drain rank 0
    (SIGTERM, the grace: it saves) and journals both before its own attempt starts; none is left."""
    options = ("--run-id", "kept", "--nproc-per-node", 3, "--orphan-lease", 60, "--grace-period", GRACE_S)
    steps = ("steps_until_stopped.py", pid_dir)
    command = per_rank(steps, steps, ("exit_with.py", 0))
    first = launcher.start(*options, command=command)
    ranks = read_pids(pid_dir, 2)
    launcher.wait_for_event("exit_timer_started")
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    os.kill(ranks[1], signal.SIGKILL)
    wait_for(lambda: not is_alive(ranks[1]), "rank 1 reaped by its keeper")
    assert is_alive(ranks[0])

    finished = launcher.run(*options, command=command)

    assert 0 == finished.returncode, finished.explain()
    assert not finished.events("attempt_adopted")
    [stopped] = finished.events("leftovers_stopped")
    assert "keeper.json" == stopped["record"] and "keeper_refused" not in stopped
    assert ranks[0] in {p["pid"] for p in stopped["processes"]}
    assert [{"attempt": 0, "rank": 1, "pid": ranks[1], "returncode": -9}] == stopped["exits_while_no_driver"]
    journal = finished.journal()
    stopped_at = next(i for i, e in enumerate(journal) if e["event"] == "leftovers_stopped")
    assert all(e["attempt"] == 0 for e in journal[:stopped_at] if e["event"] == "attempt_started")
    assert any(e["event"] == "attempt_started" and e["attempt"] == 1 for e in journal[stopped_at:])
    assert ((pid_dir / "stopped-0").exists(), (pid_dir / "stopped-1").exists()) == (True, False)  # drained; killed
    assert not any(is_alive(pid) for pid in ranks)


def test_a_new_driver_takes_a_keeper_over_and_hears_its_ranks_as_the_dead_one_did(
    launcher: Launcher, pid_dir: Path
) -> None:
    """The launcher SIGKILLed, a new driver resumes its keeper under the next generation at once:
    the same ranks, their exits reported to it, its signals reaching them, the lease over (a rank
    outlives it), a second takeover refused, and its release ends everything."""
    ranks, keeper = _launcher_killed_with_ranks_kept(launcher, pid_dir)
    record = launcher.run_dir / "keeper.json"

    began_at = time.monotonic()
    link = resume_keeper(record, "adopt")
    took_s = time.monotonic() - began_at
    assert isinstance(link, AdoptedKeeper), link
    try:
        assert {(0, 0, ranks[0]), (0, 1, ranks[1])} == {(r.attempt, r.rank, r.pid) for r in link.ranks}
        assert 2 == link.generation
        started = link.commands[ranks[0]]  # how it was started: a new driver rebuilds its spec from it
        assert (0, 0, True, "0") == (started["attempt"], started["rank"],
                                     started["log_path"].endswith("/attempt-0/rank-0.log"), started["env"]["RANK"])
        assert took_s < 0.5, took_s
        assert isinstance(resume_keeper(record, "adopt"), str)  # taken over already: refused

        os.kill(ranks[1], signal.SIGKILL)
        assert {"t": "exit", "pid": ranks[1], "returncode": -9} == link.read_report(timeout_s=15.0)
        time.sleep(LEASE_S + 1.0)
        assert is_alive(ranks[0]) and is_alive(keeper)  # the takeover ended the lease
        link.send_signal(OP_SIGNAL_ALL, 0, signal.SIGTERM)
        assert {"t": "exit", "pid": ranks[0], "returncode": 0} == link.read_report(timeout_s=15.0)
        assert (pid_dir / "stopped-0").exists()
    finally:
        link.release()
    wait_for(lambda: not is_alive(keeper), "the keeper gone once released")


def test_a_new_driver_s_supervisor_adopts_kept_ranks_and_reports_their_exits_as_its_own(
    launcher: Launcher, pid_dir: Path
) -> None:
    """The keeper taken over becomes a new supervisor's spawner: the ranks are its running workers
    with their specs as they were started, a rank's SIGKILL is a WorkerExit of its rank and
    attempt, and closing the supervisor drains the rest (SIGTERM: they save) and ends the keeper.
    The keeper is resumed before the supervisor starts its own spawner, which rewrites the record."""
    ranks, keeper_pid = _launcher_killed_with_ranks_kept(launcher, pid_dir)
    record = launcher.run_dir / "keeper.json"

    keeper = resume_keeper(record, "adopt")
    assert isinstance(keeper, AdoptedKeeper), keeper
    exits: list[WorkerExit] = []
    supervisor = ProcessSupervisor("here", exits.append, keep=KeepTerms(Lease(60.0, GRACE_S), record, "adopt", 2))
    try:
        supervisor.adopt(keeper, keeper.specs("here"))
        assert [(0, ranks[0]), (1, ranks[1])] == [(w.spec.rank, w.pid) for w in supervisor.running()]
        assert supervisor.running()[0].spec.log_path.endswith("/attempt-0/rank-0.log")
        os.kill(ranks[1], signal.SIGKILL)
        wait_for(lambda: exits, "rank 1's exit reported to the new supervisor")
        assert [(0, 1, -9, ranks[1])] == [(e.attempt, e.rank, e.returncode, e.pid) for e in exits]
        time.sleep(LEASE_S + 1.0)
        assert is_alive(ranks[0])  # the old lease is over: it is this supervisor's now
    finally:
        supervisor.close(grace_s=GRACE_S)
    assert [(1, -9), (0, 0)] == [(e.rank, e.returncode) for e in exits]
    assert (pid_dir / "stopped-0").exists()
    wait_for(lambda: not is_alive(keeper_pid), "the keeper gone with the supervisor")
    assert (None, []) == (read_record(record)[0]["keeper"], read_record(record)[1])


def test_a_new_driver_s_node_agent_adopts_kept_ranks_and_watches_them_from_the_takeover_on(
    launcher: Launcher, pid_dir: Path
) -> None:
    """The node agent adopts the kept ranks with this driver's policies: their new steps are
    reported, their output is echoed from the takeover on (not again from their start), and
    closing the agent stops them and ends the keeper."""
    ranks, keeper_pid = _launcher_killed_with_ranks_kept(launcher, pid_dir, stepped=True)
    record = launcher.run_dir / "keeper.json"

    keeper = resume_keeper(record, "adopt")
    assert isinstance(keeper, AdoptedKeeper), keeper
    exits: list[WorkerExit] = []
    alive: list[SignOfLife | StepsSeen] = []
    lines: list[tuple[int, str]] = []
    agent = NodeAgent("here", exits.append, lambda rank, line: lines.append((rank, line)), on_alive=alive.append,
                      keep=KeepTerms(Lease(60.0, GRACE_S), record, "adopt", 2))
    try:
        specs = {pid: replace(spec, progress=ProgressPolicy()) for pid, spec in keeper.specs("here").items()}
        started = agent.adopt(keeper, specs, None)
        assert {0: ranks[0], 1: ranks[1]} == {rank: process.pid for rank, process in started.items()}
        steps = wait_for(lambda: [s for s in alive if isinstance(s, StepsSeen)], "the adopted ranks' steps")
        assert 0 == steps[0].attempt and all(step.step > 1 for step in steps[0].steps)
        wait_for(lambda: lines, "the adopted ranks' output echoed")
        assert (0, "step 1") not in lines  # printed long before the takeover: not echoed again
    finally:
        agent.close()
    assert {0, 1} == {e.rank for e in exits}
    wait_for(lambda: not is_alive(keeper_pid), "the keeper gone with the agent")


def test_a_rank_printing_20_mb_while_no_driver_reads_keeps_its_step_rate(launcher: Launcher, pid_dir: Path) -> None:
    """Its output goes to its own file, never through a pipe that nobody reads: after the driver's
    SIGKILL it prints 20 MB, one a step, and its median step interval stays within twice the one
    before (the issue's bar for a step during the outage)."""
    first = launcher.start("--orphan-lease", 60, "--grace-period", GRACE_S,
                           command=script("steps_and_floods.py", pid_dir, 20))
    [rank] = read_pids(pid_dir, 1)
    steps_file = pid_dir / "steps-0"
    wait_for(lambda: steps_file.exists() and len(steps_file.read_text().splitlines()) >= 50, "50 steps")
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    (pid_dir / "flood").touch()

    wait_for(lambda: (pid_dir / "flooded-0").exists(), "20 MB printed with no driver", 60.0)
    assert is_alive(rank)
    assert _log_size(launcher, 0) >= 20 << 20
    rows = [line.split() for line in steps_file.read_text().splitlines()]
    times: dict[bool, list[float]] = {False: [], True: []}  # step intervals, before the flood and during it
    for (_, before_at, _), (_, at, flooded) in zip(rows, rows[1:]):
        times[int(flooded) > 0].append(float(at) - float(before_at))
    calm, flooding = sorted(times[False]), sorted(times[True])
    assert len(flooding) >= 19, len(flooding)
    assert flooding[len(flooding) // 2] <= 2 * calm[len(calm) // 2], (calm[len(calm) // 2], flooding)
    record = launcher.run_dir / "keeper.json"
    keeper = int(read_record(record)[0]["keeper"])
    os.kill(keeper, signal.SIGTERM)  # from outside, once lost: the drain, now
    wait_for(lambda: not any(is_alive(pid) for pid in (rank, keeper)), "the rank and its keeper gone",
             GRACE_S + MARGIN_S)
