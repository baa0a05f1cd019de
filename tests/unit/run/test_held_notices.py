"""The launcher's notice signal: held while it starts, released where it is not the notice, ignored once the run has ended."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

CHILD = """
import os, signal, sys, time
from elastic.run.held_notices import hold_notices, ignore_after_run, release_notice
hold_notices(signal.SIGUSR1)
{then}
os.kill(os.getpid(), signal.SIGUSR1)
time.sleep(0.2)
sys.exit(75)
"""


@pytest.mark.parametrize(("then", "ends"), [
    ("pass", 75),  # held: the exit status stands
    ("ignore_after_run(signal.SIGUSR1)", 75),  # the run has ended: a notice changes nothing
    ("release_notice(signal.SIGUSR1)", -signal.SIGUSR1),  # not the notice after all: its default action
], ids=["held", "ignored-after-the-run", "released"])
def test_a_sigusr1_to_the_launcher_does_what_its_moment_calls_for(then: str, ends: int) -> None:
    child = subprocess.run([sys.executable, "-c", CHILD.format(then=then)], timeout=60)
    assert ends == child.returncode


def test_a_notice_held_then_released_does_what_it_would_have_done() -> None:
    child = subprocess.run([sys.executable, "-c", CHILD.format(then="pass").replace(
        "os.kill(os.getpid(), signal.SIGUSR1)\n", "os.kill(os.getpid(), signal.SIGUSR1)\nrelease_notice(signal.SIGUSR1)\n")],
        timeout=60)
    assert -signal.SIGUSR1 == child.returncode


BLOCKED = """
import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
os.kill(os.getpid(), signal.SIGUSR1)  # pending, as a notice sent while a blocked launcher is exec'd
from elastic.run import held_notices
held_notices.hold_notices(signal.SIGUSR1)
sys.exit(75 if held_notices.held == [signal.SIGUSR1] else 1)
"""


def test_a_notice_pending_while_the_launcher_started_blocked_is_held_once_it_holds_notices() -> None:
    """Started with SIGUSR1 blocked (what keeps a notice through the exec and the interpreter's own
    start, where no handler can be), the notice pending is taken when the hold begins; before, the
    hold left it blocked and the notice was never heard."""
    assert 75 == subprocess.run([sys.executable, "-c", BLOCKED], timeout=60).returncode
