"""MaxText's own command line under the launcher, unchanged (examples/maxtext/README.md): two CPU
processes of its pre-training entry point, run in a Python 3.12 venv of their own where elastic is
not installed, no shim; a rank SIGKILLed after a checkpoint resumes from it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from harness import REPO, Finished, Launcher, launcher_env

# A tiny decoder on synthetic data, Orbax every 10 steps; the recipe's command (the README's
# overrides are checked against these below). `jax_cache_dir` is the test's own: MaxText's
# default is ~/jax_cache.
TINY = (
    "hardware=cpu", "dataset_type=synthetic", "checkpoint_period=10", "async_checkpointing=false",
    "base_emb_dim=64", "base_num_query_heads=2", "base_num_kv_heads=2", "base_mlp_dim=128",
    "base_num_decoder_layers=2", "head_dim=32", "vocab_size=256", "max_target_length=64",
    "per_device_batch_size=1", "dtype=float32", "attention=dot_product", "enable_tensorboard=false",
    "log_period=10",
)
RUN_TIMEOUT_S = 240.0  # MaxText's start-up is 10-20 s an attempt on the loaded 2-core machine
pytestmark = pytest.mark.timeout(2 * RUN_TIMEOUT_S + 30)
STEP = re.compile(r"completed step: (\d+),.* total_weights: (\d+)")
RESTORED = re.compile(r"restoring from this run's directory step (\d+)")


def _train(launcher: Launcher, python: Path, name: str, steps: int, *options: object) -> list[object]:
    """The launcher's options and MaxText's command, with this run's own output directory."""
    out = launcher.tmp_path / f"out{name}"
    launcher.run_dir = launcher.tmp_path / f"run{name}"
    command = [python, "-m", "maxtext.trainers.pre_train.train", f"run_name={name}",
               f"base_output_directory={out}", f"steps={steps}", *TINY,
               f"jax_cache_dir={launcher.tmp_path / 'jax_cache'}"]
    return ["--nproc-per-node", 2, "--checkpoint-dir", out / name / "checkpoints", *options, "--", *command]


def _steps(run: Finished, attempt: int, rank: int) -> list[tuple[int, int]]:
    """(step, total_weights) of each ``completed step`` line MaxText printed."""
    return [(int(step), int(weights)) for step, weights in STEP.findall(run.rank_log(attempt, rank))]


def test_maxtext_plain_command_line_runs_to_the_end_in_one_world(launcher: Launcher, maxtext_python: Path) -> None:
    """Both ranks reach the last step; each step's batch is both processes' (total_weights 2 x 64:
    one world of 2), and MaxText's fixed coordinator port 1234 gave way to the attempt's."""
    argv = _train(launcher, maxtext_python, "plain", 40)
    split = argv.index("--")
    run = launcher.run(*argv[:split], command=argv[split + 1:], env=launcher_env(), timeout_s=RUN_TIMEOUT_S)
    assert 0 == run.returncode, run.explain()
    assert 1 == len(run.report()["attempts"])
    for rank in (0, 1):
        log = run.rank_log(0, rank)
        assert f"Jax process id is {rank}" in log
        assert "coordinator_address='127.0.0.1:1234') joins elastic's world" in log
        steps = _steps(run, 0, rank)
        assert (0, 39) == (steps[0][0], steps[-1][0])
        assert {128} == {weights for _, weights in steps}
    assert (launcher.tmp_path / "outplain" / "plain" / "checkpoints" / "39" / "commit_success.txt").exists()


def test_maxtext_rank_sigkilled_after_a_checkpoint_resumes_from_it(launcher: Launcher, maxtext_python: Path) -> None:
    """SIGKILL of rank 1 once it is past step 12 (checkpoint 10 saved): one restart, elastic's resume
    step is the checkpoint MaxText restores ("restoring from this run's directory step N"), attempt 1's
    first step follows it, and the run ends at the last step."""
    argv = _train(launcher, maxtext_python, "killed", 60, "--max-restarts", 1)
    split = argv.index("--")
    process = launcher.start(*argv[:split], command=argv[split + 1:], env=launcher_env())
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
        steps = _steps(run, 1, rank)
        assert (resume_step + 1, 59) == (steps[0][0], steps[-1][0])


def test_the_recipe_shows_the_tested_command() -> None:
    """examples/maxtext/README.md's command carries every override this test runs MaxText with."""
    recipe = (REPO / "examples" / "maxtext" / "README.md").read_text()
    assert [] == [override for override in TINY if override not in recipe]
    assert "--checkpoint-dir" in recipe and "enable_autocheckpoint=true" in recipe
