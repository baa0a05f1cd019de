"""Suite-wide rule: a test that leaves a process behind fails (DESIGN §12)."""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Iterator

import psutil
import pytest

_PR_SET_CHILD_SUBREAPER = 36
_SETTLE_S = 5.0


def pytest_configure(config: pytest.Config) -> None:
    # Orphans of the processes a test starts (a rank whose launcher was
    # SIGKILLed, a rank's own child) are re-parented to pytest instead of init,
    # so they stay visible to the fixture below and can be reaped here.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # Ray, where a test starts it, binds loopback only.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"


def _descendants() -> dict[int, str]:
    found = {}
    for child in psutil.Process().children(recursive=True):
        try:
            found[child.pid] = " ".join(child.cmdline())[:160] or child.name()
        except psutil.Error:
            continue
    return found


def _reap_zombies() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.add(pid)
        except psutil.NoSuchProcess:
            continue
    return alive


@pytest.fixture(autouse=True)
def no_orphans() -> Iterator[None]:
    """Fail the test if any process it started is still alive shortly after it ends."""
    before = set(_descendants())
    yield
    deadline_at = time.monotonic() + _SETTLE_S
    left: set[int] = set()
    while time.monotonic() < deadline_at:
        _reap_zombies()
        left = _alive(set(_descendants()) - before)
        if not left:
            return
        time.sleep(0.05)
    names = _descendants()
    for pid in left:  # by PID, never by name
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _reap_zombies()
    pytest.fail(
        "processes left behind: " + "; ".join(f"{pid} {names.get(pid, '?')}" for pid in sorted(left))
    )
