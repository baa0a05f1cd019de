"""examples/hf_trainer.py under the launcher: the Trainer's own checkpoint-N, a rank SIGKILLed from outside."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import pytest
from harness import (
    REPO,
    Launcher,
    differing_tensors,
    kill_beside_an_uninterrupted_run,
    rank_processes,
    skip_unless_installed,
    wait_for,
)

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


# tqdm off: 16 steps (2 epochs of 8), the Trainer's logs dict every 2 steps, a save every 4.
QUIET_STEPS, QUIET_LOGGING_STEPS, QUIET_KILL_AFTER = 16, 2, 8


@pytest.mark.timeout(300)
def test_a_trainer_with_tqdm_off_has_its_steps_from_its_logs_and_trainer_state(
    launcher: Launcher, tmp_path: Path
) -> None:
    """With ``disable_tqdm=True`` and no step lines, the Trainer prints only its logs dict, which
    carries an epoch, not a step. Its trainer_state.json and those lines give the steps: rank 1
    SIGKILLed after checkpoint-8, the run resumes and reaches step 16, and the ledger calls only
    the real start-up start-up (every step slept 0.2 s, so the training is at least that long)."""
    output_dir = tmp_path / "out"
    process = launcher.start(
        "--nproc-per-node", 2, "--max-restarts", 1, "--checkpoint-dir", output_dir,
        command=[
            sys.executable, EXAMPLE, "--output_dir", output_dir, "--output", tmp_path / "final.pt",
            "--max_steps", QUIET_STEPS, "--save_steps", SAVE_STEPS, "--step_pause", STEP_PAUSE_S,
            "--logging_steps", QUIET_LOGGING_STEPS, "--no_step_lines", "{resume_from?--resume_from_checkpoint}",
        ],
    )
    saved = output_dir / f"checkpoint-{QUIET_KILL_AFTER}" / "trainer_state.json"
    journal = launcher.run_dir / "journal.jsonl"

    def killable() -> int | None:
        """Rank 1's pid once checkpoint-8 is saved and the launcher has seen a step; -1: the run ended."""
        if process.poll() is not None:
            return -1
        stepped = journal.exists() and '"first_step_seen"' in journal.read_text()
        return rank_processes(process.pid).get(1) if stepped and saved.exists() else None

    pid = wait_for(killable, f"{saved}, a step seen and rank 1", timeout_s=240)
    if pid > 0:
        os.kill(pid, signal.SIGKILL)  # by pid: a rank of the launcher this test started
    resumed = _latest_trainer_checkpoint(output_dir)
    finished = launcher.finished(process, timeout_s=240)

    assert 0 == finished.returncode, finished.explain()
    # No step line of the example's (a traceback of rank 0 ended by its peer's death may quote
    # "tr_loss_step = self.training_step(...)").
    log = finished.rank_log(0, 0)
    assert re.search(r"^step \d+$", log, re.M) is None and "'epoch': " in log
    assert pid > 0, "the run ended without showing a step"
    first, second = finished.report()["attempts"]
    assert resumed is not None and resumed >= QUIET_KILL_AFTER and resumed == second["resume_step"]
    assert ["trainer", "trainer"] == [(row["first_step"] or {}).get("source") for row in (first, second)]
    assert QUIET_STEPS == (second["step_reached"] or {}).get("step")
    assert first["step_reached"]["step"] >= QUIET_KILL_AFTER
    # Start-up ends at the first step: the steps after it slept STEP_PAUSE_S each. The ledger
    # counts the first step of an attempt as start-up (it carries the compilation, the load).
    for row, trained in ((first, first["step_reached"]["step"]), (second, QUIET_STEPS - resumed)):
        ledger = row["ledger"]
        training = ledger["productive"] + ledger["slow_steps"] + ledger["redone"]  # slow steps: training too
        assert training >= (trained - 1) * STEP_PAUSE_S, ledger
        assert ledger["running_no_steps"] == 0.0, ledger
