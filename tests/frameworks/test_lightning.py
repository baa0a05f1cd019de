"""examples/lightning_train.py under the launcher: Lightning DDP ranks (gloo), a SIGKILL from outside, an exact resume."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from harness import REPO, Finished, Launcher

pytest.importorskip("lightning")
torch = pytest.importorskip("torch")

EXAMPLE = REPO / "examples" / "lightning_train.py"
# 320 samples in global batches of 2 x 16: 10 steps an epoch. Checkpoints every 4 steps; rank 1
# dies at step 14 (or a little later), so the resume is from step 12 or 16, mid-epoch either way,
# and the rest of the run crosses an epoch boundary (step 20).
SAMPLES, BATCH_SIZE, STEPS, CHECKPOINT_EVERY, KILL_AT = 320, 16, 22, 4, 14
STEPS_PER_EPOCH = SAMPLES // (2 * BATCH_SIZE)
# Lightning's start-up (importing it alone takes seconds) on a loaded 2-core machine.
RUN_TIMEOUT_S = 240.0
SAVED = re.compile(r"^saved checkpoint .*step=(\d+)\.ckpt$", re.MULTILINE)

pytestmark = pytest.mark.timeout(600)


def _options(tmp_path: Path, name: str) -> list[object]:
    return ["--nproc-per-node", 2, "--max-restarts", 3, "--checkpoint-dir", tmp_path / f"ckpt{name}"]


def _command(tmp_path: Path, name: str) -> list[object]:
    return [
        sys.executable, EXAMPLE, "--steps", STEPS, "--checkpoint-every", CHECKPOINT_EVERY,
        "--samples", SAMPLES, "--batch-size", BATCH_SIZE, "--output", tmp_path / f"final{name}.pt",
        "{resume_from?--ckpt-path}",
    ]


def test_a_lightning_run_resumed_mid_epoch_after_a_sigkill_ends_bit_identical_to_an_uninterrupted_one(
    launcher: Launcher, tmp_path: Path
) -> None:
    """Rank 1 SIGKILLed mid-epoch costs one restart from Lightning's latest checkpoint, and the weights match to the bit."""
    launcher.run_dir = tmp_path / "runA"
    process = launcher.start(*_options(tmp_path, "A"), command=_command(tmp_path, "A"))
    launcher.kill_rank_at_step(process, rank=1, step=KILL_AT, timeout_s=RUN_TIMEOUT_S)
    interrupted = launcher.finished(process, timeout_s=RUN_TIMEOUT_S)

    launcher.run_dir = tmp_path / "runB"
    uninterrupted = launcher.run(
        *_options(tmp_path, "B"), command=_command(tmp_path, "B"), timeout_s=RUN_TIMEOUT_S
    )

    assert 0 == interrupted.returncode, interrupted.explain()
    assert 0 == uninterrupted.returncode, uninterrupted.explain()
    first, second = interrupted.report()["attempts"]
    cause = first["root_cause"]
    assert ("killed", 1, "SIGKILL") == (cause["kind"], cause["rank"], cause["signal"])
    summary = [line for line in interrupted.stderr.splitlines() if line.startswith("elastic:")
               or line.startswith("  attempt 0")]
    assert any("rank 1" in line and "SIGKILL" in line for line in summary), interrupted.stderr[-3000:]
    # Lightning's own latest complete checkpoint when rank 1 died: the last save rank 0 reported whole.
    last_saved = int(SAVED.findall(interrupted.rank_log(0, 0))[-1])
    assert 0 != last_saved % STEPS_PER_EPOCH  # a mid-epoch resume, the case a plain DataLoader gets wrong
    assert [None, last_saved] == [e["resume_step"] for e in interrupted.events("attempt_started")]
    assert last_saved == second["resume_step"]
    assert f"step {last_saved + 1}" in interrupted.rank_log(1, 0).splitlines()
    assert 1 == len(uninterrupted.report()["attempts"])
    expected = torch.load(tmp_path / "finalB.pt", weights_only=True)
    actual = torch.load(tmp_path / "finalA.pt", weights_only=True)
    assert list(expected) == list(actual)
    assert [] == [name for name in expected if not torch.equal(expected[name], actual[name])]
