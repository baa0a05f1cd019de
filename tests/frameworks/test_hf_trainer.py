"""examples/hf_trainer.py under the launcher: the Trainer's own checkpoint-N, a rank SIGKILLed from outside."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from harness import REPO, Launcher, differing_tensors, kill_beside_an_uninterrupted_run, skip_unless_installed

skip_unless_installed("torch", "transformers")  # the ranks import them; this process need not

EXAMPLE = REPO / "examples" / "hf_trainer.py"
# 2 ranks x 4 samples a step over 64 samples: 8 steps an epoch, the whole run, so the resume at
# step 4 is mid-epoch.
STEPS, SAVE_STEPS, KILL_AT_STEP = 8, 4, 5
STEP_PAUSE_S = 0.2  # steps 5-7 give the kill 0.6 s to land before checkpoint-8 is saved


def _command(tmp_path: Path, name: str) -> list[object]:
    return [
        sys.executable, EXAMPLE, "--output_dir", tmp_path / f"out{name}", "--output", tmp_path / f"final{name}.pt",
        "--max_steps", STEPS, "--save_steps", SAVE_STEPS, "--step_pause", STEP_PAUSE_S,
        "{resume_from?--resume_from_checkpoint}",
    ]


def _options(tmp_path: Path, name: str) -> list[object]:
    return ["--nproc-per-node", 2, "--max-restarts", 3, "--checkpoint-dir", tmp_path / f"out{name}"]


def _latest_trainer_checkpoint(output_dir: Path) -> int | None:
    """The Trainer's own newest resumable checkpoint: the highest checkpoint-N with its trainer_state.json."""
    steps = [int(p.name.split("-")[1]) for p in output_dir.glob("checkpoint-*") if (p / "trainer_state.json").exists()]
    return max(steps, default=None)


# Three launches, each importing torch (and transformers) in 2 ranks: 25-35 s on an idle 2-core
# machine, past the suite's 120 s default on a shared one; every wait inside is bounded anyway.
@pytest.mark.timeout(300)
def test_a_trainer_run_resumed_after_a_sigkill_ends_bit_identical_to_an_uninterrupted_one(
    launcher: Launcher, tmp_path: Path
) -> None:
    """Rank 1 SIGKILLed after step 5 resumes from the Trainer's checkpoint-4, with --resume_from_checkpoint
    passed only then, and the final weights match an uninterrupted run's to the bit."""
    runs = kill_beside_an_uninterrupted_run(
        launcher, tmp_path, lambda name: _options(tmp_path, name), lambda name: _command(tmp_path, name),
        rank=1, step=KILL_AT_STEP, latest_checkpoint=lambda: _latest_trainer_checkpoint(tmp_path / "outB"),
    )

    runs.assert_resumed_once_from(rank=1, resume_step=SAVE_STEPS)
    # The flag reached the Trainer, which resumed there: the first step it printed is the next one.
    assert f"step {SAVE_STEPS + 1}\n" in runs.interrupted.rank_log(1, 0)
    assert "step 1\n" not in runs.interrupted.rank_log(1, 0)
    assert [] == differing_tensors(tmp_path / "finalA.pt", tmp_path / "finalB.pt")
