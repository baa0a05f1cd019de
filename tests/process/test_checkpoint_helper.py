"""elastic.worker.atomic_checkpoint in a real process: a SIGKILL mid-save never yields a chosen checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from harness import REPO, WAIT_TIMEOUT_S, launcher_env, wait_for

from elastic.core.checkpoints.selection import Checkpoint, parse_step
from elastic.run.watches.checkpoint_scan import find_latest

# Writes one file of step STEP into DIRECTORY, records the temporary directory
# in READY (written by rename, so it is whole when seen), then sleeps unless
# told to finish: the test kills it in the middle of the save.
_SAVER = """
import os, sys, time
from elastic.worker import atomic_checkpoint
directory, step, ready, finish = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "finish"
with atomic_checkpoint(directory, step) as tmp:
    (tmp / "model.pt").write_bytes(os.urandom(1 << 16))
    with open(ready + ".tmp", "w") as out:
        out.write(str(tmp))
    os.replace(ready + ".tmp", ready)
    if not finish:
        time.sleep(60)
    (tmp / "optimizer.pt").write_bytes(os.urandom(1 << 16))
"""


def start_saver(directory: Path, step: int, ready: Path, *, finish: bool) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-c", _SAVER, str(directory), str(step), str(ready), "finish" if finish else "hang"]
    return subprocess.Popen(argv, cwd=REPO, env=launcher_env(PYTHONPATH=str(REPO)), stdin=subprocess.DEVNULL)


def save_cleanly(directory: Path, step: int, ready: Path) -> None:
    saver = start_saver(directory, step, ready, finish=True)
    try:
        assert 0 == saver.wait(timeout=WAIT_TIMEOUT_S)
    finally:
        if saver.poll() is None:
            saver.kill()  # only the process this test started
            saver.wait(timeout=WAIT_TIMEOUT_S)


def test_a_clean_save_is_found_with_its_step(tmp_path: Path) -> None:
    """A process that saves and exits leaves step_N, which find_latest returns with its step."""
    save_cleanly(tmp_path / "ckpts", 100, tmp_path / "ready-100")
    final = tmp_path / "ckpts" / "step_100"
    expected = (Checkpoint(final, 100), [".elastic-save-times.json", "COMMITTED", "model.pt", "optimizer.pt"])
    assert expected == (find_latest(tmp_path / "ckpts"), sorted(os.listdir(final)))


def test_a_save_killed_midway_leaves_the_previous_step_latest(tmp_path: Path) -> None:
    """SIGKILL during a save leaves a hidden temp dir that is never chosen; the previous step stays latest."""
    directory = tmp_path / "ckpts"
    save_cleanly(directory, 100, tmp_path / "ready-100")
    ready = tmp_path / "ready-200"
    saver = start_saver(directory, 200, ready, finish=False)
    try:
        leftover = Path(wait_for(lambda: ready.exists() and ready.read_text(), "the saver to start writing"))
        os.kill(saver.pid, signal.SIGKILL)
        returncode = saver.wait(timeout=WAIT_TIMEOUT_S)
    finally:
        if saver.poll() is None:
            saver.kill()  # only the process this test started
            saver.wait(timeout=WAIT_TIMEOUT_S)
    expected = (
        -signal.SIGKILL,
        ["model.pt"],
        None,
        sorted(["step_100", leftover.name]),
        Checkpoint(directory / "step_100", 100),
    )
    actual = (
        returncode,
        os.listdir(leftover),
        parse_step(leftover.name),
        sorted(os.listdir(directory)),
        find_latest(directory),
    )
    assert expected == actual


def test_a_save_killed_midway_does_not_hide_a_later_clean_save(tmp_path: Path) -> None:
    """After a killed save of step 200, a clean save of step 200 is found despite the leftover."""
    directory = tmp_path / "ckpts"
    ready = tmp_path / "ready-killed"
    saver = start_saver(directory, 200, ready, finish=False)
    try:
        wait_for(lambda: ready.exists() and ready.read_text(), "the saver to start writing")
        os.kill(saver.pid, signal.SIGKILL)
        saver.wait(timeout=WAIT_TIMEOUT_S)
    finally:
        if saver.poll() is None:
            saver.kill()  # only the process this test started
            saver.wait(timeout=WAIT_TIMEOUT_S)
    save_cleanly(directory, 200, tmp_path / "ready-clean")
    assert Checkpoint(directory / "step_200", 200) == find_latest(directory)
