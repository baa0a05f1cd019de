"""``--backend ray`` with no cluster: elastic starts its own Ray and leaves nothing behind."""

from __future__ import annotations

import signal
import sys
import tempfile
from pathlib import Path

import psutil
import pytest
from harness import REPO, Launcher, launcher_env, read_pids, script

SESSIONS = Path(tempfile.gettempdir()) / "ray"


def sessions_of(pids: list[int]) -> list[Path]:
    """Ray names a session directory after the driver that started it: ``session_<time>_<pid>``."""
    return [path for pid in pids for path in SESSIONS.glob(f"session_2*_{pid}")]


LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1"}


def listening_addresses(pid: int) -> set[str]:
    """The addresses the process tree of ``pid`` (the launcher and its Ray) listens on."""
    tree = {pid} | {child.pid for child in psutil.Process(pid).children(recursive=True)}
    return {
        conn.laddr.ip
        for conn in psutil.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN and conn.pid in tree
    }


def embedded_env() -> dict[str, str]:
    """No address anywhere: the launcher has to embed Ray."""
    return {k: v for k, v in launcher_env().items() if k != "RAY_ADDRESS"}


@pytest.fixture
def no_new_ray_sessions(launcher: Launcher) -> object:
    """The embedded Ray's session files are gone once the launcher that started them ends."""
    yield
    assert [] == sessions_of(launcher.started_pids())


def test_embedded_run_recovers_and_leaves_no_ray_behind(launcher: Launcher, no_new_ray_sessions: object) -> None:
    """The README's Ray demo: a SIGKILLed rank, a restart, success, and no Ray process left."""
    finished = launcher.run(
        "--backend", "ray", "--nproc-per-node", 2, "--max-restarts", 3, "--checkpoint-dir", "toy-checkpoints",
        command=[sys.executable, str(REPO / "examples" / "toy_train.py"), "--fail-at-step", 3,
                 "--steps", 5, "--step-time", 0.02],
        env=embedded_env(), timeout_s=120,
    )
    assert 0 == finished.returncode, finished.explain()
    cause = finished.report()["attempts"][0]["root_cause"]
    assert ("killed", "SIGKILL") == (cause["kind"], cause["signal"])


def test_embedded_run_that_fails_leaves_no_ray_behind(launcher: Launcher, no_new_ray_sessions: object) -> None:
    """A failing run exits with the rank's status and shuts its Ray down."""
    finished = launcher.run("--backend", "ray", "--nproc-per-node", 1, command=script("exit_with.py", 3),
                            env=embedded_env(), timeout_s=120)
    assert 3 == finished.returncode, finished.explain()


def test_embedded_run_stopped_by_sigterm_leaves_no_ray_behind(
    launcher: Launcher, pid_dir: Path, no_new_ray_sessions: object
) -> None:
    """The embedded Ray listens on loopback only, with token authentication on even under an
    inherited RAY_AUTH_MODE=disabled; SIGTERM drains, shuts it down, exits 143."""
    process = launcher.start("--backend", "ray", "--nproc-per-node", 1,
                             command=script("sleep_on_attempt.py", pid_dir, 0),
                             env={**embedded_env(), "RAY_AUTH_MODE": "disabled"})
    read_pids(pid_dir, 1)
    listening = listening_addresses(process.pid)
    modes = {p.name(): p.environ().get("RAY_AUTH_MODE") for p in psutil.Process(process.pid).children(recursive=True)
             if p.name() in ("gcs_server", "raylet")}
    process.send_signal(signal.SIGTERM)
    finished = launcher.finished(process, timeout_s=120)
    assert 143 == finished.returncode, finished.explain()
    assert listening and listening <= LOOPBACK, f"embedded Ray listens beyond loopback: {listening}"
    assert {"gcs_server": "token", "raylet": "token"} == modes
    assert "ray_auth_mode_overridden" in finished.stderr
