"""How a live process holds SIGTERM, read from /proc: told apart for real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from harness import wait_for

from elastic.core.failures import Disposition
from elastic.node.probes.signal_state import grace_kill, loads_jax, signal_disposition
from elastic.worker.bootstrap import BOOTSTRAP_DIR
from elastic.worker.bootstrap.rank_signals import SIGNALS_FILE_VAR

_SETUPS = {
    Disposition.IGNORED: "signal.signal(signal.SIGTERM, signal.SIG_IGN)",
    Disposition.CAUGHT: "signal.signal(signal.SIGTERM, lambda *_: None)",
    Disposition.BLOCKED: "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})",
    Disposition.DEFAULT: "pass",
}


@contextmanager
def _child(setup: str, ready: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    code = f"import signal, time\n{setup}\nopen({str(ready)!r}, 'w').close()\ntime.sleep(60)\n"
    child = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        wait_for(ready.exists, f"{ready} created")
        yield child
    finally:
        child.kill()
        child.wait(10)


@pytest.mark.parametrize("disposition", list(_SETUPS), ids=lambda d: d.value)
def test_the_disposition_of_sigterm_is_read_from_proc(disposition: Disposition, tmp_path: Path) -> None:
    """SIG_IGN, a handler, a blocked mask and the default each read as what they are."""
    with _child(_SETUPS[disposition], tmp_path / "ready") as child:
        seen = signal_disposition(child.pid, signal.SIGTERM)
        assert seen is not None and disposition == seen[0]
        assert not loads_jax(child.pid)
        kill = grace_kill(child.pid, signal.SIGTERM, 5.0)
        assert kill is not None and (disposition, 5.0, False) == (kill.disposition, kill.grace_s, kill.jax)


def test_a_zombie_has_nothing_to_say(tmp_path: Path) -> None:
    """A process that exited (not yet reaped) is no grace kill."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        wait_for(lambda: Path(f"/proc/{child.pid}/status").read_text().split("State:")[1].strip().startswith("Z"),
                 "the child a zombie")
        assert signal_disposition(child.pid, signal.SIGTERM) is None
        assert grace_kill(child.pid, signal.SIGTERM, 5.0) is None
    finally:
        child.wait(10)


@pytest.mark.parametrize(("bootstrap", "own"), [(True, True), (False, False)], ids=["bootstrap", "no-bootstrap"])
def test_a_python_handler_the_rank_installed_reads_as_its_own_through_the_rank_bootstrap(
    bootstrap: bool, own: bool, tmp_path: Path
) -> None:
    """The bootstrap writes the install to the rank's signals file, which the node reads with
    /proc's SigCgt; without the bootstrap nothing says whose handler it is."""
    signals = tmp_path / "rank-0.signals"
    path = os.pathsep.join([BOOTSTRAP_DIR, os.environ.get("PYTHONPATH", "")]) if bootstrap else os.environ.get(
        "PYTHONPATH", "")
    env = {**os.environ, "PYTHONPATH": path, SIGNALS_FILE_VAR: str(signals)}
    with _child(_SETUPS[Disposition.CAUGHT], tmp_path / "ready", env) as child:
        kill = grace_kill(child.pid, signal.SIGTERM, 5.0, str(signals))
        assert kill is not None and (Disposition.CAUGHT, own) == (kill.disposition, kill.own_handler)
        assert kill.in_handler and not kill.never_exits
        assert not grace_kill(child.pid, signal.SIGINT, 5.0, str(signals)).own_handler  # type: ignore[union-attr]
