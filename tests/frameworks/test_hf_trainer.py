"""examples/hf_trainer.py under the launcher: the Trainer's own checkpoint-N, a rank SIGKILLed from outside."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from harness import REPO, Finished, Launcher

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

EXAMPLE = REPO / "examples" / "hf_trainer.py"
# 2 ranks x 4 samples a step over 64 samples: 8 steps an epoch, so the resume at step 4 is mid-epoch.
STEPS, SAVE_STEPS, KILL_AT_STEP = 12, 4, 5
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


def _weights(path: Path) -> dict[str, Any]:
    weights: dict[str, Any] = torch.load(path, weights_only=True)
    return weights


# Three launches, each importing torch (and transformers) in 2 ranks: 25-35 s on an idle 2-core
# machine, past the suite's 120 s default on a shared one; every wait inside is bounded anyway.
@pytest.mark.timeout(300)
def test_a_trainer_run_resumed_after_a_sigkill_ends_bit_identical_to_an_uninterrupted_one(
    launcher: Launcher, tmp_path: Path
) -> None:
    """Rank 1 SIGKILLed after step 5 resumes from the Trainer's checkpoint-4, with --resume_from_checkpoint
    passed only then, and the final weights match an uninterrupted run's to the bit."""
    # The uninterrupted reference runs alongside, in a directory of its own.
    reference = Launcher(tmp_path / "A")
    reference.tmp_path.mkdir()
    try:
        reference_process = reference.start(*_options(tmp_path, "A"), command=_command(tmp_path, "A"))
        launcher.run_dir = tmp_path / "runB"
        process = launcher.start(*_options(tmp_path, "B"), command=_command(tmp_path, "B"))
        launcher.kill_rank_at_step(process, rank=1, step=KILL_AT_STEP)
        saved_at_kill = _latest_trainer_checkpoint(tmp_path / "outB")
        interrupted: Finished = launcher.finished(process)
        uninterrupted = reference.finished(reference_process)
    finally:
        reference.close()

    assert 0 == uninterrupted.returncode, uninterrupted.explain()
    assert [None] == [e["resume_step"] for e in uninterrupted.events("attempt_started")]
    assert 0 == interrupted.returncode, interrupted.explain()
    assert SAVE_STEPS == saved_at_kill
    first, second = interrupted.report()["attempts"]
    cause = first["root_cause"]
    assert ("killed", 1, "SIGKILL") == (cause["kind"], cause["rank"], cause["signal"])
    assert [None, saved_at_kill] == [e["resume_step"] for e in interrupted.events("attempt_started")]
    assert saved_at_kill == second["resume_step"]
    # The flag reached the Trainer, which resumed there: the first step it printed is the next one.
    assert f"step {saved_at_kill + 1}\n" in interrupted.rank_log(1, 0)
    assert "step 1\n" not in interrupted.rank_log(1, 0)
    expected, actual = _weights(tmp_path / "finalA.pt"), _weights(tmp_path / "finalB.pt")
    assert list(expected) == list(actual)
    assert [] == [name for name in expected if not torch.equal(expected[name], actual[name])]
