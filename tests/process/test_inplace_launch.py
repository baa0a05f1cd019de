"""--spares launches what in-place restarts need: a store apart from the ranks, and warm spares
once every rank runs on elastic.worker.inplace; a rank lost then is repaired in place: the
survivors keep their processes, a spare takes the lost place, and the run ends bit-identical to
one with no failure (docs/operating/in-place-restarts.md).

Real launcher, real gloo DDP ranks of tests/bin/inplace_train.py, real spares: the spare runs the
same script, imports torch and builds its model, and says beside its notice file that it waits.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import psutil
import pytest
import signal
from harness import BIN, REPO, Launcher, differing_tensors, launcher_env, rank_processes, wait_for

from elastic.worker.inplace.notice import STORE_VAR, ready_path

pytest.importorskip("torch")
pytestmark = pytest.mark.process

START_S = 120.0
STEPS = 40  # cold ranks import torch: slow on a loaded machine, and no claim about speed


def _env() -> dict[str, str]:
    env = launcher_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def test_the_ranks_meet_on_the_launchers_store_and_a_warm_spare_waits_until_the_run_ends(
    launcher: Launcher, tmp_path: Path
) -> None:
    progress = tmp_path / "progress"
    process = launcher.start(
        "--nproc-per-node", 2, "--spares", 1,
        command=[sys.executable, BIN / "inplace_train.py", 400, tmp_path / "final.pt", progress, 0.05],
        env=_env(),
    )
    attempt = launcher.run_dir / "attempt-0"
    ready = Path(ready_path(str(attempt / "spare-0-0.inplace")))
    spare_pid = int(wait_for(lambda: ready.exists() and ready.read_text().strip(), "the spare waiting", START_S))
    spare = psutil.Process(spare_pid)
    assert "1" == spare.environ()["ELASTIC_INPLACE_SPARE"] and "RANK" not in spare.environ()
    store = (attempt / "inplace-store.address").read_text().strip()  # written before the ranks joined
    ranks = rank_processes(process.pid)
    assert {0, 1} == set(ranks)
    assert {store} == {psutil.Process(pid).environ()[STORE_VAR] for pid in ranks.values()}
    run = launcher.finished(process, timeout_s=START_S)

    assert 0 == run.returncode, run.explain()
    assert store.startswith("127.0.0.1:")
    started = run.events("spares_started")
    assert [[spare_pid]] == [event["pids"] for event in started], started
    assert [] == run.events("helper_ended")  # stopped with the run: no news
    assert not spare.is_running()
    steps = [line.split() for line in progress.read_text().splitlines()]
    assert ("400", "0") in {(step, generation) for step, generation, *_ in steps}  # generation 0 to the end


def test_a_program_that_does_not_run_in_place_gets_no_spare(launcher: Launcher) -> None:
    """Its spare would train without a rank: none is started, and the run ends as without --spares."""
    run = launcher.run(
        "--nproc-per-node", 2, "--spares", 1,
        command=[sys.executable, "-c", "import time; print('step 1', flush=True); time.sleep(1)"],
        env=_env(), timeout_s=START_S,
    )
    assert 0 == run.returncode, run.explain()
    assert [] == run.events("spares_started")
    assert not list((launcher.run_dir / "attempt-0").glob("spare-*"))


def test_spares_for_a_command_that_is_not_python_are_refused_before_anything_starts(launcher: Launcher) -> None:
    run = launcher.run("--nproc-per-node", 2, "--spares", 1, command=["sh", "-c", "true"], env=_env())
    assert 2 == run.returncode
    assert "--spares: in-place restarts need a python command" in run.stderr
    assert not (launcher.run_dir / "attempt-0").exists()


@pytest.mark.timeout(400)
def test_sigkilled_ranks_are_replaced_by_warm_spares_while_their_peer_keeps_its_process_bit_identical(
    launcher: Launcher, tmp_path: Path
) -> None:
    """--spares 1 --max-restarts 2, two gloo DDP ranks at a step a second (each spare must be
    waiting before the run ends; the weights do not depend on the pace). Rank 1 SIGKILLed: the
    launcher re-forms the world as attempt 1 without a drain, rank 0 goes on in its process, the
    spare becomes rank 1 and reports its steps as rank 1; then that rank is SIGKILLed too, and the
    next spare takes the place as attempt 2. The final weights are those of the run with no failure."""
    (tmp_path / "baseline-run").mkdir()
    baseline = Launcher(tmp_path / "baseline-run").run(  # runs to its end, or is killed at the timeout
        "--nproc-per-node", 2,
        command=[sys.executable, BIN / "inplace_train.py", STEPS, tmp_path / "baseline.pt", tmp_path / "baseline", 0],
        env=_env(), timeout_s=START_S,
    )
    assert 0 == baseline.returncode, baseline.explain()
    progress = tmp_path / "progress"
    process = launcher.start(
        "--nproc-per-node", 2, "--spares", 1, "--max-restarts", 2,
        command=[sys.executable, BIN / "inplace_train.py", STEPS, tmp_path / "final.pt", progress, 1.0],
        env=_env(),
    )
    spares = []
    for index in (0, 1):
        ready = Path(ready_path(str(launcher.run_dir / "attempt-0" / f"spare-0-{index}.inplace")))
        spares.append(int(wait_for(lambda: ready.exists() and ready.read_text().strip(), "a spare waiting", START_S)))
        if index == 0:
            ranks = rank_processes(process.pid)
            os.kill(ranks[1], signal.SIGKILL)
        else:  # the first spare, once it beats rank 1's steps (the lost rank's heartbeat file handed to it)
            wait_for(lambda: _beating(launcher, 1) == spares[0], "the first spare stepping as rank 1", START_S)
            # and once the launcher has seen the re-formed world step: a loss before is no repair
            wait_for(lambda: _first_step_journaled(launcher, 1), "attempt 1's first step journaled", START_S)
            os.kill(spares[0], signal.SIGKILL)
    run = launcher.finished(process, timeout_s=START_S)

    assert 0 == run.returncode, run.explain()
    reformed = [(e["attempt"], e["lost"], e["survivors"], e["joiners"], e["identical"]) for e in run.events("world_reformed")]
    assert [(0, [1], [[0, 0]], [1], True), (1, [1], [[0, 0]], [1], True)] == reformed
    assert [] == run.events("inplace_fell_back")
    assert [0, 1, 2] == [e["attempt"] for e in run.events("attempt_started")]
    assert [{"0": ranks[0], "1": spares[0]}, {"0": ranks[0], "1": spares[1]}] == [
        e["pids"] for e in run.events("rank_pids")[1:]]
    assert [] == [e for e in run.events("phase_changed") if e["dest"] == "draining" and e["attempt"] < 2]
    steps = [line.split() for line in progress.read_text().splitlines()]
    assert {"0", "1", "2"} == {g for _, g, pid, _ in steps if int(pid) == ranks[0]}, "rank 0 kept its process"
    assert str(STEPS) == max((s for s, _, pid, _ in steps if int(pid) == spares[1]), key=int)
    assert spares[1] == _beating(launcher, 1)
    assert [] == differing_tensors(tmp_path / "baseline.pt", tmp_path / "final.pt")


def _first_step_journaled(launcher: Launcher, attempt: int) -> bool:
    """Whether the journal has ``attempt``'s first step (the launcher's evidence its world formed)."""
    path = launcher.run_dir / "journal.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return any('"first_step_seen"' in line and f'"attempt":{attempt},' in line.replace(" ", "") for line in lines)


def _beating(launcher: Launcher, rank: int) -> int | None:
    """The pid that last beat a training step in ``rank``'s heartbeat file (attempt 0's: a spare
    takes it over; its beats while the world forms carry no step, and a loss then is no repair)."""
    try:
        beat = json.loads((launcher.run_dir / "attempt-0" / f"rank-{rank}.heartbeat").read_text())
        return int(beat["pid"]) if beat["step"] is not None else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


@pytest.mark.timeout(400)
def test_a_reformed_world_whose_survivor_never_rejoins_falls_back_to_a_full_restart_at_its_deadline(
    launcher: Launcher, tmp_path: Path
) -> None:
    """Rank 0 SIGSTOPped, then rank 1 SIGKILLed: the world is re-formed in place, but rank 0 never
    comes back to its generations, so the re-formed attempt shows no step; at --reform-timeout its
    ranks are stopped and the run restarts every rank, as without spares, and ends."""
    process = launcher.start(
        "--nproc-per-node", 2, "--spares", 1, "--max-restarts", 1, "--reform-timeout", 5,
        command=[sys.executable, BIN / "inplace_train.py", STEPS, tmp_path / "final.pt", tmp_path / "progress", 0.5],
        env=_env(),
    )
    ready = Path(ready_path(str(launcher.run_dir / "attempt-0" / "spare-0-0.inplace")))
    wait_for(lambda: ready.exists() and ready.read_text().strip(), "the spare waiting", START_S)
    ranks = rank_processes(process.pid)
    os.kill(ranks[0], signal.SIGSTOP)
    os.kill(ranks[1], signal.SIGKILL)
    run = launcher.finished(process, timeout_s=START_S)

    assert 0 == run.returncode, run.explain()
    assert [0] == [e["attempt"] for e in run.events("world_reformed")]
    [fell] = run.events("inplace_fell_back")
    assert 1 == fell["attempt"] and fell["reason"].startswith("the world re-formed as attempt 1 showed no step within ")
    assert fell["reason"].endswith("s (--reform-timeout)")
    started = run.events("attempt_started")
    assert [(0, None), (1, 0), (2, None)] == [(e["attempt"], e.get("reformed_from")) for e in started]
    assert not psutil.pid_exists(ranks[0]) or psutil.Process(ranks[0]).status() == psutil.STATUS_ZOMBIE
