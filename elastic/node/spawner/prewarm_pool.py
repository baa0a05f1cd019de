"""The spawner's warm interpreters (``--prewarm``, ``--prewarm-memory``): when each starts, which
spawn it serves, when it goes.

:mod:`elastic.node.spawner.process` keeps one :class:`PrewarmPool`. After it spawns a
rank of a ``python SCRIPT.py`` or ``python -m MODULE`` command with ``prewarm`` modules, the pool
schedules that rank's successor: ``prewarm_delay_s`` later it forks a warm
interpreter (:mod:`elastic.node.spawner.prewarm`, the waiting interpreter's own
program) with the rank's environment minus the attempt's variables, in a
session of its own, its output kept in a memfd. The next attempt's spawn with
the same key (:func:`warm_key`) is handed to it over its control pipe; if
there is none, if it died waiting, or if the launch message cannot be written
at once, the rank starts cold. Warm interpreters of an attempt that is over
unused are killed; the pool reaps them (and any that died waiting) without a
report: none of them ever ran a rank's code.

Without ``prewarm`` modules but with ``prewarm_memory_pct`` above 0, the rank's
successor waits for what the rank imported: once its node sees the rank past its
start-up (its first step, its distributed initialisation returned, its heartbeat:
:mod:`elastic.core.launch.prewarm_due`), it sends the installed packages the rank had
imported by then (with their modules one level down) and its resident memory then
(:meth:`PrewarmPool.learned`),
and the successor starts at once with those modules, if the warm interpreters started so, each counted at
the larger of that estimate and its own resident memory, stay within
``prewarm_memory_pct`` of the node's memory and the node has twice the estimate
available; the node's memory is the job's where its cgroup sets a limit (a Slurm
``--mem``, a pod's limit: :mod:`elastic.node.probes.memory_limit`), not the host's.

Standard library only, like the spawner.
"""

from __future__ import annotations

import os
import signal
import time

from elastic.core.launch.prewarm_fit import learned_prewarm, prewarm_unfit, runs_module
from elastic.node.probes.memory_limit import memory_kb
from elastic.node.spawner.cgroups import Cgroup
from elastic.node.spawner.calls import become_child, killpg
from elastic.node.spawner.messages import pack_message

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["PrewarmPool", "resident_kb", "warm_key"]

_PIPE_SIZE = 65536  # Linux's default pipe capacity
# The longest the spawner's poll() waits for a due warm start: poll takes at most 2**31-1 ms
# (~24 days), and --prewarm-delay may be longer; waking early only looks again.
_MAX_POLL_MS = 3_600_000
# Asks the rank bootstrap (its sitecustomize, which has the same name for it) to put a watching
# os.environ in place before any other sitecustomize runs: a learned warm interpreter's start-up
# must not have read an attempt's variable either. Never in a rank's own environment.
WATCH_VAR = "_ELASTIC_PREWARM_WATCH"
_PREWARM_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prewarm.py")


class PrewarmPool:
    """The warm interpreters of one spawner, children of its process: started, handed off, dropped, reaped."""

    def __init__(self, cgroup: Cgroup | None) -> None:
        self._pid = os.getpid()  # the spawner's: a warm child whose parent is not it exits at once
        self._cgroup = cgroup
        # Warm interpreters (elastic.node.spawner.prewarm) waiting for a launch, by pid: (key, control fd, attempt).
        self._warm: dict[int, tuple[tuple[Any, ...], int, int]] = {}
        self._dropped: set[int] = set()  # warm ones that died or were killed unused: reaped unreported
        self._attempt = -1  # the latest attempt a spawn named
        # Warm interpreters to start once their time comes: (due at, arguments of _start_warm).
        self._due: list[tuple[float, tuple[Any, ...]]] = []
        # Ranks whose successor waits for what they imported, by pid: (arguments of _start_warm
        # but the modules, argv, the percent of the node's memory such warm ones may hold).
        self._learning: dict[int, tuple[tuple[Any, ...], list[str], float]] = {}
        self._estimates: dict[int, int] = {}  # warm ones started from what a rank imported: pid -> KiB

    # -- a spawn ----------------------------------------------------------------------

    def note_spawn(
        self, argv: list[str], env: dict[str, str], cwd: str | None, command: dict[str, Any]
    ) -> tuple[Any, ...] | None:
        """Take note of the attempt a spawn names; the key of the warm interpreter it may use (None: cold)."""
        self._attempt = max(self._attempt, int(command.get("attempt", 0)))
        if command.get("prewarm") or float(command.get("prewarm_memory_pct", 0.0)) > 0:
            return warm_key(argv, env, cwd, command)
        return None

    def hand_off(
        self, key: tuple[Any, ...], argv: list[str], env: dict[str, str], cwd: str | None, log_path: str
    ) -> int | None:
        """Hand a waiting warm interpreter made for ``key`` its rank; its pid, or None if there is none."""
        for pid, (warm_key, control_fd, made_in) in list(self._warm.items()):
            if warm_key != key or made_in >= self._attempt:  # made for a later attempt than its own
                continue
            del self._warm[pid]
            self._estimates.pop(pid, None)
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
                killpg(pid, signal.SIGKILL)  # the pid is ours and unreaped: its group is its own
                self._dropped.add(pid)
                return None
            return pid
        return None

    def schedule(
        self, pid: int, key: tuple[Any, ...], argv: list[str], env: dict[str, str], cwd: str | None,
        command: dict[str, Any],
    ) -> None:
        """Plan the successor of rank ``pid``, just spawned with ``key``: ``prewarm_delay_s`` from
        now with the ``prewarm`` modules, else when its node says what it imported."""
        launch_vars = list(command["launch_vars"])
        if not command.get("prewarm"):
            budget = float(command.get("prewarm_memory_pct", 0.0))
            self._learning[pid] = ((key, argv[0], env, cwd, launch_vars, self._attempt), argv, budget)
            return
        due_at = time.monotonic() + float(command.get("prewarm_delay_s", 0.0))
        modules = list(command["prewarm"])
        self._due.append((due_at, (key, argv[0], env, cwd, modules, launch_vars, self._attempt)))

    def learned(self, pid: int, modules: list[str], estimate_kb: int) -> dict[str, Any] | None:
        """Rank ``pid`` is past its start-up having imported ``modules`` (its resident memory then, ``estimate_kb``):
        start its successor with them now, within the memory budget. What was done and why (None:
        nothing to do for this pid); the next attempt's ``ranks_started`` shows the outcome."""
        waiting = self._learning.pop(pid, None)
        if waiting is None:
            return None
        (key, interpreter, env, cwd, launch_vars, attempt), argv, percent = waiting
        chosen = list(learned_prewarm(argv, modules))
        report: dict[str, Any] = {"pid": pid, "modules": chosen, "estimate_kb": estimate_kb}
        if not chosen:
            return {**report, "started": False, "why": "no installed package imported before the first step"}
        total_kb, available_kb = memory_kb()  # the job's cgroup limit where it has one
        budget_kb = int(total_kb * percent / 100)
        held_kb = sum(max(estimate, resident_kb(warm)) for warm, estimate in self._estimates.items())
        report.update(budget_kb=budget_kb, held_kb=held_kb)
        if held_kb + estimate_kb > budget_kb:
            return {**report, "started": False, "why": "over --prewarm-memory"}
        if available_kb < 2 * estimate_kb:
            return {**report, "started": False, "why": "the node has less than twice the estimate available"}
        warm = self._start_warm(key, interpreter, env, cwd, chosen, launch_vars, attempt, watch=True)
        if warm is None:
            return {**report, "started": False, "why": "fork failed"}
        self._estimates[warm] = estimate_kb
        return {**report, "started": True, "warm_pid": warm}

    def rank_gone(self, pid: int) -> None:
        """Rank ``pid`` ended: what it imported is not waited for any more."""
        self._learning.pop(pid, None)

    # -- the spawner's loop -----------------------------------------------------------

    def poll_timeout_ms(self) -> int | None:
        """How long the spawner's poll may wait before a warm interpreter is due; None: no limit."""
        if not self._due:
            return None
        due_in_ms = int((min(due for due, _ in self._due) - time.monotonic()) * 1000) + 1
        return min(max(0, due_in_ms), _MAX_POLL_MS)

    def start_due(self) -> None:
        now = time.monotonic()
        for entry in [entry for entry in self._due if entry[0] <= now]:
            self._due.remove(entry)
            self._start_warm(*entry[1])

    def reap(self, pid: int) -> bool:
        """Reap ``pid`` unreported if it is a warm interpreter (it died before its launch: never a rank)."""
        if pid not in self._warm and pid not in self._dropped:
            return False
        os.waitpid(pid, 0)
        if pid in self._warm:
            os.close(self._warm.pop(pid)[1])
        self._estimates.pop(pid, None)
        self._dropped.discard(pid)
        return True

    def attempt_over(self) -> None:
        """A drain's sweep: the warm ones that had their attempt and were not used go."""
        self.drop(older_than=self._attempt)
        self._due.clear()  # the attempt they were to follow is over: its successor schedules its own
        self._learning.clear()

    def pids(self) -> set[int]:
        """The warm interpreters waiting: children of the spawner that a drain's sweep spares."""
        return set(self._warm)

    def drop(self, older_than: int | None) -> None:
        """Kill the warm interpreters started before attempt ``older_than`` (None: all of them)."""
        for pid, (_, control_fd, attempt) in list(self._warm.items()):
            if older_than is None or attempt < older_than:
                del self._warm[pid]
                self._estimates.pop(pid, None)
                os.close(control_fd)
                # An unreaped child of ours (its pid is pinned), leading its own group once it ran setsid.
                killpg(pid, signal.SIGKILL)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self._dropped.add(pid)

    # -- a warm interpreter -----------------------------------------------------------

    def _start_warm(
        self,
        key: tuple[Any, ...],
        interpreter: str,
        env: dict[str, str],
        cwd: str | None,
        modules: list[str],
        launch_vars: list[str],
        attempt: int,
        *,
        watch: bool = False,
    ) -> int | None:
        """Start a warm interpreter for the next spawn with this key: imports done, attempt variables
        absent. ``watch``: modules elastic chose itself (learned from the rank), so the warm one
        starts the rank cold if its start-up or an import read an attempt's variable. Its pid, or None when it
        could not be forked."""
        neutral = {name: value for name, value in env.items() if name not in launch_vars}
        if watch:
            neutral[WATCH_VAR] = "1"  # the rank bootstrap watches os.environ from start-up on
        control_r, control_w = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(control_r)
            os.close(control_w)
            return None  # no warm one: the next spawn starts cold
        if pid == 0:  # pragma: no cover - the child, until exec
            try:
                os.close(control_w)
                # What the imports print is kept and replayed into the rank's log at launch.
                become_child(self._pid, cwd, os.memfd_create("elastic-prewarm-output"))
                os.set_inheritable(control_r, True)
                path0 = key[2]  # what python puts first on sys.path for this command
                watched = ",".join(sorted(launch_vars)) if watch else "-"
                os.execvpe(interpreter, [interpreter, _PREWARM_SCRIPT, str(control_r), path0, watched, *modules],
                           neutral)
            finally:
                os._exit(127)
        os.close(control_r)
        self._warm[pid] = (key, control_w, attempt)
        return pid


def resident_kb(pid: int) -> int:
    """A process's resident memory, KiB (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except (OSError, ValueError, IndexError):
        return 0


def warm_key(argv: list[str], env: dict[str, str], cwd: str | None, command: dict[str, Any]) -> tuple[Any, ...] | None:
    """What a warm interpreter must have been started with to run this command; None: start it cold.

    Only ``python SCRIPT.py ARGS`` and ``python -m MODULE ARGS`` are prewarmed:
    no other option to the interpreter (``-c``, ``-u``, ``-X``...), no other
    program. The key holds the interpreter as named, the working directory,
    what ``python`` puts first on ``sys.path`` (the script's real directory, or
    for ``-m`` the working directory as ``os.getcwd()`` gives it), and every
    variable of the environment but the ones each attempt sets (``launch_vars``):
    any other difference means the modules were imported in another
    environment, and a cold start. Which modules a warm one imported is no part
    of it: a script imports what it still lacks.
    """
    if prewarm_unfit(argv, command["prewarm"]) is not None:
        return None
    here = cwd or os.getcwd()
    if runs_module(argv):
        path0 = os.path.realpath(here)  # found at launch, as python -m finds it: nothing to check here
    else:
        script = os.path.join(here, argv[1])
        if not os.path.isfile(script):
            return None
        path0 = os.path.dirname(os.path.realpath(script))
    launch_vars = set(command["launch_vars"])
    neutral = tuple(sorted((name, value) for name, value in env.items() if name not in launch_vars))
    return (argv[0], cwd, path0, neutral)
