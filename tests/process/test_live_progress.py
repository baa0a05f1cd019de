"""Live progress: the terminal's status line and `elastic status` show the training step as the
ranks report it, apart from the newest complete checkpoint, and the ledger up to now."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from harness import REPO, Launcher, elastic_command, on_a_terminal, wait_for

TOY = REPO / "examples" / "toy_train.py"


def test_the_status_line_shows_the_live_step_and_the_newest_checkpoint_apart(tmp_path: Path) -> None:
    """A fresh run of 8 s saving a checkpoint every 0.1 s step: the status line shows steps and a
    checkpoint the ranks reached during the attempt (it showed `step -`, the checkpoint found
    at the attempt's start, for the whole attempt)."""
    status, screen = on_a_terminal(
        tmp_path, "--nproc-per-node", 2, "--checkpoint-dir", tmp_path / "ckpt",
        command=[sys.executable, TOY, "--steps", 80, "--step-time", 0.1],
    )

    assert 0 == status, screen
    shown = [(int(step), int(ckpt)) for step, ckpt in re.findall(r"\| step (\d+) · ckpt (\d+) \|", screen)]
    assert shown, screen[-2000:]
    assert max(step for step, _ in shown) >= 10, shown
    assert max(ckpt for _, ckpt in shown) >= 10, shown


def test_elastic_status_of_a_live_run_shows_its_step_its_newest_checkpoint_and_the_ledger_up_to_now(
    launcher: Launcher, tmp_path: Path
) -> None:
    """`elastic status` mid-attempt: the training step the ranks reported, the newest complete
    checkpoint on disk, and where the time went up to now (it stopped at the last journal event,
    the first step)."""
    checkpoints = tmp_path / "ckpt"
    process = launcher.start("--nproc-per-node", 2, "--checkpoint-dir", checkpoints,
                             command=[sys.executable, TOY, "--steps", 400, "--step-time", 0.1])
    started = datetime.fromisoformat(launcher.wait_for_event("run_started")["time"]).timestamp()

    def reported() -> subprocess.CompletedProcess[str] | None:
        # The step shown keeps up with the ranks within about two seconds; the newest checkpoint
        # is found at the checkpoint watch's own pace: wait for both.
        shown = elastic_command("status", launcher.run_dir)
        step = re.search(r"^training step: (\d+) ", shown.stdout, re.M)
        saved = re.search(r"^last checkpoint step: (\d+),", shown.stdout, re.M)
        return shown if step and saved and min(int(step.group(1)), int(saved.group(1))) >= 10 else None

    shown = wait_for(reported, "a training step and a checkpoint of at least 10 in `elastic status`", timeout_s=60)
    asked_at = time.time()
    os.kill(process.pid, signal.SIGTERM)  # by pid: the launcher this test started
    assert 143 == launcher.finished(process).returncode

    checkpoint = re.search(r"^last checkpoint step: (\d+),", shown.stdout, re.M)
    assert checkpoint is not None and int(checkpoint.group(1)) >= 10, shown.stdout
    ledger = re.search(r"^where the time went \(([\d.]+)s\):", shown.stdout, re.M)
    assert ledger is not None, shown.stdout
    assert float(ledger.group(1)) >= asked_at - started - 1.5, shown.stdout
