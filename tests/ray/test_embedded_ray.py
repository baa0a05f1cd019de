"""``--backend ray`` with no cluster: elastic starts its own Ray and leaves nothing behind."""

from __future__ import annotations

import json
import signal
import sys
import tempfile
from pathlib import Path

import socket
from collections.abc import Iterator

import psutil
import pytest
from harness import REPO, Launcher, launcher_env, read_pids, script, wait_for

SESSIONS = Path(tempfile.gettempdir()) / "ray"

# A live test cluster of this worker would be joined instead of an embedded Ray.
pytestmark = pytest.mark.usefixtures("no_live_cluster")


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


def environ(process: psutil.Process) -> dict[str, str] | None:
    """A process's environment; None once it is gone (an idle Ray worker may go any moment)."""
    try:
        return dict(process.environ())
    except psutil.Error:
        return None


def command_line(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def embedded_env() -> dict[str, str]:
    """No address anywhere: the launcher has to embed Ray."""
    return {k: v for k, v in launcher_env().items() if k != "RAY_ADDRESS"}


def embedded_record(run_dir: Path) -> dict[str, object]:
    """What the embedded Ray's head recorded in the run directory: ``fields`` and ``processes``."""
    record: dict[str, object] = json.loads((run_dir / "embedded-ray.json").read_text())
    return record


@pytest.fixture
def no_new_ray_sessions(launcher: Launcher) -> object:
    """The embedded Ray's session files are gone once the launcher that started them ends, and
    its record in the run directory lists no process any more."""
    yield
    assert [] == sessions_of(launcher.started_pids())
    record = embedded_record(launcher.run_dir)
    fields = record["fields"]
    assert isinstance(fields, dict) and fields["session_dir"]
    assert not Path(fields["session_dir"]).exists()
    assert [] == record["processes"]


@pytest.fixture
def refused_address() -> Iterator[str]:
    """A loopback address where nothing listens: a port held bound but never listening."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{held.getsockname()[1]}"


@pytest.fixture
def stale_cluster_record(refused_address: str) -> Iterator[str]:
    """``ray start``'s record of a head that died without ``ray stop``; what was there before comes back."""
    record = SESSIONS / "ray_current_cluster"
    before = record.read_bytes() if record.exists() else None
    SESSIONS.mkdir(parents=True, exist_ok=True)
    record.write_text(refused_address)
    try:
        yield refused_address
    finally:
        if before is None:
            record.unlink(missing_ok=True)
        else:
            record.write_bytes(before)


def test_a_stale_ray_start_record_is_named_and_ignored_and_ray_is_embedded(
    launcher: Launcher, stale_cluster_record: str, no_new_ray_sessions: object
) -> None:
    """/tmp/ray/ray_current_cluster names a dead head: Ray would try to join it for minutes; the
    launcher says the file is stale and runs on an embedded Ray."""
    finished = launcher.run("--backend", "ray", "--nproc-per-node", 1, command=script("exit_with.py", 0),
                            env=embedded_env(), timeout_s=120)
    assert 0 == finished.returncode, finished.explain()
    assert f"ignoring {SESSIONS / 'ray_current_cluster'}: no Ray cluster answers at {stale_cluster_record}" \
        in finished.stderr
    assert "starting an embedded Ray" in finished.stderr


@pytest.mark.parametrize("named", ["--address", "RAY_ADDRESS"])
def test_an_address_where_no_ray_answers_fails_in_one_line_naming_it(
    launcher: Launcher, refused_address: str, named: str
) -> None:
    """Ray would retry a dead address for minutes; the launcher tries it for seconds and names
    the flag or variable it came from, before any rank is launched."""
    flags = ["--address", refused_address] if named == "--address" else []
    env = {**embedded_env(), **({"RAY_ADDRESS": refused_address} if named == "RAY_ADDRESS" else {})}
    finished = launcher.run("--backend", "ray", *flags, "--nproc-per-node", 1,
                            command=script("exit_with.py", 0), env=env, timeout_s=120)
    assert 2 == finished.returncode, finished.explain()
    [line] = [line for line in finished.stderr.splitlines() if line.startswith("elastic: error:")]
    assert line.startswith(f"elastic: error: {named}: no Ray cluster answers at {refused_address} (connection refused")


def test_embedded_run_recovers_and_leaves_no_ray_behind(launcher: Launcher, no_new_ray_sessions: object) -> None:
    """The Ray demo of docs/where/ray.md: a SIGKILLed rank, a restart, success, and no Ray process left."""
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
    inherited RAY_AUTH_MODE=disabled; all of it runs under its keeper, the driver's one child,
    marked with the run id and recorded in the run directory; SIGTERM drains, shuts it down, exits 143."""
    process = launcher.start("--backend", "ray", "--nproc-per-node", 1, "--run-id", "embedded-sigterm",
                             command=script("sleep_on_attempt.py", pid_dir, 0),
                             env={**embedded_env(), "RAY_AUTH_MODE": "disabled"})
    [rank] = read_pids(pid_dir, 1)
    listening = listening_addresses(process.pid)
    tree = psutil.Process(process.pid).children(recursive=True)
    modes = {p.name(): p.environ().get("RAY_AUTH_MODE") for p in tree if p.name() in ("gcs_server", "raylet")}
    children = psutil.Process(process.pid).children()
    assert 1 == len(children), [c.cmdline()[:3] for c in children]
    [keeper] = children
    keeper_command = command_line(keeper)
    under_keeper = {p.pid: p for p in keeper.children(recursive=True)}
    names = " ".join(command_line(p) for p in under_keeper.values())
    ray_processes = [p for p in under_keeper.values() if "ELASTIC_RUN_ID" not in (environ(p) or {})]
    # The raylet's two agents overwrite their environment's memory as they retitle themselves.
    unmarked = {command_line(p).split()[0] for p in ray_processes
                if (env := environ(p)) is not None and env.get("ELASTIC_EMBEDDED_RAY") != "embedded-sigterm"}

    def recorded() -> set[int]:
        return {int(p["pid"]) for p in embedded_record(launcher.run_dir)["processes"]}  # type: ignore[union-attr]

    wait_for(lambda: {keeper.pid, rank} <= recorded(), "the keeper and the rank in the record")
    process.send_signal(signal.SIGTERM)
    finished = launcher.finished(process, timeout_s=120)
    assert 143 == finished.returncode, finished.explain()
    assert listening and listening <= LOOPBACK, f"embedded Ray listens beyond loopback: {listening}"
    assert {"gcs_server": "token", "raylet": "token"} == modes
    assert "ray_auth_mode_overridden" in finished.stderr
    assert "elastic.spawner" in keeper_command
    for name in ("gcs_server", "raylet", "ray::DashboardAgent", "ray::RuntimeEnvAgent", "ray::RayNodeAgent"):
        assert name in names, names
    assert rank in under_keeper
    assert unmarked <= {"ray::DashboardAgent", "ray::RuntimeEnvAgent"}
