"""An embedded Ray leaves nothing behind when its driver is SIGKILLed, in any phase, whenever (issue 26).

Each test starts a real ``python -m elastic run --backend ray`` with no cluster (two ranks), drives it
to one phase of its life, SIGKILLs the driver by pid at a random moment there, and checks that every
process of the run (see ``embedded_faults``) is gone: a kill in each of seven phases (each run draws
new moments), and more with a rerun of the run (the same run directory) in between; and a cluster
elastic joined is left alone by both. ``ELASTIC_FAULT_KILLS=3`` kills three times in each phase (the
stress run of issue 26: 21 kills); set ``ELASTIC_FAULT_SEED`` to replay a failing draw; each test
prints the seed and how long its processes took to go.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from embedded_faults import PHASES, FaultRun, Kill, Seen, embedded_env, random_source
from harness import BIN, Launcher, read_pids, wait_for

from elastic.core.journal.recovery import continuable

# A live test cluster of this worker would be joined instead of an embedded Ray: the tests of
# the embedded Ray ask for none to be running (the joined-cluster test below asks for one).
no_live_cluster = pytest.mark.usefixtures("no_live_cluster")

KILLS_PER_PHASE = int(os.environ.get("ELASTIC_FAULT_KILLS", "1"))


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    return random_source(request)


def _assert_nothing_left(kill: Kill) -> None:
    print(kill)
    assert [] == [str(s) for s in kill.left], f"{kill}"


@no_live_cluster
@pytest.mark.parametrize("try_", range(KILLS_PER_PHASE), ids=lambda i: f"try{i}")
@pytest.mark.parametrize("phase", PHASES, ids=lambda p: p.replace(" ", "-"))
def test_a_driver_sigkilled_in_any_phase_leaves_no_process_of_its_run(
    launcher: Launcher, tmp_path: Path, rng: random.Random, phase: str, try_: int
) -> None:
    """Whenever its driver is SIGKILLed, every process of the embedded cluster and of the ranks goes."""
    run = FaultRun(launcher, tmp_path, rng, run_id=f"fault-{phase.replace(' ', '-')}-{try_}")
    kill = run.settle(run.kill_in(phase))
    _assert_nothing_left(kill)


def _rerun(launcher: Launcher, run_id: str) -> tuple[int, str]:
    """The same run again (its run directory, its id), with a short command; its status and stderr."""
    finished = launcher.run(
        "--backend", "ray", "--nproc-per-node", 2, "--run-id", run_id,
        command=[sys.executable, str(BIN / "prints_steps.py"), "plain", "steps", "10"],
        env=embedded_env(), timeout_s=150,
    )
    return finished.returncode, finished.explain()


@no_live_cluster
@pytest.mark.parametrize("phase", PHASES, ids=lambda p: p.replace(" ", "-"))
def test_a_rerun_right_after_a_driver_sigkilled_in_any_phase_leaves_no_process_of_either(
    launcher: Launcher, tmp_path: Path, rng: random.Random, phase: str
) -> None:
    """A driver SIGKILLed in any phase and its run rerun at once (the same run directory): the
    rerun runs to its end, and nothing of either driver's run is left."""
    run_id = f"rerun-{phase.replace(' ', '-')}"
    run = FaultRun(launcher, tmp_path, rng, run_id=run_id)
    kill = run.kill_in(phase)
    status, explained = _rerun(launcher, run_id)
    kill = run.settle(kill)
    _assert_nothing_left(kill)
    # A run the killed driver had finished for good (succeeded, failed) is refused; any other goes
    # on, a stopped one included. Its record is read now: a write under way when the SIGKILL was
    # sent can land after it, so a look at the journal right after the kill may miss it.
    records = [json.loads(line) for line in (launcher.run_dir / "journal.jsonl").read_text().splitlines() if line]
    assert run.process is not None
    rerun_at = next((i for i, r in enumerate(records) if r["event"] == "run_started" and r["pid"] != run.process.pid),
                    len(records))
    finished = next((r for r in records[:rerun_at] if r["event"] == "run_finished"), None)  # the killed driver's
    assert (0 if continuable(finished) else 2) == status, explained


def _keeper_of(launcher: Launcher, driver: int) -> Seen:
    """The embedded Ray's keeper, as its record names it: a child of the driver."""
    record = launcher.run_dir / "embedded-ray.json"
    keeper = wait_for(lambda: record.exists() and json.loads(record.read_text())["fields"]["keeper"],
                      "the embedded Ray's record")
    assert driver == psutil.Process(keeper).ppid()
    process = psutil.Process(keeper)
    return Seen(keeper, process.create_time(), " ".join(process.cmdline()))


@no_live_cluster
@pytest.mark.parametrize("keeper_fate", ["stopped", "killed"])
def test_a_rerun_stops_what_a_driver_left_when_its_keeper_could_not_end_it(
    launcher: Launcher, tmp_path: Path, rng: random.Random, keeper_fate: str
) -> None:
    """The driver SIGKILLed with its keeper stopped (SIGSTOP: it cannot sweep) or SIGKILLed too:
    the rerun stops every recorded process still alive, by pid, before it starts its own Ray,
    and journals what it stopped (``leftovers_stopped``)."""
    run_id = f"keeper-{keeper_fate}"
    run = FaultRun(launcher, tmp_path, rng, run_id=run_id)
    process = run.start([sys.executable, str(BIN / "catch_sigterm.py"), str(run.ready)])
    wait_for(lambda: len(run.ranks()) >= 2, "both ranks", 90)
    keeper = _keeper_of(launcher, process.pid)
    time.sleep(1.0)  # the head records its tree every 0.5 s: the ranks are in the record now
    os.kill(keeper.pid, signal.SIGSTOP if keeper_fate == "stopped" else signal.SIGKILL)  # by pid, ours
    os.kill(process.pid, signal.SIGKILL)  # by pid: the launcher this test started
    process.wait(30)
    assert run.watch is not None
    run.watch.stop()
    alive = run.of_the_run()
    kill = Kill(f"driver, keeper {keeper_fate}", 0.0)

    status, explained = _rerun(launcher, run_id)

    assert 0 == status, explained
    kill = run.settle(kill)
    _assert_nothing_left(kill)
    stopped = [e for e in _journal(launcher) if e["event"] == "leftovers_stopped"]
    if keeper_fate == "stopped":
        # Nothing could end on its own with the keeper stopped: its head, and Ray's head processes
        # under it, were there to stop.
        [record] = stopped
        names = " ".join(p["name"] for p in record["processes"])
        assert keeper.pid in [p["pid"] for p in record["processes"]]
        for name in ("elastic.backends.ray.cluster.head", "gcs_server", "raylet"):
            assert name in names, names
    print(f"alive before the rerun: {len(alive)}; stopped by it: "
          f"{[len(r['processes']) for r in stopped]}")


def _journal(launcher: Launcher) -> list[dict[str, object]]:
    lines = (launcher.run_dir / "journal.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_a_joined_cluster_is_left_alone_by_a_sigkilled_driver_and_its_rerun(
    two_node_cluster: Any, launcher: Launcher, pid_dir: Path
) -> None:
    """``--address``: elastic records nothing of a cluster it joined, and a rerun after its driver
    was SIGKILLed stops nothing of it; every process of the cluster still runs."""
    options = ("--backend", "ray", "--address", two_node_cluster.address, "--nproc-per-node", 1,
               "--run-id", "joined")
    process = launcher.start(*options, command=[sys.executable, str(BIN / "sleep_on_attempt.py"), pid_dir, 0])
    read_pids(pid_dir, 1)
    os.kill(process.pid, signal.SIGKILL)  # by pid: the launcher this test started
    process.wait(30)

    rerun = launcher.run(*options, command=[sys.executable, str(BIN / "sleep_on_attempt.py"), pid_dir, 0],
                         timeout_s=120)

    assert 0 == rerun.returncode, rerun.explain()
    assert [] == rerun.events("leftovers_stopped")
    assert not (launcher.run_dir / "embedded-ray.json").exists()
    assert two_node_cluster.healthy()
