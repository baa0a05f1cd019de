"""An embedded Ray leaves nothing behind when its driver is SIGKILLed, in any phase, whenever (issue 26).

Each test starts a real ``python -m elastic run --backend ray`` with no cluster (two ranks), drives it
to one phase of its life, SIGKILLs the driver by pid at a random moment there, and checks that every
process of the run (see ``embedded_faults``) is gone: 21 kills, three in each of seven phases, and
more with a rerun of the run (the same run directory) in between. Set ``ELASTIC_FAULT_SEED`` to
replay a failing draw; each test prints the seed and how long its processes took to go.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from embedded_faults import PHASES, FaultRun, Kill, embedded_env, random_source
from harness import BIN, Launcher

KILLS_PER_PHASE = 3


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    return random_source(request)


def _assert_nothing_left(kill: Kill) -> None:
    print(kill)
    assert [] == [str(s) for s in kill.left], f"{kill}"


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


@pytest.mark.parametrize("phase", PHASES, ids=lambda p: p.replace(" ", "-"))
def test_a_rerun_right_after_a_driver_sigkilled_in_any_phase_leaves_no_process_of_either(
    launcher: Launcher, tmp_path: Path, rng: random.Random, phase: str
) -> None:
    """A driver SIGKILLed in any phase and its run rerun at once (the same run directory): the
    rerun runs to its end, and nothing of either driver's run is left."""
    run_id = f"rerun-{phase.replace(' ', '-')}"
    run = FaultRun(launcher, tmp_path, rng, run_id=run_id)
    kill = run.kill_in(phase)
    finished_before = run.journal_has("run_finished")
    status, explained = _rerun(launcher, run_id)
    kill = run.settle(kill)
    _assert_nothing_left(kill)
    # A run the killed driver had finished is refused (nothing to continue); any other goes on.
    assert (2 if finished_before else 0) == status, explained
