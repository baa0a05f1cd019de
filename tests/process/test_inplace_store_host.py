"""The process group's store hosted apart from every rank: it serves, stops when told, and never outlives its launcher."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from harness import REPO, is_alive, launcher_env, wait_for

torch = pytest.importorskip("torch")

START_S = 60.0  # the host imports torch: slow on a loaded machine


def _env() -> dict[str, str]:
    env = launcher_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _host_command(ready: Path) -> list[str]:
    return [sys.executable, "-m", "elastic.worker.inplace.store_host", "127.0.0.1", "0", str(ready)]


def test_the_store_serves_ranks_that_come_and_go_and_stops_at_sigterm(tmp_path: Path) -> None:
    """A client that dies costs the store nothing; SIGTERM ends it with status 0."""
    ready = tmp_path / "store"
    host = subprocess.Popen(_host_command(ready), env=_env(), stdin=subprocess.DEVNULL)
    try:
        address = wait_for(lambda: ready.exists() and ready.read_text().strip(), "the store's address", START_S)
        hostname, port = address.rsplit(":", 1)
        gone = subprocess.Popen(
            [sys.executable, "-c", "import datetime, sys, torch.distributed as d; "
             "d.TCPStore(sys.argv[1], int(sys.argv[2]), is_master=False, timeout=datetime.timedelta(seconds=30))"
             ".set('generation/0/rank1', 'here'); import os; os.kill(os.getpid(), 9)", hostname, port],
            env=_env(), stdin=subprocess.DEVNULL,
        )
        assert -signal.SIGKILL == gone.wait(START_S)
        client = torch.distributed.TCPStore(hostname, int(port), is_master=False, timeout=timedelta(seconds=10))
        assert b"here" == client.get("generation/0/rank1")
        client.set("generation/1/rank0", "next")
        assert b"next" == client.get("generation/1/rank0")
        host.send_signal(signal.SIGTERM)
        assert 0 == host.wait(10)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()


def test_the_store_ends_when_the_process_that_started_it_is_gone(tmp_path: Path) -> None:
    """Its parent (the launcher) exits without a word, here before the store even started: the store exits too."""
    ready = tmp_path / "store"
    parent = subprocess.run(
        [sys.executable, "-c", "import os, subprocess, sys; print(subprocess.Popen([*sys.argv[1:], str(os.getpid())]).pid)",
         *_host_command(ready)],
        env=_env(), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=START_S, check=True,
    )
    host_pid = int(parent.stdout)
    try:
        started_at = time.monotonic()
        wait_for(lambda: not is_alive(host_pid), "the orphaned store to exit", START_S)
        print(f"the orphaned store exited {time.monotonic() - started_at:.2f}s after its parent")
    finally:
        if is_alive(host_pid):
            os.kill(host_pid, signal.SIGKILL)
