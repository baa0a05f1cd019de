"""examples/jax_orbax.py under the launcher: two JAX processes, Orbax checkpoints, a rank killed from outside."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from harness import (
    REPO,
    Finished,
    Launcher,
    latest_step,
    launcher_env,
    rank_processes,
    script,
    skip_unless_installed,
    wait_for,
)

skip_unless_installed("jax", "orbax.checkpoint")  # imported here only by the test that reads with Orbax

EXAMPLE = REPO / "examples" / "jax_orbax.py"
STEPS, SAVE_EVERY, KILL_AT_STEP, TERM_AT_STEP = 20, 5, 12, 7
# Loaded CI machines: importing JAX and Orbax and compiling take seconds per attempt.
RUN_TIMEOUT_S = 240.0
RESUME_LINE = re.compile(r"resume: elastic chose checkpoint (\d+), orbax's latest is (\d+|None)")
PREEMPTED_LINE = re.compile(r"preempted: saved step (\d+), exiting")

Params = dict[str, np.ndarray]


def _train(
    launcher: Launcher, name: str, step_s: float = 0.05
) -> tuple[list[object], list[object], dict[str, str]]:
    """Options, command and environment of a 2-process run with its own run and checkpoint
    directories; ``step_s`` paces the steps (it changes no parameter)."""
    launcher.run_dir = launcher.tmp_path / f"run{name}"
    options: list[object] = ["--nproc-per-node", 2, "--max-restarts", 1, "--checkpoint-dir",
                             launcher.tmp_path / f"ckpt{name}"]
    command: list[object] = [sys.executable, EXAMPLE, "--steps", STEPS, "--save-every", SAVE_EVERY,
                             "--step-seconds", step_s, "--output", launcher.tmp_path / f"final{name}.npz",
                             "{resume_step?--resume-step}"]
    return options, command, launcher_env(JAX_PLATFORMS="cpu")


def _params(path: Path) -> Params:
    with np.load(path) as arrays:
        return {name: arrays[name] for name in arrays.files}


def _assert_bit_identical(expected: Params, actual: Params) -> None:
    assert sorted(expected) == sorted(actual)
    assert [] == [name for name in expected if not np.array_equal(expected[name], actual[name])]


def _assert_resumed_from_orbax_latest(run: Finished, resume_step: int) -> None:
    """Each process of attempt 1 read Orbax's own latest_step() before restoring (nothing saved since): elastic's."""
    for rank in (0, 1):
        found = RESUME_LINE.search(run.rank_log(1, rank))
        assert found is not None, run.rank_log(1, rank)[-2000:]
        assert (str(resume_step), str(resume_step)) == found.groups()
    assert f"first_step={resume_step + 1}" in run.rank_log(1, 0)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Params]:
    """The final parameters of a run nobody interrupts."""
    launcher = Launcher(tmp_path_factory.mktemp("uninterrupted"))
    try:
        options, command, env = _train(launcher, "")
        run = launcher.run(*options, command=command, env=env, timeout_s=RUN_TIMEOUT_S)
        assert 0 == run.returncode, run.explain()
        assert 1 == len(run.report()["attempts"])
        yield _params(launcher.tmp_path / "final.npz")
    finally:
        launcher.close()


def test_a_jax_run_resumed_from_orbax_after_a_sigkill_ends_bit_identical(
    launcher: Launcher, uninterrupted: Params
) -> None:
    """Rank 1 SIGKILLed mid-run: both processes resume from Orbax's latest committed step and end bit-identical."""
    options, command, env = _train(launcher, "A")
    process = launcher.start(*options, command=command, env=env)
    launcher.kill_rank_at_step(process, rank=1, step=KILL_AT_STEP, timeout_s=RUN_TIMEOUT_S)
    run = launcher.finished(process, timeout_s=RUN_TIMEOUT_S)

    assert 0 == run.returncode, run.explain()
    first, second = run.report()["attempts"]
    assert ("killed", 1) == (first["root_cause"]["kind"], first["root_cause"]["rank"])
    resume_step = second["resume_step"]
    assert [None, resume_step] == [e["resume_step"] for e in run.events("attempt_started")]
    assert resume_step is not None and resume_step % SAVE_EVERY == 0 and resume_step >= SAVE_EVERY
    _assert_resumed_from_orbax_latest(run, resume_step)
    assert "a peer process is gone; exiting now" in run.rank_log(0, 0)  # the survivor left on its own
    _assert_bit_identical(uninterrupted, _params(launcher.tmp_path / "finalA.npz"))


def test_sigterm_to_every_rank_saves_at_jaxs_preemption_sync_point_and_resumes_there(
    launcher: Launcher, uninterrupted: Params
) -> None:
    """What a preemption notice sends: JAX's preemption service picks one step for all, Orbax saves it, the run resumes there."""
    # Slower steps: the SIGTERMs and JAX's agreement on a step must come before the last step
    # (13 steps of 0.05 s were once too few under CI's load, and the run just finished).
    options, command, env = _train(launcher, "T", step_s=0.15)
    process = launcher.start(*options, command=command, env=env)
    log = launcher.run_dir / "attempt-0" / "rank-1.log"

    def both_ranks_at_step() -> dict[int, int] | None:
        ranks = rank_processes(process.pid)
        step = latest_step(log.read_text(errors="replace")) if log.exists() else None
        return ranks if len(ranks) == 2 and step is not None and step >= TERM_AT_STEP else None

    for pid in wait_for(both_ranks_at_step, f"both ranks, rank 1 at step {TERM_AT_STEP}", RUN_TIMEOUT_S).values():
        os.kill(pid, signal.SIGTERM)  # by pid: the ranks of the launcher this test started
    run = launcher.finished(process, timeout_s=RUN_TIMEOUT_S)

    assert 0 == run.returncode, run.explain()
    attempts = run.report()["attempts"]
    assert 2 == len(attempts), run.explain()
    first, second = attempts
    assert "terminated" == first["root_cause"]["kind"]
    saved = {PREEMPTED_LINE.search(run.rank_log(0, rank)) for rank in (0, 1)}
    assert None not in saved, run.rank_log(0, 0)[-2000:]
    steps = {int(match.group(1)) for match in saved if match is not None}
    assert 1 == len(steps)  # the one step JAX's preemption service chose for every process
    (preempted_at,) = steps
    assert preempted_at == second["resume_step"]
    _assert_resumed_from_orbax_latest(run, preempted_at)
    _assert_bit_identical(uninterrupted, _params(launcher.tmp_path / "finalT.npz"))


def test_an_orbax_save_cut_off_in_commit_file_mode_is_never_chosen(tmp_path: Path) -> None:
    """Orbax's commit-file mode writes step N in place: SIGKILLed midway, elastic passes it over, as Orbax does."""
    import orbax.checkpoint as ocp

    from elastic.core.checkpoints.selection import Checkpoint
    from elastic.run.watches.checkpoint_scan import scan_checkpoints

    directory = tmp_path / "ckpt"
    saver = subprocess.Popen(script("orbax_commit_file_save.py", directory), env=launcher_env(JAX_PLATFORMS="cpu"),
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        wait_for(lambda: (directory / "2" / "_CHECKPOINT_METADATA").exists(), "Orbax to start saving step 2",
                 RUN_TIMEOUT_S)
        os.kill(saver.pid, signal.SIGKILL)  # by pid: the saver this test started
    finally:
        if saver.poll() is None:
            os.kill(saver.pid, signal.SIGKILL)
        saver.wait(30)
    if (directory / "2" / "commit_success.txt").exists():
        pytest.fail("Orbax finished saving 256 MB before the SIGKILL landed; the test needs a larger save")
    selection = scan_checkpoints(directory)
    assert Checkpoint(directory / "1", 1) == selection.latest
    assert ["2"] == [r.name for r in selection.rejected]
    # Orbax agrees when it reads with the saver's mode (without it, Orbax on a POSIX path lists step 2 too).
    commit_file = ocp.options.AtomicityOptions(mode=ocp.options.AtomicityMode.COMMIT_FILE)
    reader = ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(read_only=True,
                                                                                   atomicity_options=commit_file))
    assert 1 == reader.latest_step()
