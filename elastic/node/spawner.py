"""The per-node spawner process: starts ranks, learns every exit exactly, leaves nothing behind.

:class:`elastic.node.supervisor.ProcessSupervisor` starts one spawner per node
agent (``python -m elastic.node.spawner``) and talks to it over pipes. The spawner
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
  spawning thread dies (``PR_SET_PDEATHSIG``), it sweeps and exits. Ranks get
  ``PR_SET_PDEATHSIG`` SIGKILL from it.

Protocol. Commands arrive on stdin as messages (``spawn``). Signals arrive
on a second pipe as fixed-size frames (:data:`SIGNAL_FRAME`), each one
``write`` below ``PIPE_BUF`` and so atomic: any thread, or a signal handler,
can send one without a lock. Reports leave on stdout as messages: ``ready``,
``spawned``, ``failed``, ``exit`` and ``swept``. A message is a dict of plain
values, ``marshal``-ed behind its length (:func:`pack_message`): both ends
are the same interpreter, and ``marshal`` costs no import where ``json``
would cost a good part of the start-up.

Standard library only, so it starts fast in an isolated interpreter.
"""

from __future__ import annotations

import ctypes
import errno
import marshal
import os
import select
import signal
import struct
import sys
import time

from elastic.node.cgroups import Cgroup

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from typing import IO, Any

__all__ = [
    "OP_SIGNAL_ALL",
    "OP_SIGNAL_RANK",
    "OP_SWEEP",
    "SIGNAL_FRAME",
    "main",
    "pack_message",
    "read_message",
    "unpack_message",
]

SIGNAL_FRAME = struct.Struct("=iii")  # op, pid, signum
OP_SIGNAL_ALL = 1  # signal every rank's process group (pid unused)
OP_SIGNAL_RANK = 2  # signal one rank's process group
OP_SWEEP = 3  # SIGKILL every descendant, report ``swept`` when none is left

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_SWEEP_TIMEOUT_S = 10.0
_SWEEP_ROUND_S = 0.05
_EXEC_ERROR = struct.Struct("=i")  # the errno of a child that could not exec
_PIPE_SIZE = 65536  # Linux's default pipe capacity
_PREWARM_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prewarm.py")


_LENGTH = struct.Struct("=I")


def pack_message(message: dict[str, Any]) -> bytes:
    payload = marshal.dumps(message)
    return _LENGTH.pack(len(payload)) + payload


def unpack_message(buffer: bytes) -> tuple[dict[str, Any], bytes] | None:
    """The first whole message in ``buffer`` and what follows it; None if there is none yet."""
    if len(buffer) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack_from(buffer)
    end = _LENGTH.size + length
    if len(buffer) < end:
        return None
    message: dict[str, Any] = marshal.loads(buffer[_LENGTH.size : end])
    return message, buffer[end:]


def read_message(stream: IO[bytes]) -> dict[str, Any] | None:
    """The next message from a blocking stream; None at its end."""
    header = stream.read(_LENGTH.size)
    if len(header) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack(header)
    payload = stream.read(length)
    if len(payload) < length:
        return None
    message: dict[str, Any] = marshal.loads(payload)
    return message


def _prctl(option: int, arg: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, arg, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


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


def _killpg(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


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
        # Warm interpreters (elastic.node.prewarm) waiting for a launch, by pid: (key, control fd, attempt).
        self._warm: dict[int, tuple[tuple[Any, ...], int, int]] = {}
        self._dropped: set[int] = set()  # warm ones that died or were killed unused: reaped unreported
        self._attempt = -1  # the latest attempt a spawn named
        # Warm interpreters to start once their time comes: (due at, arguments of _start_warm).
        self._due: list[tuple[float, tuple[Any, ...]]] = []
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
                for fd, _ in poller.poll(self._poll_timeout_ms()):
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
                self._start_due()
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
        if signal.SIGTERM in received or signal.SIGHUP in received:
            self._stop = True  # PR_SET_PDEATHSIG, or someone ending us: sweep, exit
        if os.getppid() != self._parent_pid:
            self._stop = True

    def _on_signal_frame(self, op: int, pid: int, signum: int) -> None:
        if op == OP_SIGNAL_ALL:
            for rank in self._ranks:
                _killpg(rank, signum)
        elif op == OP_SIGNAL_RANK:
            if pid in self._ranks:  # else already reaped: its group id may be anyone's now
                _killpg(pid, signum)
        elif op == OP_SWEEP:
            self._drop_warm(older_than=self._attempt)  # they had their attempt and were not used
            self._due.clear()  # the attempt they were to follow is over: its successor schedules its own
            left = self._sweep(spare=set(self._warm))
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
            if pid in self._warm or pid in self._dropped:
                os.waitpid(pid, 0)  # a warm interpreter that died before its launch: never a rank
                if pid in self._warm:
                    os.close(self._warm.pop(pid)[1])
                self._dropped.discard(pid)
            elif pid in self._ranks:
                # The zombie still holds the pid, so the group id is still this
                # rank's: take down what it left in its group, then reap.
                _killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                self._ranks.discard(pid)
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
            self._drop_warm(older_than=None)
        deadline_at = time.monotonic() + _SWEEP_TIMEOUT_S
        while True:
            for rank in self._ranks:
                _killpg(rank, signal.SIGKILL)
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
        self._attempt = max(self._attempt, int(command.get("attempt", 0)))
        key = _warm_key(argv, env, cwd, command) if command.get("prewarm") else None
        warm = self._launch_warm(key, argv, env, cwd, log_path) if key is not None else None
        try:
            pid, failure = (warm, None) if warm is not None else self._fork_exec(argv, env, cwd, log_fd)
        finally:
            os.close(log_fd)
        if failure is not None:
            self._send({"t": "failed", "id": request, "errno": failure, "stage": "exec"})
        else:
            self._ranks.add(pid)
            self._send({"t": "spawned", "id": request, "pid": pid, "warm": warm is not None})
            if key is not None:
                due_at = time.monotonic() + float(command.get("prewarm_delay_s", 0.0))
                modules, launch_vars = list(command["prewarm"]), list(command["launch_vars"])
                self._due.append((due_at, (key, argv[0], env, cwd, modules, launch_vars, self._attempt)))

    def _poll_timeout_ms(self) -> int | None:
        if not self._due:
            return None
        return max(0, int((min(due for due, _ in self._due) - time.monotonic()) * 1000) + 1)

    def _start_due(self) -> None:
        now = time.monotonic()
        for entry in [entry for entry in self._due if entry[0] <= now]:
            self._due.remove(entry)
            self._start_warm(*entry[1])

    # -- warm interpreters (--prewarm) ------------------------------------------------

    def _launch_warm(
        self, key: tuple[Any, ...], argv: list[str], env: dict[str, str], cwd: str | None, log_path: str
    ) -> int | None:
        """Hand a waiting warm interpreter made for ``key`` its rank; its pid, or None if there is none."""
        for pid, (warm_key, control_fd, made_in) in list(self._warm.items()):
            if warm_key != key or made_in >= self._attempt:  # made for a later attempt than its own
                continue
            del self._warm[pid]
            try:
                alive = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
            except ChildProcessError:
                alive = False
            if not alive:  # died waiting (killed from outside): reaped unreported; this rank starts cold
                self._dropped.add(pid)
                os.close(control_fd)
                return None
            if self._cgroup is not None:
                self._cgroup.enter(pid)
            data = pack_message({"argv": argv, "env": env, "cwd": cwd, "log_path": log_path})
            try:
                # Never block here (it may still be importing): the whole message goes into
                # the empty pipe at once, grown to hold it, or the rank starts cold.
                if len(data) > _PIPE_SIZE:
                    import fcntl

                    fcntl.fcntl(control_fd, fcntl.F_SETPIPE_SZ, len(data))
                os.set_blocking(control_fd, False)
                written = os.write(control_fd, data)
            except OSError:
                written = 0
            finally:
                os.close(control_fd)
            if written != len(data):
                _killpg(pid, signal.SIGKILL)  # the pid is ours and unreaped: its group is its own
                self._dropped.add(pid)
                return None
            return pid
        return None

    def _start_warm(
        self,
        key: tuple[Any, ...],
        interpreter: str,
        env: dict[str, str],
        cwd: str | None,
        modules: list[str],
        launch_vars: list[str],
        attempt: int,
    ) -> None:
        """Start a warm interpreter for the next spawn with this key: imports done, attempt variables absent."""
        neutral = {name: value for name, value in env.items() if name not in launch_vars}
        control_r, control_w = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(control_r)
            os.close(control_w)
            return  # no warm one: the next spawn starts cold
        if pid == 0:  # pragma: no cover - the child, until exec
            try:
                os.close(control_w)
                os.setsid()
                _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
                if os.getppid() != self._pid:
                    os._exit(1)
                signal.set_wakeup_fd(-1)
                for signum in (signal.SIGPIPE, signal.SIGXFSZ):
                    signal.signal(signum, signal.SIG_DFL)
                if cwd is not None:
                    os.chdir(cwd)
                null_fd = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null_fd, 0)
                # What the imports print is kept and replayed into the rank's log at launch.
                output_fd = os.memfd_create("elastic-prewarm-output")
                os.dup2(output_fd, 1)
                os.dup2(output_fd, 2)
                os.set_inheritable(control_r, True)
                script_dir = key[2]
                os.execvpe(interpreter, [interpreter, _PREWARM_SCRIPT, str(control_r), script_dir, *modules], neutral)
            finally:
                os._exit(127)
        os.close(control_r)
        self._warm[pid] = (key, control_w, attempt)

    def _drop_warm(self, older_than: int | None) -> None:
        """Kill the warm interpreters started before attempt ``older_than`` (None: all of them)."""
        for pid, (_, control_fd, attempt) in list(self._warm.items()):
            if older_than is None or attempt < older_than:
                del self._warm[pid]
                os.close(control_fd)
                # An unreaped child of ours (its pid is pinned), leading its own group once it ran setsid.
                _killpg(pid, signal.SIGKILL)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self._dropped.add(pid)

    def _fork_exec(
        self, argv: list[str], env: dict[str, str], cwd: str | None, log_fd: int
    ) -> tuple[int, int | None]:
        """Start one rank in its own session; (pid, None), or (0, errno) if it could not run."""
        error_r, error_w = os.pipe()  # close-on-exec: EOF means the exec happened
        try:
            pid = os.fork()
        except OSError as error:
            os.close(error_r)
            os.close(error_w)
            return 0, error.errno or errno.EAGAIN
        if pid == 0:  # pragma: no cover - the child, until exec
            try:
                os.close(error_r)
                self._become_rank(argv, env, cwd, log_fd)
            except OSError as error:
                os.write(error_w, _EXEC_ERROR.pack(error.errno or errno.EIO))
            except BaseException:  # e.g. a NUL byte in argv: report it, never return
                os.write(error_w, _EXEC_ERROR.pack(errno.EINVAL))
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
        (failure,) = _EXEC_ERROR.unpack(data[: _EXEC_ERROR.size])
        return 0, failure

    def _become_rank(self, argv: list[str], env: dict[str, str], cwd: str | None, log_fd: int) -> None:
        os.setsid()
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != self._pid:
            os._exit(1)  # the spawner died before prctl took effect
        if self._cgroup is not None:
            self._cgroup.enter()
        signal.set_wakeup_fd(-1)
        # Python ignores these; a rank gets the defaults, as subprocess gives them.
        for signum in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(signum, signal.SIG_DFL)
        if cwd is not None:
            os.chdir(cwd)
        null_fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.execvpe(argv[0], argv, env)


def _is_python(path: str) -> bool:
    name = os.path.basename(path)
    return name.startswith("python") and all(c in "0123456789." for c in name[len("python") :])


def _warm_key(argv: list[str], env: dict[str, str], cwd: str | None, command: dict[str, Any]) -> tuple[Any, ...] | None:
    """What a warm interpreter must have been started with to run this command; None: start it cold.

    Only ``python SCRIPT.py ARGS`` is prewarmed: no option to the interpreter
    (``-m``, ``-c``, ``-u``, ``-X``...), no other program. The key holds the
    interpreter as named, the working directory, the script's real directory
    (``sys.path[0]``), the modules, and every variable of the environment but
    the ones each attempt sets (``launch_vars``): any other difference means
    the modules were imported in another environment, and a cold start.
    """
    if len(argv) < 2 or not _is_python(argv[0]) or argv[1].startswith("-") or not argv[1].endswith(".py"):
        return None
    script = os.path.join(cwd or os.getcwd(), argv[1])
    if not os.path.isfile(script):
        return None
    launch_vars = set(command["launch_vars"])
    neutral = tuple(sorted((name, value) for name, value in env.items() if name not in launch_vars))
    return (argv[0], cwd, os.path.dirname(os.path.realpath(script)), tuple(command["prewarm"]), neutral)


def main(argv: list[str] | None = None) -> int:
    """``python -m elastic.node.spawner PARENT_PID SIGNAL_FD [--no-cgroup]``: stdin commands, stdout reports.

    ``--no-cgroup`` keeps the ranks in our own cgroup even where a cgroup v2
    leaf could be made (process groups and the subreaper then do the sweeping).
    """
    args = sys.argv[1:] if argv is None else argv
    parent_pid, signal_fd = int(args[0]), int(args[1])
    want_cgroup = "--no-cgroup" not in args[2:]
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
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
    subreaper = _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    spawner = Spawner(parent_pid, sys.stdout.fileno(), Cgroup.create() if subreaper and want_cgroup else None)
    return spawner.run(sys.stdin.fileno(), signal_fd)


if __name__ == "__main__":
    sys.exit(main())
