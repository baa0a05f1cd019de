"""A rank's output never stalls the run: ranks write their own files, the console may drop lines."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from harness import Launcher, script

MEBIBYTES = 50
# Liveness bound, not a performance target: a launcher that reads 50 MiB back
# for the console should take well under a second; it must never take this long.
BOUND_S = 10.0


@pytest.mark.parametrize("style", ["lines", "no-newlines"])
def test_a_rank_writing_50_mb_finishes_while_nobody_reads_the_launchers_console(
    launcher: Launcher, style: str
) -> None:
    """A rank writing 50 MiB while no one reads the launcher's pipes: exit 0, all in its log."""
    extra = ["--no-newlines"] if style == "no-newlines" else []
    started_at = time.monotonic()
    process = launcher.start(
        command=script("chatty.py", MEBIBYTES, *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        process.wait(BOUND_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the launcher was still running {BOUND_S}s after start (bound for liveness)")
    took_s = time.monotonic() - started_at

    assert 0 == process.returncode, f"took {took_s:.2f}s"
    log = launcher.run_dir / "attempt-0" / "rank-0.log"
    assert MEBIBYTES * 1024 * 1024 == log.stat().st_size


def test_console_echoes_chosen_ranks_lines_with_a_rank_prefix(launcher: Launcher) -> None:
    """With --ranks 1 the console shows rank 1's lines as '[rank 1] ...' and nothing of rank 0."""
    finished = launcher.run(
        "--nproc-per-node",
        2,
        "--ranks",
        "1",
        command=[sys.executable, "-c", "import os; print('hello from', os.environ['RANK'])"],
    )

    assert 0 == finished.returncode, finished.explain()
    assert ["[rank 1] hello from 1"] == finished.stdout.splitlines()
    assert "hello from 0\n" == finished.rank_log(0, 0)
