"""An attempt's start-up, broken into phases by real ranks: the rank bootstrap's marks, read by the
node at each rank's first step, journaled once and shown in report.json and the summary."""

from __future__ import annotations

from typing import Any

import pytest
from harness import Finished, Launcher, launcher_env, script, skip_unless_installed

from elastic.core.training.startup import PHASES

RUN_TIMEOUT_S = 240.0  # two attempts of two ranks importing a framework on a loaded 2-core machine
pytestmark = pytest.mark.timeout(RUN_TIMEOUT_S + 30)
ROUNDING_S = 1e-3  # the journal's and the record's rounding, not a time limit


def _checked(run: Finished, attempt: int) -> dict[str, Any]:
    """The attempt's breakdown, each phase and each rank's checked: non-negative, known, and the
    first rank's start-up within the attempt's launch and start-up (spawn falls in its launch)."""
    report = run.report()
    row = report["attempts"][attempt]
    found = row["startup_breakdown"]
    assert found is not None, run.explain()
    assert 2 == found["ranks"] and found["slowest_rank"] in (0, 1)
    assert set(found["phases"]) <= set(PHASES) and {"spawn", "imports", "first_step"} <= set(found["phases"])
    assert all(seconds >= 0.0 for seconds in found["phases"].values())
    assert {"0", "1"} == set(found["by_rank"])
    for phases in found["by_rank"].values():
        assert all(seconds >= 0.0 for seconds in phases.values())
    first = found["by_rank"][str(row["first_step"]["rank"])]
    ledger = row["ledger"]
    # Its first step's own time is training in the ledger (productive, or redone after a restart), and
    # part of its start-up's first_step here.
    training = ledger["productive"] + ledger["redone"]
    assert sum(first.values()) <= ledger["launch"] + ledger["startup"] + training + ROUNDING_S, (first, ledger)
    assert f"start-up to the first step {found['total_s']:.1f}s: " in run.stderr + run.stdout
    return found


def test_a_jax_attempt_s_start_up_has_its_initialisation_and_cache_reads(launcher: Launcher) -> None:
    """A bare ``jax.distributed.initialize()`` is timed; the attempt after a failure reads the step
    it compiled from the compilation cache, and that time is its own phase."""
    skip_unless_installed("jax")
    run = launcher.run("--nproc-per-node", 2, "--max-restarts", 1, command=script("jax_startup.py"),
                       env=launcher_env(JAX_PLATFORMS="cpu"), timeout_s=RUN_TIMEOUT_S)
    assert 0 == run.returncode, run.explain()
    assert "distributed_init" in _checked(run, 0)["phases"]
    again = _checked(run, 1)
    assert {"distributed_init", "cache_load"} <= set(again["phases"])


def test_a_torch_attempt_s_start_up_has_its_process_group_and_restore(launcher: Launcher, tmp_path: Any) -> None:
    """``init_process_group`` and ``torch.distributed.checkpoint.load`` are timed, each its own phase."""
    skip_unless_installed("torch")
    run = launcher.run("--nproc-per-node", 2, "--max-restarts", 1, "--failure-grace", 5,
                       command=script("torch_startup.py", tmp_path / "ckpt"),
                       env=launcher_env(), timeout_s=RUN_TIMEOUT_S)
    assert 0 == run.returncode, run.explain()
    assert "restore" not in _checked(run, 0)["phases"]
    assert {"distributed_init", "restore"} <= set(_checked(run, 1)["phases"])
