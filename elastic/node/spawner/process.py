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
- Given a lease (``--keep LEASE_S GRACE_S SIGNUM``: ``--orphan-lease``), it tells a
  *release* (the agent's ``release`` command before its pipes close: sweep and exit,
  as above) from a *loss* (the pipes' end or the parent's death without one: the
  driver died). A loss with ranks alive keeps them (the keeper,
  ``docs/design/driver-takeover.md``): no more reports (nobody reads them), exits
  still read and reaped as they come, the ranks' output still going to their own
  files; at the lease's end, or at a SIGTERM, SIGINT or SIGHUP from outside once
  lost, the drain: SIGNUM to every rank's group, ``GRACE_S``, then the sweep, and
  exit (:class:`elastic.core.takeover.lease.Keeping` says what is due). Its
  parent-death signal is then SIGUSR2, so that a SIGTERM is known to be another's.
  Once lost it keeps each exit (its rank, status and time) and a ring of its events
  (its books: :class:`elastic.node.spawner.books.KeptBooks`), and answers a new driver on its
  socket (:mod:`elastic.node.spawner.keeper_socket`): ``hello`` (who it is: pid, start
  time, boot id, run id, generation), ``account`` (its ranks, their exits, its events
  after a number), ``drain`` (now, from a driver of its generation or a newer one), and
  ``resume`` (a driver of a newer generation takes it over: the lease ends, the
  connection becomes its command and report link, whose first report is its account
  (the ranks alive and ended since the loss, how each was started, those exits), a
  second one its signal frames; the
  connection's end without a ``release`` is a loss again, and a new lease begins).

Protocol: commands (``spawn``; ``prewarm``: what a rank had imported once past its
start-up; ``release``: the agent is ending it on purpose) on stdin, signal frames on a second pipe, reports (``ready``,
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

from elastic.node.spawner.books import KeptBooks
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

    import socket

    from elastic.core.takeover.lease import Keeping, Lease

__all__ = ["Spawner", "main"]

_SWEEP_TIMEOUT_S = 10.0
_SWEEP_ROUND_S = 0.05
# What a child that could not exec writes: the stage that failed and its errno.
_EXEC_ERROR = struct.Struct("=ii")
_STAGES = ("exec", "cwd")  # cwd: the working directory could not be entered
# The parent-death signal of a spawner with a lease: any signal but the stops it must tell apart.
_KEEPER_PDEATHSIG = signal.SIGUSR2
# What, once its driver is lost, tells a keeper to drain now: a scheduler ending the job.
_OUTSIDE_STOPS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


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

    def __init__(
        self, parent_pid: int, out_fd: int, cgroup: Cgroup | None,
        lease: Lease | None = None, stop_signal: int = signal.SIGTERM, run_id: str = "", generation: int = 0,
    ) -> None:
        """``lease``: keep the ranks that long when the driver is lost, then drain them with
        ``stop_signal`` and the lease's grace (None: a loss sweeps at once); ``run_id`` and
        ``generation``: the run and the driver it serves, as it tells a new driver."""
        self._parent_pid = parent_pid
        self._lease = lease
        self._stop_signal = stop_signal
        self._run_id = run_id
        self._generation = generation
        self._books = KeptBooks()  # its ranks, and once lost how each ended: for a driver that resumes us
        self._listener: socket.socket | None = None  # where a new driver reaches it, once lost
        self._links: dict[str, socket.socket] = {}  # a new driver's connections once it resumed us
        self._command_fd = -1
        self._signal_fd = -1
        self._commands = b""
        self._frames = b""
        self._poller = select.poll()
        self._released = False  # the agent said it is ending us on purpose
        self._keeping: Keeping | None = None  # since the driver was lost, with ranks kept
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
        if self._keeping is not None:  # nobody reads: the driver is lost
            return
        data = pack_message(message)
        try:
            while data:
                data = data[os.write(self._out_fd, data) :]
        except OSError:  # the agent is gone; the pipe's end tells us too
            self._lost()

    # -- the loop ---------------------------------------------------------------------

    def run(self, command_fd: int, signal_fd: int) -> int:
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        self._send({"t": "ready", "pid": os.getpid(), "cgroup": self._cgroup.path if self._cgroup else None})
        poller = self._poller
        self._command_fd, self._signal_fd = command_fd, signal_fd
        for fd in (command_fd, signal_fd, self._wake_r):
            poller.register(fd, select.POLLIN)
        try:
            while not self._stop:
                for fd, _ in poller.poll(self._poll_timeout_ms()):
                    if fd == self._wake_r:
                        self._on_wake()
                    elif self._listener is not None and fd == self._listener.fileno():
                        self._on_connection()
                    elif fd == self._command_fd:
                        self._read_commands()
                    elif fd == self._signal_fd:
                        self._read_frames()
                self._reap()
                if self._keeping is not None:
                    self._keep()
                else:
                    self._pool.start_due()
        finally:
            if self._listener is not None:
                self._listener.close()
            self._sweep()
            if self._cgroup is not None:
                self._cgroup.remove()
        return 0

    def _read_commands(self) -> None:
        try:
            chunk = os.read(self._command_fd, 1 << 16)
        except OSError:  # a new driver's connection reset
            chunk = b""
        if not chunk:
            self._poller.unregister(self._command_fd)  # its end stays readable: never poll it again
            self._command_fd = -1
            self._on_link_closed()
            return
        self._commands += chunk
        while (message := unpack_message(self._commands)) is not None:
            command, self._commands = message
            self._on_command(command)

    def _read_frames(self) -> None:
        try:
            chunk = os.read(self._signal_fd, SIGNAL_FRAME.size * 256)
        except OSError:
            chunk = b""
        if not chunk:
            self._poller.unregister(self._signal_fd)
            self._signal_fd = -1
            self._on_link_closed()
            return
        self._frames += chunk
        while len(self._frames) >= SIGNAL_FRAME.size:
            op, pid, signum = SIGNAL_FRAME.unpack_from(self._frames)
            self._frames = self._frames[SIGNAL_FRAME.size :]
            self._on_signal_frame(op, pid, signum)

    def _on_wake(self) -> None:
        try:
            received = os.read(self._wake_r, 4096)
        except BlockingIOError:
            return
        # PR_SET_PDEATHSIG's signal (the agent's spawning thread is gone) or a reparenting
        # ends us: sweep, exit (with a lease: keep the ranks). A SIGTERM or SIGHUP while the
        # agent lives came from outside: Slurm's scancel and requeue and a node's shutdown
        # signal every process of the job at once. The ranks got it too and may be saving; the
        # agent (through the driver) decides when they are stopped, and closes our pipes when
        # it ends. Once the driver is lost nobody decides: such a stop drains the ranks now.
        if self._keeping is None and self._parent_pid and os.getppid() != self._parent_pid:
            self._lost()
        if self._keeping is not None and _OUTSIDE_STOPS.intersection(received):
            self._drain()  # our parent-death signal is none of these: this one came from outside

    # -- a lost driver ----------------------------------------------------------------

    def _on_link_closed(self) -> None:
        """A pipe from the agent ended: a release ends us; anything else is a loss."""
        if self._released:
            self._stop = True
        else:
            self._lost()

    def _lost(self) -> None:
        """The driver is lost (it died without releasing us): keep the ranks for the lease,
        or, with no lease, no rank alive or a release already said, sweep and exit."""
        if self._keeping is not None:
            return
        if self._released or self._lease is None or not self._lease.keeps or not self._ranks:
            self._stop = True
            return
        self._keeping = self._lease.lost(at=time.monotonic())
        self._pool.drop(older_than=None)  # warm interpreters wait for a launch that cannot come
        for fd in (self._command_fd, self._signal_fd):  # a pipe or connection still open: no longer read
            if fd >= 0:
                self._poller.unregister(fd)
        self._command_fd = self._signal_fd = -1
        for link in self._links.values():
            link.close()
        self._links.clear()
        from elastic.node.spawner import keeper_socket

        self._books.lost(ranks=len(self._ranks))
        if self._listener is not None:  # lost again before a new driver had taken us over whole
            return
        try:
            me = os.getpid()
            self._listener = keeper_socket.listen(keeper_socket.address(me, keeper_socket.start_ticks(me)))
        except OSError:  # kept all the same: only a driver taking over cannot reach us
            return
        self._poller.register(self._listener.fileno(), select.POLLIN)

    def _on_connection(self) -> None:
        """One request of a new driver, answered at once (a peer of another user gets nothing)."""
        from elastic.node.spawner import keeper_socket

        assert self._listener is not None
        try:
            conn, _ = self._listener.accept()
        except OSError:
            return
        kept = False
        try:
            if not keeper_socket.same_user(conn):
                return
            conn.settimeout(1.0)  # a peer that stalls costs the loop a second at most
            request = keeper_socket.receive(conn)
            if request is None:
                return
            if request.get("t") == "resume":
                kept = self._resume(conn, request)
                return
            try:
                keeper_socket.send(conn, self._answer(request))
            except OSError:
                pass
        finally:
            if not kept:
                conn.close()

    def _resume(self, conn: socket.socket, request: dict[str, Any]) -> bool:
        """A new driver takes us over (``channel`` ``link``: commands and reports; then
        ``signals``: signal frames) with a newer generation; whether ``conn`` is kept as that."""
        from elastic.core.takeover.generations import Fence
        from elastic.node.spawner import keeper_socket

        generation, channel = int(request.get("generation", -1)), request.get("channel")
        resumed: dict[str, Any] = {}
        if channel == "link" and self._keeping is not None and Fence(self._generation).claim(generation):
            self._generation = generation
            self._keeping, self._released = None, False
            # Its account as the link's first report, so that no exit falls between an account
            # read and the takeover; reported so, the ranks that ended are forgotten here.
            resumed = self._books.handed_over(self._ranks, generation)
            self._parent_pid = 0  # our parent is no driver now: only the link's end is a loss
        elif not (channel == "signals" and self._keeping is None and "link" in self._links
                  and generation == self._generation and "signals" not in self._links):
            keeper_socket.send(conn, {"t": "refused", "generation": self._generation})
            return False
        conn.settimeout(None)
        self._links[str(channel)] = conn
        if channel == "link":
            self._command_fd = self._out_fd = conn.fileno()
            self._commands = b""
            self._send(resumed)
        else:
            self._signal_fd = conn.fileno()
            self._frames = b""
            keeper_socket.send(conn, {"t": "resumed", "generation": generation})
            if self._listener is not None:  # taken over whole: nobody else to hear until the next loss
                self._poller.unregister(self._listener.fileno())
                self._listener.close()
                self._listener = None
        self._poller.register(conn.fileno(), select.POLLIN)
        return True

    def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        from elastic.core.takeover.generations import Fence
        from elastic.node.spawner import keeper_socket

        kind = request.get("t")
        if kind == "hello":
            me = os.getpid()
            return {"t": "hello", "pid": me, "started": keeper_socket.start_ticks(me), "boot": keeper_socket.boot_id(),
                    "run_id": self._run_id, "generation": self._generation}
        if kind == "account":
            return self._books.account(after=int(request.get("after", 0)))
        if kind == "drain":
            if self._keeping is None or not Fence(self._generation).admits(int(request.get("generation", -1))):
                return {"t": "refused", "generation": self._generation}
            self._drain()
            return {"t": "draining"}
        return {"t": "unknown"}

    def _keep(self) -> None:
        """A turn of the loop while ranks are kept: drain or end what the lease says is due."""
        assert self._keeping is not None
        from elastic.core.takeover.lease import Due

        due = self._keeping.due(time.monotonic(), alive=bool(self._ranks))
        if due is Due.DRAIN:
            self._drain()
        elif due in (Due.KILL, Due.DONE):
            self._stop = True  # the loop's end sweeps what is left

    def _drain(self) -> None:
        """The drain of kept ranks: the stop signal to every group; the grace runs from now."""
        assert self._keeping is not None
        if self._keeping.drain_at is None:
            self._keeping = self._keeping.drained(at=time.monotonic())
            self._books.note("drain", ranks=len(self._ranks))
            for rank in self._ranks:
                killpg(rank, self._stop_signal)

    def _poll_timeout_ms(self) -> int | None:
        if self._keeping is None:
            return self._pool.poll_timeout_ms()
        return int(self._keeping.wake_in_s(time.monotonic()) * 1000) + 1

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
                self._books.ended(pid, _returncode(info))  # lost: kept for a new driver; else crossed out
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
        if command.get("t") == "release":  # the agent ends us on purpose: its pipes close next
            self._released = True
            return
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
        rank = command.get("role", "rank") == "rank"  # else a spare or the store's host (--spares): never warm, never kept
        key = self._pool.note_spawn(argv, env, cwd, command) if rank else None
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
            if rank:
                self._books.started(pid, int(command.get("attempt", 0)), int(command.get("rank", -1)),
                                    {"argv": argv, "env": env, "cwd": cwd, "log_path": log_path})
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
    """``python -m elastic.node.spawner.process PARENT_PID SIGNAL_FD [--no-cgroup]
    [--keep LEASE_S GRACE_S SIGNUM RUN_ID GENERATION]``: stdin commands, stdout reports.

    ``--no-cgroup`` keeps the ranks in our own cgroup even where a cgroup v2
    leaf could be made (process groups and the subreaper then do the sweeping).
    ``--keep``: when the driver is lost, keep the ranks ``LEASE_S`` seconds, then drain them
    with signal ``SIGNUM`` and ``GRACE_S`` seconds of grace (``--orphan-lease``), telling a new
    driver it keeps run ``RUN_ID`` for a driver of ``GENERATION``.
    """
    args = sys.argv[1:] if argv is None else argv
    parent_pid, signal_fd = int(args[0]), int(args[1])
    want_cgroup = "--no-cgroup" not in args[2:]
    lease: Lease | None = None
    stop_signal, run_id, generation = int(signal.SIGTERM), "", 0
    if "--keep" in args[2:]:
        from elastic.core.takeover.lease import Lease

        at = args.index("--keep")
        lease, stop_signal = Lease(float(args[at + 1]), float(args[at + 2])), int(args[at + 3])
        run_id, generation = args[at + 4], int(args[at + 5])
    death_signal = _KEEPER_PDEATHSIG if lease is not None else signal.SIGTERM
    prctl(PR_SET_PDEATHSIG, death_signal)
    if os.getppid() != parent_pid:
        return 1  # the agent died before prctl took effect
    os.set_inheritable(signal_fd, False)
    # First of all, before anything forks: our own signal state, whatever we
    # inherited. Handlers (neither SIG_IGN, which makes the kernel reap children
    # and lose their statuses, nor SIG_DFL, which wakes nobody) only wake the
    # loop's poll() through the wakeup fd; the loop reads what arrived there.
    handled = {signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, death_signal}
    if lease is not None:
        handled.add(signal.SIGINT)  # a stop from outside once the driver is lost
    for signum in handled:
        signal.signal(signum, lambda *_: None)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, handled)
    subreaper = prctl(PR_SET_CHILD_SUBREAPER, 1)
    cgroup = Cgroup.create() if subreaper and want_cgroup else None
    spawner = Spawner(parent_pid, sys.stdout.fileno(), cgroup, lease, stop_signal, run_id, generation)
    return spawner.run(sys.stdin.fileno(), signal_fd)


if __name__ == "__main__":
    sys.exit(main())
