"""examples/jax_orbax.py under the launcher: two JAX processes, Orbax checkpoints, a SIGKILL from outside."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
from harness import REPO, Launcher, launcher_env

pytest.importorskip("jax")
pytest.importorskip("orbax.checkpoint")

EXAMPLE = REPO / "examples" / "jax_orbax.py"
STEPS, SAVE_EVERY, KILL_AT_STEP = 20, 5, 12
# Loaded CI machines: importing JAX and Orbax and compiling take seconds per attempt.
RUN_TIMEOUT_S = 240.0
RESUME_LINE = re.compile(r"resume: elastic step=(\d+) orbax latest_step=(\d+|None)")


def _options(tmp_path: Path, name: str) -> list[object]:
    return ["--nproc-per-node", 2, "--max-restarts", 1, "--checkpoint-dir", tmp_path / f"ckpt{name}"]


def _command(output: Path) -> list[object]:
    return [sys.executable, EXAMPLE, "--steps", STEPS, "--save-every", SAVE_EVERY, "--step-seconds", 0.05,
            "--output", output, "{resume_step?--resume-step}"]


def _final_params(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as arrays:
        return {name: arrays[name] for name in arrays.files}


def test_a_jax_run_resumed_from_orbax_after_a_sigkill_ends_bit_identical(launcher: Launcher, tmp_path: Path) -> None:
    """Rank 1 SIGKILLed mid-run: both processes resume from Orbax's latest committed step and end bit-identical."""
    env = launcher_env(JAX_PLATFORMS="cpu")
    launcher.run_dir = tmp_path / "runA"
    output_a = tmp_path / "finalA.npz"
    process = launcher.start(*_options(tmp_path, "A"), command=_command(output_a), env=env)
    launcher.kill_rank_at_step(process, rank=1, step=KILL_AT_STEP, timeout_s=RUN_TIMEOUT_S)
    interrupted = launcher.finished(process, timeout_s=RUN_TIMEOUT_S)

    launcher.run_dir = tmp_path / "runB"
    output_b = tmp_path / "finalB.npz"
    uninterrupted = launcher.run(*_options(tmp_path, "B"), command=_command(output_b), env=env,
                                 timeout_s=RUN_TIMEOUT_S)

    assert 0 == interrupted.returncode, interrupted.explain()
    assert 0 == uninterrupted.returncode, uninterrupted.explain()
    first, second = interrupted.report()["attempts"]
    assert ("killed", 1) == (first["root_cause"]["kind"], first["root_cause"]["rank"])
    resume_step = second["resume_step"]
    assert [None, resume_step] == [e["resume_step"] for e in interrupted.events("attempt_started")]
    assert resume_step is not None and resume_step % SAVE_EVERY == 0 and resume_step >= SAVE_EVERY
    # What Orbax itself calls its latest step, read by each process before it restores (nothing saved since).
    for rank in (0, 1):
        found = RESUME_LINE.search(interrupted.rank_log(1, rank))
        assert found is not None, interrupted.rank_log(1, rank)[-2000:]
        assert (str(resume_step), str(resume_step)) == found.groups()
    assert f"first_step={resume_step + 1}" in interrupted.rank_log(1, 0)
    assert 1 == len(uninterrupted.report()["attempts"])
    expected, actual = _final_params(output_b), _final_params(output_a)
    assert sorted(expected) == sorted(actual)
    assert [] == [name for name in expected if not np.array_equal(expected[name], actual[name])]
