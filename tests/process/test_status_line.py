"""The live status line on a terminal: shown on a pty, never cutting into rank lines."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

from harness import RUN_TIMEOUT_S, launcher_env, script


def run_on_a_terminal(tmp_path: Path, *options: str) -> tuple[int, str]:
    """Run the launcher with stdout and stderr on a pseudo-terminal; return status and screen bytes."""
    primary, secondary = pty.openpty()
    argv = [sys.executable, "-m", "elastic", "run", "--run-dir", str(tmp_path / "run"), *options,
            "--", *script("exit_with.py", 0, "--say", "hello", "--sleep", 1.5)]
    env = {**launcher_env(), "TERM": "xterm"}
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=secondary, stderr=secondary, env=env,
                               cwd=tmp_path, start_new_session=True)
    os.close(secondary)
    screen = b""
    deadline_at = time.monotonic() + RUN_TIMEOUT_S
    try:
        while time.monotonic() < deadline_at:
            ready, _, _ = select.select([primary], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(primary, 65536)
                except OSError:
                    break  # the launcher closed the terminal
                if not chunk:
                    break
                screen += chunk
            elif process.poll() is not None:
                break
        return process.wait(10), screen.decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        os.close(primary)


def test_a_terminal_gets_a_status_line_below_whole_rank_lines(tmp_path: Path) -> None:
    """On a tty the status line is drawn (and erased before each line), and lines stay whole."""
    status, screen = run_on_a_terminal(tmp_path, "--nproc-per-node", "2")

    assert 0 == status, screen
    assert "elastic | running | attempt 0 | world 2 |" in screen
    assert "\r\x1b[K[rank 0] hello attempt 0" in screen
    assert "\r\x1b[K[rank 1] hello attempt 0" in screen


def test_no_status_turns_the_status_line_off(tmp_path: Path) -> None:
    """--no-status keeps the terminal free of it."""
    status, screen = run_on_a_terminal(tmp_path, "--no-status")

    assert 0 == status, screen
    assert "elastic | " not in screen
    assert "[rank 0] hello attempt 0" in screen
