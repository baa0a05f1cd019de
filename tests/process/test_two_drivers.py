"""Two launchers of one run started at once: exactly one drives it, the other exits 73 in one line."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from harness import RUN_TIMEOUT_S, Launcher, is_alive, read_pids, script, wait_for

from elastic.core.exit_codes import ExitCode


def test_of_two_launchers_started_at_once_exactly_one_drives_and_the_other_exits_73_naming_it(
    launcher: Launcher, pid_dir: Path
) -> None:
    """The run directory's lock decides: the loser does nothing, says who holds the run, and exits
    with its own status (not 2, a usage error's), so a requeue script can tell the two apart."""
    options = ("--run-id", "twice", "--backoff", "0:0")
    command = script("by_attempt.py", pid_dir, "0=sleep")
    both = [launcher.start(*options, command=command, stderr=subprocess.PIPE) for _ in range(2)]

    loser = wait_for(lambda: next((p for p in both if p.poll() is not None), None), "one launcher to give up",
                     RUN_TIMEOUT_S)
    [winner] = [p for p in both if p is not loser]
    assert loser.stderr is not None
    lines = loser.stderr.read().decode().splitlines()
    assert ExitCode.RUN_HELD == loser.returncode, lines
    assert 1 == len(lines) and f"still being driven by pid {winner.pid}" in lines[0], lines
    [rank] = read_pids(pid_dir, 1)
    assert is_alive(rank) and winner.poll() is None
    assert 1 == sum(1 for path in pid_dir.glob("rank-*.pid"))  # one attempt's rank: the winner's

    winner.send_signal(signal.SIGTERM)
    assert 128 + signal.SIGTERM == winner.wait(RUN_TIMEOUT_S)
