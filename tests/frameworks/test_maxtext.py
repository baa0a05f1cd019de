"""MaxText's own command line under the launcher, unchanged (examples/maxtext/README.md): CPU
processes of its pre-training entry point, run in a Python 3.12 venv of their own where elastic is
not installed, no shim; its CPU path and its one-process-a-GPU path (``gpu_multiprocess``, on CPU
here), and a rank SIGKILLed after a checkpoint resuming from it. (Its one-process-a-node GPU path
runs on two Ray nodes: tests/ray/test_ray_jax.py.)"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
from harness import MAXTEXT_TINY, REPO, Finished, Launcher, maxtext_command, maxtext_env, maxtext_steps

RUN_TIMEOUT_S = 240.0  # MaxText's start-up is 10-20 s an attempt on the loaded 2-core machine
pytestmark = pytest.mark.timeout(2 * RUN_TIMEOUT_S + 30)
RESTORED = re.compile(r"restoring from this run's directory step (\d+)")


@pytest.fixture(scope="module")
def jax_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One jax_cache_dir for this module's runs in a worker: rank 0 of a later run with the same
    step count loads MaxText's init and train step from it instead of compiling them again (rank 1
    always compiles: JAX keys a CPU executable by its process and only process 0 writes)."""
    return tmp_path_factory.mktemp("maxtext_jax_cache")


def _options(launcher: Launcher, name: str, *more: object) -> list[object]:
    """Two ranks, this run's own run directory, MaxText's checkpoint directory as elastic's."""
    launcher.run_dir = launcher.tmp_path / f"run{name}"
    return ["--nproc-per-node", 2, "--checkpoint-dir", launcher.tmp_path / "out" / name / "checkpoints", *more]


@pytest.mark.parametrize("hardware", ["cpu", "gpu_multiprocess"])
def test_maxtext_plain_command_line_runs_to_the_end_in_one_world(
    launcher: Launcher, maxtext_python: Path, jax_cache: Path, hardware: str
) -> None:
    """Both ranks reach the last step and each step's batch is both processes' (total_weights 2 x 64:
    one world of 2). On the CPU path (XPK's variables) MaxText's fixed coordinator port 1234 gives
    way to the attempt's; gpu_multiprocess calls a bare jax.distributed.initialize()."""
    command = maxtext_command(maxtext_python, launcher.tmp_path / "out", "plain", 40, hardware, jax_cache)
    run = launcher.run(*_options(launcher, "plain"), command=command, env=maxtext_env(),
                       timeout_s=RUN_TIMEOUT_S)
    assert 0 == run.returncode, run.explain()
    assert 1 == len(run.report()["attempts"])
    for rank in (0, 1):
        log = run.rank_log(0, rank)
        if hardware == "cpu":
            assert f"Jax process id is {rank}" in log
            assert "coordinator_address='127.0.0.1:1234') joins elastic's world" in log
        steps = maxtext_steps(log)
        assert (0, 39) == (steps[0][0], steps[-1][0])
        assert {128} == {weights for _, weights in steps}
    assert (launcher.tmp_path / "out" / "plain" / "checkpoints" / "39" / "commit_success.txt").exists()
    # Its jax_cache_dir (given here; ~/jax_cache by default) replaced elastic's cache: said once.
    [replaced] = run.events("compile_cache_replaced")
    assert str(jax_cache) == replaced["cache_dir"]
    assert "MaxText's jax_cache_dir (default ~/jax_cache)" in replaced["reason"]
    assert "pass jax_cache_dir= (empty) on MaxText's command line" in replaced["reason"]


def test_maxtext_with_an_empty_jax_cache_dir_compiles_into_elastics_cache(
    launcher: Launcher, maxtext_python: Path
) -> None:
    """`jax_cache_dir=` (empty), as the report advises: MaxText leaves JAX's cache alone, JAX caches
    in elastic's (--cache-dir) and nothing is reported."""
    command = [*maxtext_command(maxtext_python, launcher.tmp_path / "out", "empty", 3)[:-1], "jax_cache_dir="]
    run = launcher.run(*_options(launcher, "empty"), command=command, env=maxtext_env(),
                       timeout_s=RUN_TIMEOUT_S)
    assert 0 == run.returncode, run.explain()
    assert [] == run.events("compile_cache_replaced")
    assert list((launcher.run_dir / "cache" / "jax").glob("*-cache"))


def test_maxtext_rank_sigkilled_after_a_checkpoint_resumes_from_it(
    launcher: Launcher, maxtext_python: Path, jax_cache: Path
) -> None:
    """SIGKILL of rank 1 once it is past step 12 (checkpoint 10 saved): one restart, elastic's resume
    step is the checkpoint MaxText restores ("restoring from this run's directory step N"), attempt 1's
    first step follows it, and the run ends at the last step."""
    command = maxtext_command(maxtext_python, launcher.tmp_path / "out", "killed", 40, jax_cache_dir=jax_cache)
    process = launcher.start(*_options(launcher, "killed", "--max-restarts", 1), command=command,
                             env=maxtext_env())
    launcher.kill_rank_at_step(process, rank=1, step=12, timeout_s=RUN_TIMEOUT_S)
    run = launcher.finished(process, timeout_s=RUN_TIMEOUT_S)

    assert 0 == run.returncode, run.explain()
    first, second = run.report()["attempts"]
    cause = first["root_cause"]
    assert ("killed", 1, "SIGKILL") == (cause["kind"], cause["rank"], cause["signal"])
    resume_step = second["resume_step"]
    assert resume_step is not None and resume_step >= 10
    for rank in (0, 1):
        restored = RESTORED.search(run.rank_log(1, rank))
        assert restored is not None, run.rank_log(1, rank)[-3000:]
        assert resume_step == int(restored.group(1))
        steps = maxtext_steps(run.rank_log(1, rank))
        assert (resume_step + 1, 39) == (steps[0][0], steps[-1][0])


PREEMPTION_SAVE = re.compile(r"Saving checkpoint at step (\d+) due to preemption")


def _preemption_save(run: Finished, rank: int = 0) -> int:
    """The step MaxText saved at JAX's preemption sync point in attempt 0."""
    saved = PREEMPTION_SAVE.search(run.rank_log(0, rank))
    assert saved is not None, run.rank_log(0, rank)[-3000:]
    return int(saved.group(1))


def test_maxtext_rank_sigterm_from_outside_is_a_preemption_resumed_from_its_save(
    launcher: Launcher, maxtext_python: Path, jax_cache: Path
) -> None:
    """SIGTERM to rank 1 from outside at step 30 (a spot notice to the node's processes): JAX stops
    both at one sync step, MaxText saves it (enable_autocheckpoint) and exits 0 ("Training stopped:
    Job received termination signal"). Before, elastic said 'succeeded'; now the attempt is
    preempted (the bootstrap saw the sync point), restarted with --max-restarts 0 from that save,
    and the run reaches the last step."""
    command = [*maxtext_command(maxtext_python, launcher.tmp_path / "out", "sigterm", 60, jax_cache_dir=jax_cache),
               "enable_autocheckpoint=true"]
    process = launcher.start(*_options(launcher, "sigterm"), command=command, env=maxtext_env())
    launcher.kill_rank_at_step(process, rank=1, step=30, timeout_s=RUN_TIMEOUT_S, signum=signal.SIGTERM)
    run = launcher.finished(process, timeout_s=RUN_TIMEOUT_S)

    assert 0 == run.returncode, run.explain()
    first, second = run.report()["attempts"]
    cause = first["root_cause"]
    assert ("preempted", "SIGTERM") == (cause["kind"], cause["signal"]), cause
    assert "reached JAX's preemption sync point at step" in cause["message"], cause
    saved = _preemption_save(run)
    assert saved == second["resume_step"], (saved, second)
    restored = RESTORED.search(run.rank_log(1, 0))
    assert restored is not None and saved == int(restored.group(1))
    assert 59 == maxtext_steps(run.rank_log(1, 0))[-1][0]


def test_maxtext_rank_sigterm_while_the_launcher_stops_leaves_the_run_continuable(
    launcher: Launcher, maxtext_python: Path, jax_cache: Path
) -> None:
    """A scheduler's SIGTERM reaches rank 1 and the launcher together: the run ends stopped (143),
    and a rerun with the same --run-id resumes from MaxText's preemption save to the last step."""
    command = [*maxtext_command(maxtext_python, launcher.tmp_path / "out", "stopping", 60, jax_cache_dir=jax_cache),
               "enable_autocheckpoint=true"]
    options = _options(launcher, "stopping", "--run-id", "stopping")
    env = maxtext_env()
    process = launcher.start(*options, command=command, env=env)
    launcher.kill_rank_at_step(process, rank=1, step=30, timeout_s=RUN_TIMEOUT_S, signum=signal.SIGTERM)
    os.kill(process.pid, signal.SIGTERM)  # by pid: the launcher this test started
    stopped = launcher.finished(process, timeout_s=RUN_TIMEOUT_S)

    assert 143 == stopped.returncode, stopped.explain()
    assert "stopped" == stopped.report()["outcome"]
    saved = _preemption_save(stopped)
    rerun = launcher.run(*options, command=command, env=env, timeout_s=RUN_TIMEOUT_S)
    assert 0 == rerun.returncode, rerun.explain()
    resumed = rerun.events("attempt_started")[-1]
    assert saved == resumed["resume_step"], (saved, resumed)
    assert 59 == maxtext_steps(rerun.rank_log(resumed["attempt"], 0))[-1][0]


def test_the_recipe_shows_the_tested_command() -> None:
    """examples/maxtext/README.md's command carries every override the tests run MaxText with."""
    recipe = (REPO / "examples" / "maxtext" / "README.md").read_text()
    assert [] == [override for override in (*MAXTEXT_TINY, "hardware=cpu") if override not in recipe]
    assert "--checkpoint-dir" in recipe and "enable_autocheckpoint=true" in recipe
