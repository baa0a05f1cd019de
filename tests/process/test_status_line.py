"""The live status line on a terminal: shown on a pty, never cutting into rank lines."""

from __future__ import annotations

from pathlib import Path

from harness import on_a_terminal, script


def run_on_a_terminal(tmp_path: Path, *options: str) -> tuple[int, str]:
    """Run the launcher with stdout and stderr on a pseudo-terminal; return status and screen bytes."""
    return on_a_terminal(tmp_path, *options, command=script("exit_with.py", 0, "--say", "hello", "--sleep", 1.5))


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
