"""examples/torch_ddp.py under the launcher: real DDP ranks (gloo), a SIGKILL, an exact resumption."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from harness import REPO, Finished, Launcher

torch = pytest.importorskip("torch")

EXAMPLE = REPO / "examples" / "torch_ddp.py"
STEPS, CHECKPOINT_EVERY, FAIL_AT_STEP = 30, 5, 17  # not a multiple: steps 16-17 are lost and redone


def _train(launcher: Launcher, tmp_path: Path, name: str, *extra: object) -> tuple[Finished, Path]:
    """Run the example with 2 ranks in its own run and checkpoint directories; the run and its output."""
    launcher.run_dir = tmp_path / f"run{name}"
    output = tmp_path / f"final{name}.pt"
    finished = launcher.run(
        "--nproc-per-node", 2, "--max-restarts", 3, "--checkpoint-dir", tmp_path / f"ckpt{name}",
        command=[sys.executable, EXAMPLE, "--steps", STEPS, "--checkpoint-every", CHECKPOINT_EVERY,
                 "--output", output, *extra],
    )
    return finished, output


def test_a_ddp_run_resumed_after_a_sigkill_ends_bit_identical_to_an_uninterrupted_one(
    launcher: Launcher, tmp_path: Path
) -> None:
    """Rank 1 SIGKILLed after step 17 costs one restart from step 15, and the final weights match to the bit."""
    interrupted, output_a = _train(launcher, tmp_path, "A", "--fail-at-step", FAIL_AT_STEP)
    uninterrupted, output_b = _train(launcher, tmp_path, "B")

    assert 0 == interrupted.returncode, interrupted.explain()
    assert 0 == uninterrupted.returncode, uninterrupted.explain()
    first, second = interrupted.report()["attempts"]
    cause = first["root_cause"]
    assert ("killed", 1, "SIGKILL") == (cause["kind"], cause["rank"], cause["signal"])
    last_saved = FAIL_AT_STEP // CHECKPOINT_EVERY * CHECKPOINT_EVERY
    assert [None, last_saved] == [e["resume_step"] for e in interrupted.events("attempt_started")]
    assert last_saved == second["resume_step"]
    assert 1 == len(uninterrupted.report()["attempts"])
    expected = torch.load(output_b, weights_only=True)
    actual = torch.load(output_a, weights_only=True)
    assert list(expected) == list(actual)
    assert [] == [name for name in expected if not torch.equal(expected[name], actual[name])]
