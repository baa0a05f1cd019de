"""Running ``--preflight`` on this node: one command, bounded by its timeout, its output's tail kept.

The command is started by a spawner of its own (:mod:`elastic.node.spawner.process`), as the
ranks are: so that it, and whatever it starts (``setsid`` daemons included), is gone when this
process dies, however it dies (the spawner sweeps when its pipe from us closes, and a child
subreaper sees every descendant). It runs in a session of its own with no shell, its output
(stdout and stderr together) going to a private temporary file, unlinked as soon as the
command has it open, so a command that prints without end costs disk, not memory, and only
the tail is read back. When it exits, or when its time is up, its whole process group is
SIGKILLed before it is reaped (so nothing it left in its group outlives it, and the group id
cannot have been reused); then the spawner is closed, and sweeps what the command left
elsewhere. What the result means is decided in :mod:`elastic.core.diagnosis.preflight`.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from elastic.core.diagnosis.preflight import OUTPUT_LINES, NodeCommand, NodeCommandResult
from elastic.core.launch.spec import WorkerSpec
from elastic.node.logs.tail import read_tail
from elastic.node.spawner.link import SpawnerLink, spawner_gone, start_spawner
from elastic.node.spawner.messages import OP_SIGNAL_RANK

__all__ = ["run_node_command"]

_SPAWN_TIMEOUT_S = 60.0  # for the spawner to start and answer the spawn (a fork and an exec)
_STOP_S = 15.0  # for the spawner to sweep and exit once closed (its own sweep is bounded at 10 s)


def run_node_command(command: NodeCommand, timeout_s: float) -> NodeCommandResult:
    """Run ``command`` here, for at most ``timeout_s``; how it ended and its last lines.

    Blocks the calling thread until the command and its spawner are gone: the spawner's
    parent-death signal is tied to the thread that started it.
    """
    started = time.monotonic()
    descriptor, path = tempfile.mkstemp(prefix="elastic-preflight-", suffix=".log")  # 0600
    with os.fdopen(descriptor, "rb") as output:
        try:
            link = start_spawner(use_cgroup=False)
        except OSError as error:
            os.unlink(path)
            return NodeCommandResult(command.node, error=str(error), duration_s=time.monotonic() - started)
        exited: Future[int] = Future()
        link.reader = threading.Thread(
            target=_read_reports, args=(link, exited), name="elastic-preflight-reports", daemon=True
        )
        link.reader.start()
        try:
            try:
                pid = _spawn(link, command, path)
            finally:
                os.unlink(path)  # the command has it open now, if it started
            if isinstance(pid, str):
                return NodeCommandResult(command.node, error=pid, duration_s=time.monotonic() - started)
            try:
                returncode: int | None = exited.result(max(0.0, started + timeout_s - time.monotonic()))
            except FutureTimeout:
                returncode = None
                link.send_signal(OP_SIGNAL_RANK, pid, signal.SIGKILL)  # its group; the close sweeps the rest
            except OSError as error:  # the spawner died under it
                return NodeCommandResult(command.node, error=str(error), duration_s=time.monotonic() - started)
            duration_s = time.monotonic() - started
        finally:
            link.close(_STOP_S)
        lines = read_tail(output, OUTPUT_LINES)  # the one tail rule: a long last line kept, cut
    if returncode is None:
        return NodeCommandResult(command.node, timed_out=True, output=lines, duration_s=duration_s)
    if returncode < 0:
        return NodeCommandResult(command.node, signal=-returncode, output=lines, duration_s=duration_s)
    return NodeCommandResult(command.node, exit_code=returncode, output=lines, duration_s=duration_s)


def _read_reports(link: SpawnerLink, exited: Future[int]) -> None:
    """The spawner's reports until it exits: the command's is the only exit it reports."""
    link.read_reports(lambda _pid, returncode: exited.set_result(returncode))
    if not exited.done():
        exited.set_exception(spawner_gone(link.process))


def _spawn(link: SpawnerLink, command: NodeCommand, log_path: str) -> int | str:
    """Start ``command`` through the spawner: its pid, or why it could not run (``error``)."""
    spec = WorkerSpec(
        attempt=0, rank=0, local_rank=0, node_id=command.node, argv=command.argv,
        env=dict(command.env), cwd=command.cwd, log_path=log_path,
    )
    try:
        report = link.request_spawn(spec).result(_SPAWN_TIMEOUT_S)
    except FutureTimeout:
        return f"elastic's process spawner (pid {link.process.pid}) did not start it within {_SPAWN_TIMEOUT_S:.0f} s"
    except OSError as error:
        return str(error)
    if report["t"] == "spawned":
        return int(report["pid"])
    named = {"cwd": command.cwd, "log": log_path}.get(str(report["stage"])) or command.argv[0]
    return f"{os.strerror(int(report['errno']))}: {named}"
