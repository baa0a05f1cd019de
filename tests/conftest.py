"""Suite-wide rules and fixtures: a test that leaves a process behind fails (DESIGN §12)."""

from __future__ import annotations

import ctypes
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from xdist.scheduler import LoadScopeScheduling

# The harness's assert_* helpers show the values compared, as a test's own asserts do.
pytest.register_assert_rewrite("harness")

from harness import ALLOWED_ROOTS, Launcher, descendants  # noqa: E402
import skipped_frameworks  # noqa: E402
from xdist_scopes import ModulesWithSharedFixtures  # noqa: E402

_PR_SET_CHILD_SUBREAPER = 36
_SETTLE_S = 5.0


def pytest_configure(config: pytest.Config) -> None:
    # The summary's count of tests skipped for want of torch, and how to run them.
    config.pluginmanager.register(skipped_frameworks, "skipped_frameworks")
    # Orphans of the processes a test starts (a rank whose launcher was
    # SIGKILLed, a rank's own child) are re-parented to pytest instead of init,
    # so they stay visible to the fixture below and can be reaped here.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # Ray, where a test starts it, binds loopback only.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    # Under pytest-xdist (docs/design/development.md: the suite runs in parallel), each worker has a temporary
    # directory of its own, inherited by everything its tests start: Ray's sessions and its
    # record of the last cluster started here (ray_current_cluster, which ray.cluster_utils
    # writes) stay the worker's, so one worker's cluster is never joined by another's run.
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        own = Path(tempfile.gettempdir()) / f"elastic-{worker}"
        own.mkdir(mode=0o700, exist_ok=True)
        os.environ["TMPDIR"] = str(own)
        tempfile.tempdir = None  # read TMPDIR again


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadScopeScheduling | None:
    """``--dist loadscope`` (``pyproject.toml``) schedules with ``ModulesWithSharedFixtures``
    (tests/xdist_scopes.py); any other ``--dist`` is xdist's own."""
    if config.getvalue("dist") != "loadscope":
        return None
    return ModulesWithSharedFixtures(config, log)


def _must_end(pid: int) -> bool:
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        if "RayNodeAgent" in " ".join(process.cmdline()):
            return True
        if "ELASTIC_RUN_ID" in process.environ():
            return True
        return not any(p.pid in ALLOWED_ROOTS for p in [process, *process.parents()])
    except psutil.Error:
        return False


def _reap_zombies() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _describe(pid: int) -> str:
    try:
        return f"{pid} {' '.join(psutil.Process(pid).cmdline())[:160]}"
    except psutil.Error:
        return f"{pid} ?"


@pytest.fixture(autouse=True)
def no_orphans() -> Iterator[None]:
    """Fail the test if any process it started is still alive shortly after it ends."""
    before = descendants()
    yield
    deadline_at = time.monotonic() + _SETTLE_S
    left: list[int] = []
    while time.monotonic() < deadline_at:
        _reap_zombies()
        left = [pid for pid in descendants() - before if _must_end(pid)]
        if not left:
            return
        time.sleep(0.05)
    names = [_describe(pid) for pid in sorted(left)]
    for pid in left:  # by PID, never by name
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _reap_zombies()
    pytest.fail("processes left behind: " + "; ".join(names))


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    """Run the launcher in tmp_path; whatever it started is killed by pid at the end."""
    runner = Launcher(tmp_path)
    yield runner
    runner.close()


@pytest.fixture
def pid_dir(tmp_path: Path) -> Path:
    """A directory where rank scripts write their pid files."""
    directory = tmp_path / "pids"
    directory.mkdir()
    return directory


MAXTEXT_PYTHON_VAR = "MAXTEXT_PYTHON"


@pytest.fixture(scope="session")
def maxtext_python() -> Path:
    """The Python 3.12 of a venv with MaxText (``tests/frameworks/maxtext-requirements.txt``), named by
    ``MAXTEXT_PYTHON``; .ci/run makes one. Under CI its absence fails the test: CI must run it."""
    value = os.environ.get(MAXTEXT_PYTHON_VAR)
    if not value:
        reason = (f"{MAXTEXT_PYTHON_VAR} is not set: a Python 3.12 venv with "
                  "tests/frameworks/maxtext-requirements.txt installed (.ci/run makes one)")
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    python = Path(value)
    assert python.exists(), f"{MAXTEXT_PYTHON_VAR}={value}: no such interpreter"
    return python
