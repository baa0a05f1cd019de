"""The agent's link to a spawner process: start it, write spawn requests and
signal frames, close it.

The spawner (:mod:`elastic.node.spawner.process`) forks, reaps and sweeps the ranks;
this is the parent's end of its pipes. What its reports mean is the
supervisor's (:mod:`elastic.node.supervisor`); a spawner kept for one process
of another kind (the embedded Ray's head, a ``--preflight`` command) has its
reports read by :meth:`SpawnerLink.read_reports`.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any, Protocol

from elastic.core.launch.spec import LAUNCH_VARIABLES, WorkerSpec
from elastic.core.takeover.lease import Lease
from elastic.node.spawner.messages import OP_SWEEP, SIGNAL_FRAME, pack_message, read_message

__all__ = ["CommandWriter", "SpawnerLink", "SpawnerProcess", "spawner_gone", "start_spawner"]

# Runs the spawner in an isolated interpreter (no PYTHON* variables, no site):
# it needs the standard library and the directory that holds this package only.
# The trailing comment is the spawner's mark on its command line, which
# cgroups._is_spawner looks for: it must stay "elastic.spawner" whatever the
# module's path, or spawners of an older elastic on this host (and this one)
# would take each other's live leaves for stale ones and kill their ranks.
_BOOT = (
    "import sys; sys.path.append(sys.argv[1]); from elastic.node.spawner.process import main; sys.exit(main(sys.argv[2:]))"
    "  # elastic.spawner"
)
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])


class CommandWriter(Protocol):
    """Where commands go: a spawner's stdin, or a kept one's socket; closing it is the end of file."""

    def write(self, data: bytes, /) -> int: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class SpawnerProcess(Protocol):
    """What the link needs of a spawner: the ``Popen`` of one this process started, or a kept one a
    new driver took over (:class:`elastic.node.spawner.kept.AdoptedKeeper`, over its socket)."""

    pid: int

    @property
    def stdin(self) -> CommandWriter | None: ...

    @property
    def stdout(self) -> IO[bytes] | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


class SpawnerLink:
    """The agent's end of one spawner process: its pipes, pending spawns, and sweeps."""

    def __init__(self, process: SpawnerProcess, signal_fd: int) -> None:
        self.process = process
        self._signal_fd = signal_fd
        self._write_lock = threading.Lock()
        self.pending: dict[int, tuple[WorkerSpec, Future[dict[str, Any]]]] = {}
        self.next_id = 0
        self.sweeps = threading.Condition()
        self.sweeps_done = 0
        self.cgroup: str | None = None
        self.ready = threading.Event()
        self.dead = False
        self.reader: threading.Thread | None = None

    def request_spawn(self, spec: WorkerSpec) -> Future[dict[str, Any]]:
        reply: Future[dict[str, Any]] = Future()
        with self._write_lock:
            if self.dead or self.process.stdin is None:
                raise spawner_gone(self.process)
            self.next_id += 1
            self.pending[self.next_id] = (spec, reply)
            command = {
                "t": "spawn",
                "id": self.next_id,
                "argv": list(spec.argv),
                "env": dict(spec.env),
                "cwd": spec.cwd,
                "log_path": spec.log_path,
                "attempt": spec.attempt,
                "rank": spec.rank,
                "role": spec.role.value,
                "prewarm": list(spec.prewarm),
                "launch_vars": sorted(LAUNCH_VARIABLES),
                "prewarm_delay_s": spec.prewarm_delay_s,
                "prewarm_memory_pct": spec.prewarm_memory_pct,
            }
            try:
                self.process.stdin.write(pack_message(command))
                self.process.stdin.flush()
            except (BrokenPipeError, ValueError) as error:
                self.pending.pop(self.next_id, None)
                raise spawner_gone(self.process) from error
        return reply

    def send_imports(self, pid: int, modules: Sequence[str], estimate_kb: int) -> None:
        """Tell the spawner what rank ``pid`` had imported once past its start-up (and its resident
        memory then): it may start the rank's warm successor (``--prewarm-memory``)."""
        with self._write_lock:
            if self.dead or self.process.stdin is None:
                return
            message = {"t": "prewarm", "pid": pid, "modules": list(modules), "resident_kb": estimate_kb}
            try:
                self.process.stdin.write(pack_message(message))
                self.process.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass  # the spawner is gone; its reader reports what that means

    def read_reports(self, on_exit: Callable[[int, int], None]) -> None:
        """Read the spawner's reports until it exits (on the reader thread): each spawn request
        gets its answer, each exit goes to ``on_exit(pid, returncode)``; at the end, the link is
        dead and the requests still waiting fail."""
        assert self.process.stdout is not None
        while (report := read_message(self.process.stdout)) is not None:
            kind = report["t"]
            if kind in ("spawned", "failed"):
                _, reply = self.pending.pop(int(report["id"]))
                reply.set_result(report)
            elif kind == "exit":
                on_exit(int(report["pid"]), int(report["returncode"]))
        self.dead = True
        for _, reply in list(self.pending.values()):
            reply.set_exception(spawner_gone(self.process))
        self.pending.clear()

    def send_signal(self, op: int, pid: int, signum: int) -> None:
        """One frame, one ``write`` below ``PIPE_BUF``: atomic, lock-free, signal-handler safe."""
        fd = self._signal_fd
        if fd < 0:
            return
        try:
            os.write(fd, SIGNAL_FRAME.pack(op, pid, signum))
        except OSError:
            pass  # the spawner is gone; its reader reports what that means

    def close(self, timeout_s: float) -> None:
        """Release the spawner (it sweeps and exits at once, lease or not) and wait for it."""
        with self._write_lock:  # said before the pipes close: their end alone is a lost driver
            try:
                if self.process.stdin is not None:
                    self.process.stdin.write(pack_message({"t": "release"}))
                    self.process.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass  # gone already
        fd, self._signal_fd = self._signal_fd, -1
        if fd >= 0:
            os.close(fd)
        with self._write_lock:
            try:
                if self.process.stdin is not None:
                    self.process.stdin.close()
            except BrokenPipeError:
                pass
        # It sweeps, then exits; its reports end with end-of-file. (Not
        # process.wait() alone: where this process ignores SIGCHLD, that
        # returns at once.)
        if self.reader is not None:
            self.reader.join(timeout_s)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def sweep(self, timeout_s: float) -> None:
        """Ask the spawner to sweep what the ranks left behind; wait up to ``timeout_s`` for it."""
        with self.sweeps:
            target = self.sweeps_done + 1
        self.send_signal(OP_SWEEP, 0, 0)
        deadline_at = time.monotonic() + timeout_s
        with self.sweeps:
            while self.sweeps_done < target and not self.dead:
                remaining_s = deadline_at - time.monotonic()
                if remaining_s <= 0:
                    return
                self.sweeps.wait(remaining_s)


def spawner_gone(process: SpawnerProcess) -> OSError:
    status = process.poll()
    return OSError(
        errno.EPIPE,
        f"elastic's process spawner (pid {process.pid}, python -m elastic.node.spawner.process) "
        f"is gone (exit status {status}); its error, if any, is on the agent's stderr",
    )


def start_spawner(
    use_cgroup: bool, lease: Lease | None = None, stop_signal: int = signal.SIGTERM, run_id: str = "", generation: int = 0,
) -> SpawnerLink:
    """A new spawner process and its link (its reports are read by the caller).

    Call it from a long-lived thread: ``PR_SET_PDEATHSIG`` fires when the
    *spawning thread* exits. ``lease``: the spawner keeps its ranks that long when
    this process dies without closing it (:meth:`SpawnerLink.close`), then drains them
    with ``stop_signal`` and the lease's grace (``--orphan-lease``), telling a new driver that it
    keeps ``run_id`` for a driver of ``generation``.
    """
    keep = [] if lease is None or not lease.keeps else [
        "--keep", repr(lease.lease_s), repr(lease.grace_s), str(int(stop_signal)), run_id, str(generation)]
    signal_r, signal_w = os.pipe()
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _BOOT, _PACKAGE_ROOT, str(os.getpid()), str(signal_r)]
            + ([] if use_cgroup else ["--no-cgroup"]) + keep,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=(signal_r,),
            close_fds=True,
            start_new_session=True,  # a Ctrl-C meant for the launcher does not reach it
        )
    except BaseException:
        os.close(signal_w)
        raise
    finally:
        os.close(signal_r)
    # Never block a signal handler: a frame the pipe has no room for (64 KiB
    # of them unread: a spawner that stopped reading) is dropped.
    os.set_blocking(signal_w, False)
    return SpawnerLink(process, signal_w)
