"""The per-node spawner process: starts ranks, learns every exit exactly, leaves nothing behind.

:class:`elastic.node.supervisor.ProcessSupervisor` starts one spawner per node
agent (``python -m elastic.node.spawner.process``) and talks to it over pipes. The spawner
exists because the agent's process cannot be trusted with exit statuses: it
may inherit ``SIGCHLD`` ignored (a parent that ignores it; a Ray worker on a
cluster started with ``RAY_kill_child_processes_on_worker_exit_with_raylet_subreaper``),
and then the kernel reaps ranks itself and ``Popen.wait()`` reads ``ECHILD``
as status 0. It also has other children (an embedded Ray, py-spy) whose
statuses a ``waitpid(-1)`` there would steal. Here, instead:

- ``SIGCHLD`` has a handler (never ignored), so every exit leaves a zombie.
- The spawner is a child subreaper (``PR_SET_CHILD_SUBREAPER``): whatever a
  rank leaves behind, ``setsid`` daemons included, is re-parented to it.
- A rank's exit is read with ``waitid(WNOWAIT)`` while its zombie still pins
  its pid and process group id; the group is SIGKILLed, and only then is the
  zombie reaped. A process group is signalled only while its leader is
  unreaped here, so no signal can reach a group whose id was reused.
- A sweep (after each drain, and when the agent goes away) SIGKILLs every
  descendant: the ranks' cgroup through ``cgroup.kill`` where cgroup v2 is
  writable here, and always every child of this process, round after round,
  as orphans are re-parented to it (only unreaped children are signalled, so
  again no pid can have been reused).
- When its command pipe closes (the agent exited, SIGKILL included) or its
  parent is gone (``PR_SET_PDEATHSIG``), it sweeps and exits. Ranks get
  ``PR_SET_PDEATHSIG`` SIGKILL from it. A SIGTERM or SIGHUP from anyone else
  while its agent lives (Slurm signals every process of a job at once) ends
  nothing: the ranks' own handlers get the drain's grace to save.

Protocol: commands (``spawn``; ``prewarm``: what a rank had imported once past its
start-up) on stdin, signal frames on a second pipe, reports (``ready``,
``spawned``, ``failed``, ``exit``, ``swept``) on stdout, as :mod:`elastic.node.spawner.messages`
frames them. The warm interpreters of ``--prewarm`` and ``--prewarm-memory`` are
:mod:`elastic.node.spawner.prewarm_pool`'s.

The same program keeps an embedded Ray (:mod:`elastic.backends.ray.cluster.embedded`): started by
the driver, it starts the Ray head's process instead of ranks, and ends the whole cluster when
the driver dies.

Standard library only, so it starts fast in an isolated interpreter.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import struct
import sys
import time

from elastic.node.spawner.cgroups import Cgroup
from elastic.node.spawner.prewarm_pool import PrewarmPool, resident_kb
from elastic.node.spawner.calls import (
    PR_SET_CHILD_SUBREAPER,
    PR_SET_PDEATHSIG,
    WorkingDirectoryError,
    become_child,
    killpg,
    prctl,
)
from elastic.node.spawner.messages import (
    OP_SIGNAL_ALL,
    OP_SIGNAL_PROCESS,
    OP_SIGNAL_RANK,
    OP_SWEEP,
    SIGNAL_FRAME,
    pack_message,
    unpack_message,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Spawner", "main"]

_SWEEP_TIMEOUT_S = 10.0
_SWEEP_ROUND_S = 0.05
# What a child that could not exec writes: the stage that failed and its errno.
_EXEC_ERROR = struct.Struct("=ii")
_STAGES = ("exec", "cwd")  # cwd: the working directory could not be entered


def _children() -> list[int]:
    """This process's children, zombies included (it has one thread: the main one)."""
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children") as children:
            return [int(pid) for pid in children.read().split()]
    except OSError:  # a kernel without CONFIG_PROC_CHILDREN: scan every process
        pass
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            found.append(int(entry))
    return found


def _returncode(info: os.waitid_result) -> int:
    """Popen's convention: the exit status, or minus the signal number."""
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


class Spawner:
    """The loop: commands and signal frames in, reports out, zombies read then reaped."""

    def __init__(self, parent_pid: int, out_fd: int, cgroup: Cgroup | None) -> None:
        self._parent_pid = parent_pid
        self._pid = os.getpid()
        self._out_fd = out_fd
        self._cgroup = cgroup
        self._ranks: set[int] = set()  # ranks not yet reaped: their group ids are pinned
        self._pool = PrewarmPool(cgroup)  # warm interpreters for the next attempt (--prewarm)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        os.set_blocking(self._wake_r, False)
        self._stop = False

    # -- reports ----------------------------------------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
        data = pack_message(message)
        try:
            while data:
                data = data[os.write(self._out_fd, data) :]
        except OSError:  # the agent is gone; the pipe's end tells us too
            self._stop = True

    # -- the loop ---------------------------------------------------------------------

    def run(self, command_fd: int, signal_fd: int) -> int:
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        self._send({"t": "ready", "pid": os.getpid(), "cgroup": self._cgroup.path if self._cgroup else None})
        poller = select.poll()
        for fd in (command_fd, signal_fd, self._wake_r):
            poller.register(fd, select.POLLIN)
        commands = b""
        frames = b""
        try:
            while not self._stop:
                for fd, _ in poller.poll(self._pool.poll_timeout_ms()):
                    if fd == self._wake_r:
                        self._on_wake()
                    elif fd == command_fd:
                        chunk = os.read(command_fd, 1 << 16)
                        if not chunk:
                            self._stop = True
                        commands += chunk
                        while (message := unpack_message(commands)) is not None:
                            command, commands = message
                            self._on_command(command)
                    elif fd == signal_fd:
                        chunk = os.read(signal_fd, SIGNAL_FRAME.size * 256)
                        if not chunk:
                            self._stop = True
                        frames += chunk
                        while len(frames) >= SIGNAL_FRAME.size:
                            op, pid, signum = SIGNAL_FRAME.unpack_from(frames)
                            frames = frames[SIGNAL_FRAME.size :]
                            self._on_signal_frame(op, pid, signum)
                self._reap()
                self._pool.start_due()
        finally:
            self._sweep()
            if self._cgroup is not None:
                self._cgroup.remove()
        return 0

    def _on_wake(self) -> None:
        try:
            received = os.read(self._wake_r, 4096)
        except BlockingIOError:
            return
        # PR_SET_PDEATHSIG's SIGTERM (the agent's spawning thread is gone) or a reparenting
        # ends us: sweep, exit. A SIGTERM or SIGHUP while the agent lives came from outside:
        # Slurm's scancel and requeue and a node's shutdown signal every process of the job at
        # once. The ranks got it too and may be saving; the agent (through the driver) decides
        # when they are stopped, and closes our pipes when it ends.
        if os.getppid() != self._parent_pid:
            self._stop = True

    def _on_signal_frame(self, op: int, pid: int, signum: int) -> None:
        if op == OP_SIGNAL_ALL:
            for rank in self._ranks:
                killpg(rank, signum)
        elif op == OP_SIGNAL_RANK:
            if pid in self._ranks:  # else already reaped: its group id may be anyone's now
                killpg(pid, signum)
        elif op == OP_SIGNAL_PROCESS:
            if pid in self._ranks:  # unreaped: the pid is still its
                os.kill(pid, signum)
        elif op == OP_SWEEP:
            self._pool.attempt_over()  # warm ones that had their attempt unused go
            left = self._sweep(spare=self._pool.pids())
            self._send({"t": "swept", "left": left})

    # -- exits ------------------------------------------------------------------------

    def _reap(self) -> None:
        """Report and reap every child that has ended; never blocks."""
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None:
                return
            pid = info.si_pid
            if self._pool.reap(pid):  # a warm interpreter that died before its launch: never a rank
                continue
            if pid in self._ranks:
                # The zombie still holds the pid, so the group id is still this
                # rank's: take down what it left in its group, then reap.
                killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                self._ranks.discard(pid)
                self._pool.rank_gone(pid)
                self._send({"t": "exit", "pid": pid, "returncode": _returncode(info)})
            else:
                os.waitpid(pid, 0)  # an orphan re-parented to us (we are its subreaper)

    def _sweep(self, spare: set[int] | None = None) -> int:
        """SIGKILL every descendant, round after round, until none is left or time is up.

        ``spare``: warm interpreters kept for the next attempt (children of ours
        that never ran a rank's code, outside the ranks' cgroup). Returns how
        many other children were left (stuck in uninterruptible sleep).
        """
        spare = spare or set()
        if not spare:
            self._pool.drop(older_than=None)
        deadline_at = time.monotonic() + _SWEEP_TIMEOUT_S
        while True:
            for rank in self._ranks:
                killpg(rank, signal.SIGKILL)
            if self._cgroup is not None:
                self._cgroup.kill()
            for child in _children():
                if child in spare:
                    continue
                try:
                    os.kill(child, signal.SIGKILL)  # unreaped child of ours: the pid is pinned
                except ProcessLookupError:
                    pass
            self._reap()
            left = [child for child in _children() if child not in spare]
            if not left or time.monotonic() >= deadline_at:
                return len(left)
            select.select([self._wake_r], [], [], _SWEEP_ROUND_S)
            try:
                os.read(self._wake_r, 4096)
            except BlockingIOError:
                pass

    # -- spawning ---------------------------------------------------------------------

    def _on_command(self, command: dict[str, Any]) -> None:
        if command.get("t") == "prewarm":  # a rank past its start-up: what it had imported
            modules = [str(module) for module in command["modules"]]
            self._pool.learned(int(command["pid"]), modules, int(command["resident_kb"]))
            return
        if command.get("t") != "spawn":
            return
        request = int(command["id"])
        log_path = str(command["log_path"])
        try:
            os.makedirs(os.path.dirname(log_path) or ".", mode=0o700, exist_ok=True)
            log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        except OSError as error:
            self._send({"t": "failed", "id": request, "errno": error.errno or errno.EIO, "stage": "log"})
            return
        argv = [str(a) for a in command["argv"]]
        env = {str(k): str(v) for k, v in command["env"].items()}
        cwd = command.get("cwd")
        key = self._pool.note_spawn(argv, env, cwd, command)
        warm = self._pool.hand_off(key, argv, env, cwd, log_path) if key is not None else None
        try:
            pid, failure = (warm, None) if warm is not None else self._fork_exec(argv, env, cwd, log_fd)
        finally:
            os.close(log_fd)
        if failure is not None:
            stage, code = failure
            self._send({"t": "failed", "id": request, "errno": code, "stage": stage})
        else:
            self._ranks.add(pid)
            self._send({"t": "spawned", "id": request, "pid": pid, "warm": warm is not None,
                        "warm_kb": resident_kb(pid) if warm is not None else 0})
            if key is not None:
                self._pool.schedule(pid, key, argv, env, cwd, command)

    def _fork_exec(
        self, argv: list[str], env: dict[str, str], cwd: str | None, log_fd: int
    ) -> tuple[int, tuple[str, int] | None]:
        """Start one rank in its own session; (pid, None), or (0, (stage, errno)) if it could not run."""
        error_r, error_w = os.pipe()  # close-on-exec: EOF means the exec happened
        try:
            pid = os.fork()
        except OSError as error:
            os.close(error_r)
            os.close(error_w)
            return 0, ("exec", error.errno or errno.EAGAIN)
        if pid == 0:  # pragma: no cover - the child, until exec
            try:
                os.close(error_r)
                self._become_rank(argv, env, cwd, log_fd)
            except WorkingDirectoryError as error:
                os.write(error_w, _EXEC_ERROR.pack(_STAGES.index("cwd"), error.errno or errno.ENOENT))
            except OSError as error:
                os.write(error_w, _EXEC_ERROR.pack(_STAGES.index("exec"), error.errno or errno.EIO))
            except BaseException:  # e.g. a NUL byte in argv: report it, never return
                os.write(error_w, _EXEC_ERROR.pack(_STAGES.index("exec"), errno.EINVAL))
            finally:
                os._exit(127)
        os.close(error_w)
        data = b""
        while chunk := os.read(error_r, _EXEC_ERROR.size):
            data += chunk
        os.close(error_r)
        if not data:
            return pid, None
        os.waitpid(pid, 0)  # it never became a rank; nobody else will report it
        stage, code = _EXEC_ERROR.unpack(data[: _EXEC_ERROR.size])
        return 0, (_STAGES[stage], code)

    def _become_rank(self, argv: list[str], env: dict[str, str], cwd: str | None, log_fd: int) -> None:
        become_child(self._pid, cwd, log_fd)
        if self._cgroup is not None:
            self._cgroup.enter()
        os.execvpe(argv[0], argv, env)


def main(argv: list[str] | None = None) -> int:
    """``python -m elastic.node.spawner.process PARENT_PID SIGNAL_FD [--no-cgroup]``: stdin commands, stdout reports.

    ``--no-cgroup`` keeps the ranks in our own cgroup even where a cgroup v2
    leaf could be made (process groups and the subreaper then do the sweeping).
    """
    args = sys.argv[1:] if argv is None else argv
    parent_pid, signal_fd = int(args[0]), int(args[1])
    want_cgroup = "--no-cgroup" not in args[2:]
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent_pid:
        return 1  # the agent died before prctl took effect
    os.set_inheritable(signal_fd, False)
    # First of all, before anything forks: our own signal state, whatever we
    # inherited. Handlers (neither SIG_IGN, which makes the kernel reap children
    # and lose their statuses, nor SIG_DFL, which wakes nobody) only wake the
    # loop's poll() through the wakeup fd; the loop reads what arrived there.
    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda *_: None)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP})
    subreaper = prctl(PR_SET_CHILD_SUBREAPER, 1)
    spawner = Spawner(parent_pid, sys.stdout.fileno(), Cgroup.create() if subreaper and want_cgroup else None)
    return spawner.run(sys.stdin.fileno(), signal_fd)


if __name__ == "__main__":
    sys.exit(main())
