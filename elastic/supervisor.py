"""The one owner of worker processes on a host: spawn, exit events, bounded stop."""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from elastic.errorfile import read_error_message
from elastic.exit_codes import ExitCode
from elastic.failures import WorkerExit
from elastic.guardian import GuardianClient
from elastic.journal import make_private_dirs
from elastic.plan import WorkerSpec

__all__ = ["LaunchError", "ProcessSupervisor", "RunningWorker", "read_log_tail"]

_PR_SET_PDEATHSIG = 1
# After SIGKILL a process is gone as soon as the kernel reaps it; this bounds the
# wait for that (a process stuck in uninterruptible I/O can take a while).
_REAP_TIMEOUT_S = 10.0
_LOG_TAIL_LINES = 20
_LOG_TAIL_BYTES = 16 * 1024
# The statuses a shell gives to a command it cannot run.
NOT_EXECUTABLE_STATUS = int(ExitCode.LAUNCH_NOT_EXECUTABLE)
NOT_FOUND_STATUS = int(ExitCode.LAUNCH_NOT_FOUND)


class LaunchError(Exception):
    """A worker's command could not be executed at all (not found, not executable)."""

    def __init__(self, rank: int, argv0: str, returncode: int, reason: str) -> None:
        super().__init__(f"{argv0}: {reason}")
        self.rank = rank
        self.argv0 = argv0
        self.returncode = returncode
        self.reason = reason


@dataclass(frozen=True)
class RunningWorker:
    """A worker still running: what the hang watcher needs to judge and name it."""

    spec: WorkerSpec
    pid: int
    started_at: float


@dataclass
class _Child:
    spec: WorkerSpec
    popen: subprocess.Popen[bytes]
    started_at: float
    exited: bool = False
    hung: str | None = None  # set by kill_hung just before its SIGKILL
    hung_at: float | None = None

    @property
    def pgid(self) -> int:
        # Each worker leads its own session, so its process group id is its pid.
        return self.popen.pid


def read_log_tail(path: str | Path, lines: int = _LOG_TAIL_LINES) -> tuple[str, ...]:
    """The last ``lines`` lines of a log, read from its end (cheap on a 50 GB log)."""
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            size = log.tell()
            log.seek(max(0, size - _LOG_TAIL_BYTES))
            data = log.read()
    except OSError:
        return ()
    text = data.decode("utf-8", errors="replace").splitlines()
    if size > _LOG_TAIL_BYTES and text:
        text = text[1:]  # the first line is probably cut
    return tuple(text[-lines:])


def _libc_prctl() -> Callable[..., int] | None:
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        return prctl
    except (OSError, AttributeError):
        return None


_prctl = _libc_prctl()


def _die_with_parent(parent_pid: int) -> None:
    """In the child, before exec: SIGKILL me when the spawning thread dies."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


class ProcessSupervisor:
    """Starts workers in their own sessions and reports each exit as it happens.

    Exits arrive through ``on_exit`` from a waiter thread per worker blocked in
    ``waitpid``: no polling. Workers are spawned from one long-lived thread
    because ``PR_SET_PDEATHSIG`` fires when the *spawning thread* exits; a
    guardian process additionally SIGKILLs the workers' process groups (their
    own children included) if this process dies.
    """

    def __init__(
        self,
        node_id: str,
        on_exit: Callable[[WorkerExit], None],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._node_id = node_id
        self._on_exit = on_exit
        self._clock = clock
        self._children: dict[int, _Child] = {}
        self._lock = threading.Condition()
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="elastic-spawner")
        self._guardian = GuardianClient.start()
        self._closed = False

    # -- starting --------------------------------------------------------------------

    def start(self, specs: Sequence[WorkerSpec]) -> None:
        """Start every worker; raise :class:`LaunchError` at the first that cannot run.

        Workers started before the failing one stay supervised: the caller's
        stop takes them down like any other.
        """
        for spec in specs:
            self._spawner.submit(self._spawn, spec).result()

    def _spawn(self, spec: WorkerSpec) -> None:
        make_private_dirs(Path(spec.log_path).parent)  # the run directory too, on a new node
        log_fd = os.open(
            spec.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600
        )
        try:
            popen = self._popen_with_retry(spec, log_fd)
        finally:
            os.close(log_fd)
        child = _Child(spec, popen, started_at=self._clock())
        with self._lock:
            self._children[popen.pid] = child
        self._guardian.watch(child.pgid)
        threading.Thread(
            target=self._wait_for, args=(child,), name=f"elastic-wait-{spec.rank}", daemon=True
        ).start()

    def _popen_with_retry(self, spec: WorkerSpec, log_fd: int) -> subprocess.Popen[bytes]:
        # fork() can fail with EAGAIN when the host is briefly out of processes or
        # memory; that is worth a few retries, anything else is the command's fault.
        retrying = Retrying(
            retry=retry_if_exception_type(BlockingIOError),
            stop=stop_after_attempt(5),
            wait=wait_exponential(multiplier=0.05, max=1.0),
            reraise=True,
        )
        die_with_parent = functools.partial(_die_with_parent, os.getpid())
        try:
            for attempt in retrying:
                with attempt:
                    return subprocess.Popen(
                        list(spec.argv),
                        env=dict(spec.env),
                        cwd=spec.cwd,
                        stdin=subprocess.DEVNULL,
                        stdout=log_fd,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                        close_fds=True,
                        preexec_fn=die_with_parent,
                    )
        except FileNotFoundError as error:
            raise LaunchError(spec.rank, spec.argv[0], NOT_FOUND_STATUS, "command not found") from error
        except OSError as error:
            if isinstance(error, BlockingIOError):
                raise
            reason = os.strerror(error.errno) if error.errno else str(error)
            status = NOT_FOUND_STATUS if error.errno == errno.ENOENT else NOT_EXECUTABLE_STATUS
            raise LaunchError(spec.rank, spec.argv[0], status, reason.lower()) from error
        raise AssertionError("unreachable")  # pragma: no cover

    def _wait_for(self, child: _Child) -> None:
        returncode = child.popen.wait()
        observed_at = self._clock()
        with self._lock:
            # Only our SIGKILL makes it hung: an exit that beat the kill stands.
            hung = child.hung if returncode == -signal.SIGKILL else None
            if hung is not None and child.hung_at is not None:
                observed_at = child.hung_at  # the failure was seen when the hang was
        failed = returncode != 0
        error_file = child.spec.env.get("TORCHELASTIC_ERROR_FILE")
        exit = WorkerExit(
            attempt=child.spec.attempt,
            rank=child.spec.rank,
            node=self._node_id,
            returncode=returncode,
            observed_at=observed_at,
            pid=child.popen.pid,
            log_tail=read_log_tail(child.spec.log_path) if failed else (),
            error_message=read_error_message(error_file) if failed and error_file else None,
            hung=hung,
        )
        self._on_exit(exit)
        with self._lock:
            child.exited = True
            self._lock.notify_all()

    # -- stopping --------------------------------------------------------------------

    def live_pids(self) -> list[int]:
        with self._lock:
            return [pid for pid, c in self._children.items() if not c.exited]

    def running(self) -> list[RunningWorker]:
        """The workers not yet reported exited, in rank order."""
        with self._lock:
            live = [c for c in self._children.values() if not c.exited]
        return sorted(
            (RunningWorker(c.spec, c.popen.pid, c.started_at) for c in live),
            key=lambda w: w.spec.rank,
        )

    def kill_hung(self, pid: int, reason: str, detected_at: float) -> bool:
        """SIGKILL a hung worker's group; its exit then carries ``reason`` (kind hung).

        False when the worker is unknown or already reported its exit.
        """
        with self._lock:
            child = self._children.get(pid)
            if child is None or child.exited:
                return False
            child.hung, child.hung_at = reason, detected_at
        _signal_group(child.pgid, signal.SIGKILL)
        return True

    def signal_all(self, signum: int) -> None:
        for child in list(self._children.values()):
            if not child.exited:
                _signal_group(child.pgid, signum)

    def kill_all(self) -> None:
        """SIGKILL every worker group now; safe to call from a signal handler."""
        self.signal_all(signal.SIGKILL)

    def stop(self, signum: int, grace_s: float) -> None:
        """Signal every group, wait up to ``grace_s``, SIGKILL what is left, reap.

        Idempotent and bounded. Ends with a SIGKILL to every group this
        supervisor started, so a worker's own children do not outlive it.
        """
        self.signal_all(signum)
        if not self._wait_all_exited(self._clock() + grace_s):
            self.kill_all()
            self._wait_all_exited(self._clock() + _REAP_TIMEOUT_S)
        with self._lock:
            children, self._children = list(self._children.values()), {}
        for child in children:
            _signal_group(child.pgid, signal.SIGKILL)
            self._guardian.forget(child.pgid)

    def _wait_all_exited(self, deadline_at: float) -> bool:
        with self._lock:
            while any(not c.exited for c in self._children.values()):
                remaining_s = deadline_at - self._clock()
                if remaining_s <= 0:
                    return False
                self._lock.wait(remaining_s)
            return True

    def close(self, grace_s: float = 0.0) -> None:
        """Stop whatever still runs and release the spawner thread and the guardian."""
        if self._closed:
            return
        self._closed = True
        self.stop(signal.SIGTERM, grace_s)
        self._spawner.shutdown(wait=True)
        self._guardian.close()
