"""The one owner of worker processes on a host: spawn, exit events, bounded stop.

The pipes to the spawner process are :mod:`elastic.node.spawner.link`'s.
"""

from __future__ import annotations

import errno
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from elastic.core.exit_codes import ExitCode
from elastic.core.failures import CheckpointWrite, Collateral, GraceKill, WorkerExit, decode_returncode
from elastic.core.labels import node_label
from elastic.core.launch.spec import RankStarted, Role, WorkerSpec
from elastic.core.training.startup import RankImports
from elastic.node.logs.tail import read_log_tail
from elastic.node.private_dirs import make_private_dirs
from elastic.node.probes.oom_kills import OomKills, OomWatch
from elastic.node.probes.signal_state import grace_kill
from elastic.node.spawner.kept import AdoptedKeeper, KeeperRecord, KeepTerms
from elastic.node.spawner.link import SpawnerLink, spawner_gone, start_spawner
from elastic.node.spawner.messages import OP_SIGNAL_ALL, OP_SIGNAL_RANK, read_message
from elastic.node.probes.stop_signs import account, said_done, stop_sign
from elastic.worker.bootstrap.rank_signals import SIGNALS_FILE_VAR
from elastic.worker.errorfile import read_error

__all__ = ["COLLATERAL_WINDOW_S", "LaunchError", "ProcessSupervisor", "RunningWorker", "WriteReader"]

# A spawn is a fork and an exec in the spawner; this bounds a spawner that stopped answering.
_SPAWN_TIMEOUT_S = 60.0
# After SIGKILL a process is gone as soon as the kernel reaps it; this bounds the
# wait for that (a process stuck in uninterruptible I/O can take a while).
_REAP_TIMEOUT_S = 10.0
# A failure's survivor still running this long after the stop signal is SIGKILLed then (unless
# a checkpoint write is under way, or a handler of its own caught the signal: that one may be
# running the rank's graceful exit, its finally blocks and atexit handlers, and gets the whole
# grace). A rank whose action is the default is gone well within it: the spawner relays the
# signal in well under a millisecond, and the kernel ends the process the next time it is
# scheduled (a few milliseconds on a busy node; CFS's latency target is 6-24 ms). A rank still
# alive after that with no handler of its own is in uninterruptible sleep, stopped by a
# debugger, or has the signal blocked: nothing a longer wait finishes. A kill that lands on a
# rank already exiting costs nothing (it goes anyway), and every tenth of a second here is a
# tenth of a second of every restart.
COLLATERAL_WINDOW_S = 0.05
# A write seen only by its time is looked at again this long after it would count as over: the
# wait's clock and the files' are not the same one.
_LOOK_AGAIN_MARGIN_S = 0.02
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


# What a node shows of a checkpoint write, given the ranks still running
# (elastic.node.probes.checkpoint_writes.checkpoint_writes, bound to the node's clock).
WriteReader = Callable[[Sequence[RunningWorker]], CheckpointWrite]


@dataclass
class _Child:
    spec: WorkerSpec
    pid: int  # leads its own session: its process group id too
    started_at: float
    exited: bool = False
    hung: str | None = None  # set by kill_hung just before its SIGKILL
    hung_at: float | None = None
    silent_s: float | None = None  # set by kill_hung: how long it had been silent
    killed_at_grace: GraceKill | None = None  # set by stop just before its SIGKILL
    in_handler: bool = False  # a failure's survivor left its grace: its own handler caught the signal
    oom: OomWatch | None = None  # its memory cgroup's OOM kill count as it started


class ProcessSupervisor:
    """Starts workers in their own sessions and reports each exit as it happens.

    The processes themselves are started, reaped and swept by a spawner
    process of our own (:mod:`elastic.node.spawner.process`): a child subreaper with its
    own signal state, which reads each exit status before it reaps (so no
    status is lost, whatever this process does with ``SIGCHLD``), never
    signals a process group whose leader it already reaped, and after every
    drain SIGKILLs whatever the workers left behind, ``setsid`` daemons
    included. A reader thread turns its reports into ``on_exit`` calls: no
    polling. The spawner is started from one long-lived thread because
    ``PR_SET_PDEATHSIG`` fires when the *spawning thread* exits; it also
    sweeps and exits when its pipe from this process closes (SIGKILL included).
    """

    def __init__(
        self,
        node_id: str,
        on_exit: Callable[[WorkerExit], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        cgroup: bool = True,
        keep: KeepTerms | None = None,
        on_helper_exit: Callable[[WorkerSpec, int, int], None] | None = None,
    ) -> None:
        """``cgroup=False`` never puts ranks in a cgroup of their own, even where
        cgroup v2 allows it (process groups and the subreaper sweep instead). ``keep``
        (``--orphan-lease``): the spawner keeps the ranks for the lease when this process dies
        without closing the supervisor, then drains them (SIGTERM, the lease's grace); the
        spawner and its ranks are recorded where the terms say. ``on_helper_exit`` hears the
        end of each process that serves the ranks (:meth:`start_helpers`): its spec, pid and
        return code; never of one this supervisor stopped."""
        self._node_id = node_id
        self._use_cgroup = cgroup
        self._keep = keep
        self._record = KeeperRecord(keep) if keep is not None else None
        self._adopted: AdoptedKeeper | None = None  # a dead driver's keeper this supervisor took over
        self._on_exit = on_exit
        self._clock = clock
        self._children: dict[int, _Child] = {}
        self._helpers: dict[int, _Child] = {}  # processes that serve the ranks (--spares), by pid
        self._on_helper_exit = on_helper_exit
        self._forgotten: dict[int, _Child] = {}  # stopped but not yet reported exited
        self._oom_kills = OomKills()
        # rank -> (attempt, wall time of its spawn request): the start of its start-up profile
        self._spawn_requested: dict[int, tuple[int, float]] = {}
        self._imports_sent: set[tuple[int, int]] = set()  # (attempt, rank) whose imports went to the spawner
        self._lock = threading.Condition()
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="elastic-spawner")
        self._closed = False
        self._link = self._thread.submit(self._start_spawner).result()

    @property
    def cgroup(self) -> str | None:
        """The cgroup v2 directory the ranks run in; None where process groups do the job."""
        self._link.ready.wait(_SPAWN_TIMEOUT_S)
        return self._link.cgroup

    # -- the spawner ---------------------------------------------------------------------

    def _start_spawner(self) -> SpawnerLink:
        keep = self._keep
        link = (start_spawner(self._use_cgroup) if keep is None
                else start_spawner(self._use_cgroup, keep.lease, run_id=keep.run_id, generation=keep.generation))
        if self._record is not None:
            self._record.keeper(link.process.pid)
        link.reader = threading.Thread(
            target=self._read_reports, args=(link,), name="elastic-spawner-reports", daemon=True
        )
        link.reader.start()
        return link

    def _current_link(self) -> SpawnerLink:
        if self._link.dead and not self._closed:
            self._link = self._thread.submit(self._start_spawner).result()
        return self._link

    def _read_reports(self, link: SpawnerLink) -> None:
        assert link.process.stdout is not None
        while (report := read_message(link.process.stdout)) is not None:
            try:
                self._on_report(link, report)
            except Exception:  # a failing on_exit must not silence every later exit
                traceback.print_exc()
        self._onspawner_gone(link)

    def _on_report(self, link: SpawnerLink, report: dict[str, Any]) -> None:
        kind = report["t"]
        if kind == "exit":
            self._report_exit(int(report["pid"]), int(report["returncode"]))
        elif kind in ("spawned", "failed"):
            spec, reply = link.pending.pop(int(report["id"]))
            if kind == "spawned" and spec.role is not Role.RANK:
                pid = int(report["pid"])
                with self._lock:
                    self._helpers[pid] = _Child(spec, pid, started_at=self._clock())
            elif kind == "spawned":
                pid = int(report["pid"])
                child = _Child(spec, pid, started_at=self._clock(), oom=self._oom_kills.watch(pid))
                with self._lock:
                    self._children[pid] = child
                if self._record is not None:  # before the spawn's answer: recorded before it runs on
                    self._record.rank(pid)
            reply.set_result(report)
        elif kind == "swept":
            with link.sweeps:
                link.sweeps_done += 1
                link.sweeps.notify_all()
        elif kind == "ready":
            link.cgroup = report["cgroup"]
            link.ready.set()

    def _onspawner_gone(self, link: SpawnerLink) -> None:
        # End of file: the spawner exited. Its ranks died with it (PR_SET_PDEATHSIG
        # SIGKILL), unless it reported them above while sweeping on its way out.
        link.dead = True
        link.ready.set()
        for _, reply in list(link.pending.values()):
            reply.set_exception(spawner_gone(link.process))
        link.pending.clear()
        with link.sweeps:
            link.sweeps_done += 1
            link.sweeps.notify_all()
        with self._lock:
            orphaned = [pid for pid, c in self._children.items() if not c.exited]
            orphaned += list(self._forgotten)
        for pid in orphaned:
            self._report_exit(pid, -signal.SIGKILL)

    def _report_exit(self, pid: int, returncode: int, ended_wall: float | None = None) -> None:
        """``ended_wall``: when it ended (wall clock), for an exit a keeper reaped while no driver
        was there; it is placed that long before now on this supervisor's clock."""
        with self._lock:
            helper = self._helpers.pop(pid, None)
        if helper is not None:
            if self._on_helper_exit is not None:
                self._on_helper_exit(helper.spec, pid, returncode)
            return
        observed_at, observed_wall = self._clock(), time.time()  # its catches are aged to its exit
        if ended_wall is not None:
            observed_at -= max(0.0, observed_wall - ended_wall)
            observed_wall = min(observed_wall, ended_wall)
        with self._lock:
            child = self._children.get(pid) or self._forgotten.pop(pid, None)
            if child is None or child.exited:
                return
            # Only our SIGKILL makes it hung: an exit that beat the kill stands.
            hung = child.hung if returncode == -signal.SIGKILL else None
            silent_s = child.silent_s if hung is not None else None
            if hung is not None and child.hung_at is not None:
                observed_at = child.hung_at  # the failure was seen when the hang was
            # Only our SIGKILL ended it at the grace's end: an exit that beat the kill stands.
            killed = decode_returncode(returncode)[1] == signal.SIGKILL
            killed_at_grace = child.killed_at_grace if killed else None
        # A SIGKILL nobody here sent: did the kernel's OOM killer send it?
        oom_killed = None
        if killed and hung is None and killed_at_grace is None and child.oom is not None:
            oom_killed = self._oom_kills.explain(child.oom)
        failed = returncode != 0
        # An exit 0: was it stopped by a signal from outside, or had it finished (elastic.core.rank_ends)?
        # A failure: had it said it finished first (a crash in teardown: elastic.core.diagnosis.teardown)?
        seen = account(child.spec, pid, now=observed_wall)
        stopped_by = None if failed else stop_sign(child.spec, seen)
        done = said_done(child.spec) if failed else stopped_by is not None and said_done(child.spec)
        error_file = child.spec.env.get("TORCHELASTIC_ERROR_FILE")
        error_message, error_traceback = read_error(error_file) if failed and error_file else (None, None)
        exit = WorkerExit(
            attempt=child.spec.attempt,
            rank=child.spec.rank,
            node=self._node_id,
            returncode=returncode,
            observed_at=observed_at,
            pid=pid,
            log_tail=read_log_tail(child.spec.log_path) if failed else (),
            error_message=error_message,
            error_traceback=error_traceback,
            hung=hung,
            silent_s=silent_s,
            killed_at_grace=killed_at_grace,
            oom_killed=oom_killed,
            stopped_by=stopped_by,
            declared_done=done,
            account=seen,
            gpus=child.spec.gpus,
        )
        self._on_exit(exit)
        with self._lock:
            child.exited = True
            self._lock.notify_all()

    # -- starting --------------------------------------------------------------------

    def start(self, specs: Sequence[WorkerSpec]) -> dict[int, RankStarted]:
        """Start every worker; raise :class:`LaunchError` at the first that cannot run.

        Workers started before the failing one stay supervised: the caller's
        stop takes them down like any other. A log file that cannot be opened
        raises ``OSError`` naming it. Returns each rank's process: its pid and, for one
        handed to a warm interpreter (``--prewarm``, ``--prewarm-memory``), the resident
        memory (KiB) that interpreter held at the hand-off.
        """
        return {spec.rank: self._spawn_with_retry(spec) for spec in specs}

    def start_helpers(self, specs: Sequence[WorkerSpec]) -> dict[int, WorkerSpec]:
        """Start the processes that serve the ranks (``--spares``: the in-place store's host, the
        warm spares; :mod:`elastic.core.launch.inplace_helpers`), each by its spec's role, as
        :meth:`start` starts ranks (and raising as it does); returns each one's spec by pid. They
        are no ranks: their ends go to ``on_helper_exit``, and a stop ends them with the ranks."""
        started = {}
        for spec in specs:
            if spec.role is Role.RANK:
                raise ValueError(f"rank {spec.rank} is a rank, not a process that serves the ranks")
            started[self._spawn_with_retry(spec).pid] = spec
        return started

    def helpers(self) -> dict[int, WorkerSpec]:
        """The processes that serve the ranks and have not ended, by pid."""
        with self._lock:
            return {pid: helper.spec for pid, helper in self._helpers.items()}

    def promote(self, pid: int, spec: WorkerSpec) -> None:
        """The warm spare ``pid`` takes a rank's place (``spec``, a rank's): from now on it is that
        rank, its exit a rank's. Raises ``KeyError`` for a pid that is no live spare here."""
        if spec.role is not Role.RANK:
            raise ValueError(f"a spare is promoted to a rank, not to a {spec.role.value}")
        with self._lock:
            helper = self._helpers.get(pid)
            if helper is None or helper.spec.role is not Role.SPARE:
                raise KeyError(f"no live spare with pid {pid} on this node")
            del self._helpers[pid]
            self._children[pid] = _Child(spec, pid, started_at=self._clock(), oom=self._oom_kills.watch(pid))

    def ended(self, rank: int) -> WorkerSpec | None:
        """The spec of the latest attempt's ``rank`` here that has exited (a lost rank whose place
        a spare takes), else None."""
        with self._lock:
            gone = [c.spec for c in self._children.values() if c.exited and c.spec.rank == rank]
        return max(gone, key=lambda spec: spec.attempt, default=None)

    def relabel(self, attempt: int, renumber: Mapping[int, int]) -> list[WorkerSpec]:
        """The ranks still running carry on as attempt ``attempt`` (a world re-formed in place),
        each renumbered by ``renumber`` (old rank -> new; one not named keeps its number): their
        specs from now on, in rank order. Their exits then count for that attempt."""
        with self._lock:
            for child in self._children.values():
                if not child.exited:
                    child.spec = replace(child.spec, attempt=attempt, rank=renumber.get(child.spec.rank, child.spec.rank))
            return sorted((c.spec for c in self._children.values() if not c.exited), key=lambda spec: spec.rank)

    def _spawn_with_retry(self, spec: WorkerSpec) -> RankStarted:
        # fork() can fail with EAGAIN when the host is briefly out of processes or
        # memory; that is worth a few retries, anything else is the command's fault.
        retrying = Retrying(
            retry=retry_if_exception_type(BlockingIOError),
            stop=stop_after_attempt(5),
            wait=wait_exponential(multiplier=0.05, max=1.0),
            reraise=True,
        )
        for attempt in retrying:
            with attempt:
                return self._spawn(spec)
        raise AssertionError("unreachable: the last try re-raises")  # pragma: no cover

    def _spawn(self, spec: WorkerSpec) -> RankStarted:
        """Start one worker: its pid, and the resident KiB of the warm interpreter that took it."""
        make_private_dirs(Path(spec.log_path).parent)  # the run directory too, on a new node
        for directory in spec.private_dirs:  # compile caches: kept private, as the run directory
            make_private_dirs(Path(directory))
        link = self._current_link()
        if spec.role is Role.RANK:
            with self._lock:
                self._spawn_requested[spec.rank] = (spec.attempt, time.time())  # the rank's wall clock too
        try:
            report = link.request_spawn(spec).result(_SPAWN_TIMEOUT_S)
        except FutureTimeout:
            raise OSError(
                errno.ETIMEDOUT,
                f"elastic's process spawner (pid {link.process.pid}) did not start rank "
                f"{spec.rank} within {_SPAWN_TIMEOUT_S:.0f} s",
            ) from None
        if report["t"] == "spawned":
            return RankStarted(int(report["pid"]), int(report.get("warm_kb", 0)) if report.get("warm") else None)
        code = int(report["errno"])
        if report["stage"] == "log":
            raise OSError(code, os.strerror(code), spec.log_path)
        if report["stage"] == "cwd":  # a home directory only on the head node, or one the job deleted
            raise LaunchError(
                spec.rank, str(spec.cwd), NOT_EXECUTABLE_STATUS,
                f"the working directory (where elastic was started) cannot be entered on node "
                f"{node_label(self._node_id)}: {os.strerror(code).lower()}",
            )
        if code in (errno.EAGAIN, errno.ENOMEM):
            raise BlockingIOError(code, os.strerror(code))
        if code == errno.ENOENT:
            raise LaunchError(spec.rank, spec.argv[0], NOT_FOUND_STATUS, "command not found")
        raise LaunchError(spec.rank, spec.argv[0], NOT_EXECUTABLE_STATUS, os.strerror(code).lower())

    def adopt(self, keeper: AdoptedKeeper, specs: Mapping[int, WorkerSpec]) -> None:
        """Take over a dead driver's kept ranks: ``keeper`` (resumed under this driver's generation:
        :func:`elastic.node.spawner.kept.resume_keeper`) becomes this supervisor's spawner in place
        of the one it started (released first, with no rank), and each of its ranks (``specs``, by
        pid) is supervised as if this supervisor had started it: its exit reported with what it
        left, its group signalled and stopped, its leftovers swept. The ranks that ended while no
        driver was there (``keeper.exits``) are reported first, earliest first, each dated to
        when it ended, with what it left, as if this supervisor had seen it end."""
        old = self._link
        old.close(_REAP_TIMEOUT_S)  # before the ranks are ours: its end reports none of them
        link = SpawnerLink(keeper, keeper.take_signal_fd())
        link.ready.set()
        with self._lock:
            for pid, spec in specs.items():
                self._children[pid] = _Child(spec, pid, started_at=self._clock(), oom=self._oom_kills.watch(pid))
        self._link, self._adopted = link, keeper
        for ended in sorted(keeper.exits, key=lambda e: e.at):  # before any exit the link reports
            self._report_exit(ended.pid, ended.returncode, ended_wall=ended.at)
        link.reader = threading.Thread(
            target=self._read_reports, args=(link,), name="elastic-spawner-reports", daemon=True
        )
        link.reader.start()
        if self._record is not None:  # the record now names this driver's generation
            self._record.keeper(keeper.pid)
            for pid in keeper.alive() & specs.keys():
                self._record.rank(pid)

    def spawn_requested_at(self, attempt: int, rank: int) -> float | None:
        """When (wall clock) the spawner was last asked to start this rank of this attempt; None if never."""
        with self._lock:
            requested = self._spawn_requested.get(rank)
        return requested[1] if requested is not None and requested[0] == attempt else None

    # -- stopping --------------------------------------------------------------------

    def running(self) -> list[RunningWorker]:
        """The workers not yet reported exited, in rank order."""
        with self._lock:
            live = [c for c in self._children.values() if not c.exited]
        return sorted(
            (RunningWorker(c.spec, c.pid, c.started_at) for c in live),
            key=lambda w: w.spec.rank,
        )

    def imported(self, spec: WorkerSpec, imports: RankImports) -> None:
        """What a rank had imported once past its start-up (its first step, its distributed
        initialisation, its sign of life: :mod:`elastic.core.launch.prewarm_due`) goes to the
        spawner, once a rank, which may start its warm successor with it (``--prewarm-memory``;
        ``--prewarm`` names its own modules)."""
        if spec.prewarm or spec.prewarm_memory_pct <= 0:
            return
        with self._lock:
            pid = next((p for p, c in self._children.items()
                        if c.spec.rank == spec.rank and c.spec.attempt == spec.attempt and not c.exited), None)
            if pid is None or (spec.attempt, spec.rank) in self._imports_sent:
                return
            self._imports_sent.add((spec.attempt, spec.rank))
        self._link.send_imports(pid, imports.modules, imports.resident_kb)

    def kill_hung(self, pid: int, reason: str, detected_at: float, silent_s: float | None = None) -> bool:
        """SIGKILL a hung worker's group; its exit then carries ``reason`` (kind hung) and
        ``silent_s``, how long it had shown no sign of progress (None: not measured).

        False when the worker is unknown or already reported its exit.
        """
        with self._lock:
            child = self._children.get(pid)
            if child is None or child.exited:
                return False
            child.hung, child.hung_at, child.silent_s = reason, detected_at, silent_s
        self._link.send_signal(OP_SIGNAL_RANK, pid, signal.SIGKILL)
        return True

    def signal_all(self, signum: int) -> None:
        """Signal every worker's process group whose leader the spawner has not reaped."""
        self._link.send_signal(OP_SIGNAL_ALL, 0, signum)

    def kill_all(self) -> None:
        """SIGKILL every worker group now; safe to call from a signal handler."""
        self.signal_all(signal.SIGKILL)

    def stop(self, signum: int, grace_s: float, *, writes: WriteReader | None = None) -> None:
        """Signal every group, wait up to ``grace_s``, SIGKILL what is left, reap, sweep.

        ``writes``: the ranks are a failure's survivors (collateral), and this reads what
        the node shows of a checkpoint write (given the ranks still running). Each rank
        that clearly will not exit on ``signum`` (it ignores it, or JAX's preemption service
        catches it) is SIGKILLed at once, and each still running
        :data:`COLLATERAL_WINDOW_S` after the signal then, unless its own handler caught
        the signal (:func:`elastic.core.failures.exits_in_handler`) or a checkpoint write is
        under way (or cannot be seen): those wait out ``grace_s`` as any drain's ranks.
        A write seen only by its time, a moment ago with no file open, is looked at again
        once it would be over (:attr:`elastic.core.failures.CheckpointWrite.quiet_in_s`).

        Idempotent and bounded. Ends with a sweep: every process the workers
        left behind (their children, daemons in sessions of their own) is
        SIGKILLed and reaped before this returns.
        """
        with self._lock:
            self._helpers.clear()  # stopped with the ranks (the sweep ends them): their ends are nobody's news
        self.signal_all(signum)
        signalled_at = self._clock()
        deadline_at = signalled_at + grace_s
        spared, collateral = None, False
        if writes is not None and grace_s > 0:
            collateral = True
            spared = self._stop_collateral(signum, grace_s, signalled_at, deadline_at, writes)
        if not self._wait_all_exited(deadline_at):
            if grace_s > 0:  # with no grace at all, nobody had a chance to exit
                self._note_grace_kills(signum, grace_s, spared, collateral=collateral)
            self.kill_all()
            self._wait_all_exited(self._clock() + _REAP_TIMEOUT_S)
        self._link.sweep(_REAP_TIMEOUT_S + 1.0)
        with self._lock:
            children, self._children = self._children, {}
            self._forgotten.update((pid, c) for pid, c in children.items() if not c.exited)
        if self._record is not None:
            self._record.ranks_gone()

    def _stop_collateral(
        self, signum: int, grace_s: float, signalled_at: float, deadline_at: float, writes: WriteReader
    ) -> CheckpointWrite | None:
        """SIGKILL each survivor as soon as it is clear it will not exit on ``signum``, unless
        ``writes`` shows a checkpoint write under way; what it showed when it spared them
        (None: none was spared for a write). Looked at again for those still running at the
        window's end, but for those whose own handler caught the signal, left their grace:
        a save a handler began on the signal counts too."""
        refusing = [(c, k) for c, k in self._still_alive(signum, grace_s) if k.never_exits]
        if refusing:
            seen, waited = self._look(writes, deadline_at)
            if seen.collateral is not Collateral.AT_ONCE:
                return seen
            # At once: no time to speak of since the signal, unless a recent write was looked at again.
            self._kill_collateral(refusing, seen, self._since(signalled_at) if waited else 0.0)
        if self._wait_all_exited(min(signalled_at + COLLATERAL_WINDOW_S, deadline_at)):
            return None
        late = []
        for child, kill in self._still_alive(signum, grace_s):
            if child.killed_at_grace is not None:
                continue
            if kill.in_handler:  # its graceful exit may be under way: finally blocks, atexit, a flush
                with self._lock:
                    child.in_handler = True
            else:
                late.append((child, kill))
        if not late:
            return None
        seen, _ = self._look(writes, deadline_at)
        if seen.collateral is not Collateral.AT_ONCE:
            return seen
        self._kill_collateral(late, seen, max(self._since(signalled_at), COLLATERAL_WINDOW_S))
        return None

    def _look(self, writes: WriteReader, deadline_at: float) -> tuple[CheckpointWrite, bool]:
        """What the node shows of a checkpoint write, and whether it waited to look again: a
        write seen only by its recent time (no file open: a save's end, or a pause between
        two of its files) is looked at again once it would count as over, which shows it
        was, or a new one."""
        seen = writes(self.running())
        wait_s = seen.quiet_in_s
        if wait_s is None or self._wait_all_exited(min(self._clock() + wait_s + _LOOK_AGAIN_MARGIN_S, deadline_at)):
            return seen, False
        return writes(self.running()), True

    def _since(self, signalled_at: float) -> float:
        return round(self._clock() - signalled_at, 2)

    def _still_alive(self, signum: int, grace_s: float) -> list[tuple[_Child, GraceKill]]:
        """Each rank not yet reported exited, and how it holds ``signum`` (``/proc``); zombies left out."""
        with self._lock:
            alive = [c for c in self._children.values() if not c.exited]
        return [(c, kill) for c in alive if (kill := self._grace_kill(c, signum, grace_s)) is not None]

    @staticmethod
    def _grace_kill(child: _Child, signum: int, grace_s: float) -> GraceKill | None:
        return grace_kill(child.pid, signum, grace_s, child.spec.env.get(SIGNALS_FILE_VAR))

    def _kill_collateral(
        self, ranks: Sequence[tuple[_Child, GraceKill]], seen: CheckpointWrite, waited_s: float
    ) -> None:
        for child, kill in ranks:
            with self._lock:  # noted before the kill: its exit report reads it
                child.killed_at_grace = replace(kill, collateral=Collateral.AT_ONCE, waited_s=waited_s, write=seen)
            self._link.send_signal(OP_SIGNAL_RANK, child.pid, signal.SIGKILL)

    def _note_grace_kills(
        self, signum: int, grace_s: float, spared: CheckpointWrite | None, *, collateral: bool = False
    ) -> None:
        """Read from ``/proc`` how each rank still alive holds ``signum``, before its SIGKILL;
        ``spared``: what spared a failure's survivors the kill at once, if a write did;
        ``collateral``: they are a failure's survivors, and one whose own handler caught the
        signal was left its grace for that."""
        with self._lock:
            alive = [c for c in self._children.values() if not c.exited and c.killed_at_grace is None]
        for child in alive:  # a few reads of /proc per rank: milliseconds, before the kill
            kill = self._grace_kill(child, signum, grace_s)
            if kill is not None and collateral and (child.in_handler or kill.in_handler):
                kill = replace(kill, collateral=Collateral.HANDLER, write=spared)
            elif kill is not None and spared is not None:
                kill = replace(kill, collateral=spared.collateral, write=spared)
            child.killed_at_grace = kill

    def _wait_all_exited(self, deadline_at: float) -> bool:
        with self._lock:
            while any(not c.exited for c in self._children.values()):
                remaining_s = deadline_at - self._clock()
                if remaining_s <= 0:
                    return False
                self._lock.wait(remaining_s)
            return True

    def close(self, grace_s: float = 0.0) -> None:
        """Stop whatever still runs; end the spawner and release its thread."""
        if self._closed:
            return
        self._closed = True
        self.stop(signal.SIGTERM, grace_s)
        self._link.close(_REAP_TIMEOUT_S)
        if self._adopted is not None:
            self._adopted.close()
        if self._record is not None:
            self._record.released()
        self._thread.shutdown(wait=True)
