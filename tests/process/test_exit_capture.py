"""Exit capture that cannot be fooled: statuses under an ignored SIGCHLD, setsid daemons, reused pids."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Launcher, is_alive, read_pids, script, wait_for

from elastic.core.failures import WorkerExit
from elastic.core.launch.spec import WorkerSpec
from elastic.node.supervisor import ProcessSupervisor

GONE_BOUND_S = 5.0
# Starts `python -m elastic run ...` with SIGCHLD ignored; the disposition survives exec.
IGNORING_SIGCHLD = (
    "import os, signal, sys; signal.signal(signal.SIGCHLD, signal.SIG_IGN); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


def test_a_sigkilled_rank_is_killed_not_exited_0_when_the_launcher_ignores_sigchld(
    launcher: Launcher, tmp_path: Path
) -> None:
    """Under a parent that ignores SIGCHLD, a rank's SIGKILL is reported as such and the run exits 137."""
    out = tmp_path / "agent.json"
    argv = launcher.argv(["--max-restarts", 0], script("report_agent_sigchld.py", out))
    finished = launcher.run(command=None, raw_argv=[sys.executable, "-c", IGNORING_SIGCHLD, *argv[1:]])

    [driver] = [p for p in json.loads(out.read_text()) if " -m elastic run " in p["cmdline"]]
    assert driver["ignores_sigchld"], "the launcher did not inherit SIGCHLD ignored: the test proves nothing"
    assert 137 == finished.returncode, finished.explain()
    [failed] = finished.events("worker_failed")
    assert ("killed", "SIGKILL") == (failed["kind"], failed["signal"])


@pytest.mark.parametrize("code", [0, 3], ids=["rank-succeeds", "rank-fails"])
@pytest.mark.parametrize("double_fork", [False, True], ids=["setsid-child", "double-fork"])
def test_a_ranks_setsid_daemon_is_gone_when_the_run_ends(
    launcher: Launcher, pid_dir: Path, code: int, double_fork: bool
) -> None:
    """A daemon a rank started in a session of its own does not outlive the run."""
    options = ["--double-fork"] if double_fork else []
    finished = launcher.run(command=script("start_daemon.py", pid_dir, *options, "--exit", code))

    assert code == finished.returncode, finished.explain()
    rank, daemon = read_pids(pid_dir, 1)
    wait_for(lambda: not is_alive(daemon), f"daemon {daemon} of rank {rank} gone", GONE_BOUND_S)


def test_a_setsid_daemon_dies_with_a_sigkilled_launcher(launcher: Launcher, pid_dir: Path) -> None:
    """SIGKILL to the launcher: its rank's setsid daemon goes too, not just the rank's group."""
    process = launcher.start(command=script("start_daemon.py", pid_dir, "--double-fork"))
    rank, daemon = read_pids(pid_dir, 1)
    assert is_alive(daemon)

    os.kill(process.pid, signal.SIGKILL)
    process.wait(10)

    wait_for(lambda: not (is_alive(rank) or is_alive(daemon)), f"rank {rank}, daemon {daemon} gone", GONE_BOUND_S)


# -- the supervisor itself, with both ways of sweeping --------------------------------------


@pytest.fixture(params=[True, False], ids=["cgroup-where-allowed", "process-groups-only"])
def supervisor(request: pytest.FixtureRequest) -> Iterator[tuple[ProcessSupervisor, list[WorkerExit]]]:
    exits: list[WorkerExit] = []
    supervised = ProcessSupervisor("test-node", exits.append, cgroup=request.param)
    if not request.param:
        assert supervised.cgroup is None
    yield supervised, exits
    supervised.close()


def spec(tmp_path: Path, rank: int, argv: list[str]) -> WorkerSpec:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELASTIC_", "TORCHELASTIC_"))}
    env["RANK"] = str(rank)
    return WorkerSpec(0, rank, rank, "test-node", tuple(argv), env, str(tmp_path / f"rank-{rank}.log"))


@pytest.mark.parametrize("double_fork", [False, True], ids=["setsid-child", "double-fork"])
def test_the_drain_sweeps_a_daemon_that_left_the_ranks_process_group(
    supervisor: tuple[ProcessSupervisor, list[WorkerExit]], tmp_path: Path, pid_dir: Path, double_fork: bool
) -> None:
    """After a rank exits its daemon still runs (it escaped the group); the drain kills it."""
    supervised, exits = supervisor
    options = ["--double-fork"] if double_fork else []
    supervised.start([spec(tmp_path, 0, script("start_daemon.py", pid_dir, *options, "--exit", 0))])
    rank, daemon = read_pids(pid_dir, 1)
    wait_for(lambda: exits, "the rank's exit")
    assert [0] == [e.returncode for e in exits]
    assert is_alive(daemon), "the daemon should have survived its rank's group kill"

    supervised.stop(signal.SIGTERM, 1.0)

    assert not is_alive(daemon)


def _take_pid(pid: int) -> subprocess.Popen[bytes] | None:
    """A process of ours (leading its own process group) that got ``pid``, or None if another did."""
    with open("/proc/sys/kernel/ns_last_pid", "w") as last:
        last.write(str(pid - 1))
    impostor = subprocess.Popen(["sleep", "300"], start_new_session=True)
    if impostor.pid == pid:
        return impostor
    impostor.kill()
    impostor.wait()
    return None


def test_no_signal_reaches_a_process_that_took_a_reaped_ranks_pid(
    supervisor: tuple[ProcessSupervisor, list[WorkerExit]], tmp_path: Path
) -> None:
    """Once a rank is reaped its pid (and group id) may be anyone's: kill_hung, signal_all,
    kill_all and stop leave a process group that reused it untouched."""
    if not os.access("/proc/sys/kernel/ns_last_pid", os.W_OK):
        pytest.skip("needs a writable /proc/sys/kernel/ns_last_pid to force pid reuse")
    supervised, exits = supervisor
    supervised.start([spec(tmp_path, 0, ["true"])])
    [exit] = wait_for(lambda: exits, "the rank's exit")
    assert exit.pid is not None

    impostor = None
    for _ in range(50):  # another process on the host may win the pid; try again
        impostor = _take_pid(exit.pid)
        if impostor is not None:
            break
    if impostor is None:
        pytest.skip(f"could not make pid {exit.pid} ours again: the host forks too busily")
    try:
        assert os.getpgid(impostor.pid) == exit.pid

        assert not supervised.kill_hung(exit.pid, "test", 0.0)
        supervised.signal_all(signal.SIGTERM)
        supervised.kill_all()
        supervised.stop(signal.SIGTERM, 0.1)

        assert impostor.poll() is None, f"the process that reused pid {exit.pid} got a signal"
    finally:
        impostor.kill()
        impostor.wait()


def test_the_next_spawner_empties_the_cgroup_of_one_that_was_sigkilled(tmp_path: Path, pid_dir: Path) -> None:
    """A spawner SIGKILLed leaves a daemon in its cgroup; the next spawner on the host kills it and removes the cgroup."""
    exits: list[WorkerExit] = []
    first = ProcessSupervisor("test-node", exits.append)
    try:
        if first.cgroup is None:
            pytest.skip("cgroup v2 is not writable here: process groups and the subreaper do the sweeping")
        first.start([spec(tmp_path, 0, script("start_daemon.py", pid_dir, "--double-fork"))])
        rank, daemon = read_pids(pid_dir, 1)
        spawner_pid = int(first.cgroup.rsplit("-", 1)[1])
        os.kill(spawner_pid, signal.SIGKILL)
        [exit] = wait_for(lambda: exits, "the rank's exit once its spawner died")
        assert (rank, -signal.SIGKILL) == (exit.pid, exit.returncode)
    finally:
        first.close()

    # The next spawner on the host may be one that a test beside this one
    # starts (pytest-xdist's workers share a cgroup): it sweeps the leaf too.
    second = ProcessSupervisor("test-node", exits.append)
    try:
        wait_for(lambda: not is_alive(daemon), f"daemon {daemon} gone", GONE_BOUND_S)
    finally:
        second.close()
    # The killed daemon was re-parented to pytest (a subreaper too); its zombie,
    # until pytest reaps it, may keep the old cgroup busy. Reaped, the next
    # spawner removes the cgroup.
    _, status = os.waitpid(daemon, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, "the daemon ended on its own, unswept"
    third = ProcessSupervisor("test-node", exits.append)
    try:
        assert third.cgroup is not None
        assert not os.path.exists(first.cgroup)
    finally:
        third.close()


def test_a_spawner_carries_the_mark_every_elastic_version_looks_for(tmp_path: Path, pid_dir: Path) -> None:
    """A live spawner's command line says ``elastic.spawner``, which every version's stale-cgroup sweep spares."""
    exits: list[WorkerExit] = []
    supervised = ProcessSupervisor("test-node", exits.append)
    try:
        if supervised.cgroup is None:
            pytest.skip("cgroup v2 is not writable here: no cgroup leaves to sweep")
        spawner_pid = int(supervised.cgroup.rsplit("-", 1)[1])
        with open(f"/proc/{spawner_pid}/cmdline", "rb") as cmdline:
            # The spawner moved to elastic.node.spawner.process; spawners of an older elastic
            # on this host kill the leaves of processes without this mark.
            assert b"elastic.spawner" in cmdline.read()
    finally:
        supervised.close()
