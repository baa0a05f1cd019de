"""The per-node launcher: owns one supervisor and the echo of its ranks' logs.

A plain class: the local backend calls it in-process, the Ray backend wraps it
in a node-pinned actor. What it takes and gives are frozen, picklable values.
"""

from __future__ import annotations

import os
import socket
import traceback
from dataclasses import replace
from collections.abc import Callable, Collection, Mapping, Sequence

from elastic.node.clock import Clock, SystemClock
from elastic.core.diagnosis.preflight import NodeCommand, NodeCommandResult
from elastic.core.failures import CheckpointWrite, WorkerExit
from elastic.core.labels import rank_list
from elastic.core.messages import HelperEnded, RankSilence, SignOfLife, SparesStarted, StepsSeen
from elastic.core.inplace.reform import Reforming
from elastic.core.rank_ends import HungRank
from elastic.node.watchers.end_evidence import hung_rank, with_frame
from elastic.worker.inplace.notice import NOTICE_VAR, ready_path, write_notice
from elastic.worker.preemption import PREEMPTION_FILE_VAR
from elastic.node.logs.follower import LogFollower
from elastic.node.preflight import run_node_command
from elastic.core.launch.spec import RankStarted, Role, WorkerSpec
from elastic.core.launch.inplace_helpers import rank_identity
from elastic.node.probes.stacks import StackTarget, dump_and_explain, dump_ranks
from elastic.node.probes.checkpoint_writes import checkpoint_writes
from elastic.node.spawner.kept import AdoptedKeeper, KeepTerms
from elastic.node.supervisor import LaunchError, ProcessSupervisor, RunningWorker
from elastic.node.watchers.hangs import HangWatcher, sign_of_life_age_s
from elastic.node.watchers.init_hangs import InitHistory, InitWatch
from elastic.node.watchers.life import LifeWatch
from elastic.node.watchers.silence import rank_silences
from elastic.node.watchers.watcher import NodeWatch, WatchJob
from elastic.node.watchers.steps import StepWatch
from elastic.node.watchers.spares import SpareStart
from elastic.node.watchers.successors import SuccessorWatch

__all__ = ["NodeAgent", "free_port"]


def free_port(host: str) -> int:
    """A TCP port that is free on ``host`` right now (the kernel picks it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _spare_order(spec: WorkerSpec) -> tuple[bool, int]:
    """Spares that say they wait for a place (warm, model built) first, then the oldest."""
    return (not os.path.exists(ready_path(spec.env.get(NOTICE_VAR, ""))), spec.spare_index or 0)


def _write_whole(path: str, text: str) -> bool:
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError:
        return False
    return True


class NodeAgent:
    """Runs this node's ranks of each attempt and reports their exits.

    ``clock`` is this node's: hang deadlines, stack-dump bounds and heartbeat ages
    are read on it (the real clocks unless a test injects a fake).
    """

    def __init__(
        self,
        node_id: str,
        on_exit: Callable[[WorkerExit], None],
        on_output: Callable[[int, str], None] | None = None,
        *,
        clock: Clock | None = None,
        on_alive: Callable[[SignOfLife | StepsSeen | SparesStarted | HelperEnded], None] | None = None,
        keep: KeepTerms | None = None,
    ) -> None:
        """``on_alive`` hears each attempt's first sign of life on this node (output or heartbeat),
        and its ranks' training steps (rate-limited, see :mod:`elastic.node.watchers.steps`).
        ``keep`` (``--orphan-lease``): how long the ranks outlive this process when it dies
        without closing the agent, before they are drained, and where they are recorded.
        ``on_alive`` also hears of the processes that serve the ranks (``--spares``): the spares
        started, and one that ended while its attempt ran."""
        self.node_id = node_id
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._on_exit = on_exit
        self._supervisor = ProcessSupervisor(node_id, self._exited, keep=keep, on_helper_exit=self._helper_ended)
        self._follower = LogFollower(on_output) if on_output is not None else None
        self._on_alive = on_alive
        self._watch: NodeWatch | None = None  # the attempt's one watcher thread: hangs, life, steps
        self._life: LifeWatch | None = None
        self._steps: StepWatch | None = None
        self._inits = InitHistory()  # the distributed initialisations completed here, over the attempts
        self._next_spare = 0  # the number of this node's next warm spare (--spares)

    def free_ports(self, host: str, count: int) -> list[int]:
        """``count`` distinct free ports on ``host`` (for master and coordinator)."""
        ports: list[int] = []
        while len(ports) < count:
            port = free_port(host)
            if port not in ports:
                ports.append(port)
        return ports

    def run_command(self, command: NodeCommand, timeout_s: float) -> NodeCommandResult:
        """Run a command on this node (``--preflight``), bounded by ``timeout_s``: how it ended."""
        return run_node_command(command, timeout_s)

    def launch(
        self, specs: Sequence[WorkerSpec], echo_ranks: Collection[int] | None, helpers: Sequence[WorkerSpec] = (),
    ) -> dict[int, RankStarted]:
        """Start the ranks; ``echo_ranks`` (None: all) are shown on the console. Returns each
        rank's process: its pid and, for one that started in a warm interpreter (``--prewarm``,
        ``--prewarm-memory``), the resident memory (KiB) that interpreter held when handed the rank.
        ``helpers`` (``--spares``): the in-place store's host starts before the ranks, so their
        store is there when they join; the warm spares once every rank here runs in place
        (:class:`elastic.node.watchers.spares.SpareStart`)."""
        stores = [spec for spec in helpers if spec.role is Role.STORE]
        spares = [spec for spec in helpers if spec.role is Role.SPARE]
        if stores:
            self._supervisor.start_helpers(stores)
        watch = self._watch_attempt(specs, echo_ranks, adopted=False, spares=spares)
        started = self._supervisor.start(specs)
        watch.start()
        return started

    def reform(self, order: Reforming, echo_ranks: Collection[int] | None = None) -> dict[int, int]:
        """Re-form this node's part of the world in place as attempt ``order.attempt``
        (:mod:`elastic.core.inplace.reform`): the ranks still running carry on as that attempt,
        renumbered as their notices say, and each is told its place (its notice file, written
        whole); each lost place goes to a warm spare (one that says it waits first), told its
        place the same way, with the lost rank's variables (its heartbeat, error and start-up
        files), and supervised as that rank from then on; a new spare starts for each
        one used. Returns the pid of each rank of the new attempt here (a survivor's unchanged, a
        spare's in a lost place), by rank. Raises ``LookupError`` when
        fewer spares are here than places to hand (nothing is written then)."""
        spares = sorted(self._supervisor.helpers().items(), key=lambda item: _spare_order(item[1]))
        spares = [(pid, spec) for pid, spec in spares if spec.role is Role.SPARE]
        if len(spares) < len(order.handed):
            raise LookupError(f"{len(order.handed)} places to hand and {len(spares)} spares on node {self.node_id}")
        running = {spec.rank: spec for spec in self._supervisor.relabel(order.attempt, {})}
        renumber = {old: notice.rank for old, notice in order.told}
        for old, notice in order.told:
            spec = running.get(old)
            if spec is not None and (path := spec.env.get(NOTICE_VAR)):
                write_notice(path, notice)
        ranks = self._supervisor.relabel(order.attempt, renumber)
        policies = ranks[0] if ranks else None
        used: list[WorkerSpec] = []
        promoted: list[WorkerSpec] = []
        for place, (pid, spare) in zip(order.handed, spares):
            lost = self._supervisor.ended(place.rank)  # its files and numbers go to the spare
            notice = place if lost is None else replace(place, identity=rank_identity(lost, place.generation))
            write_notice(spare.env[NOTICE_VAR], notice)
            rank = replace(
                spare, role=Role.RANK, rank=notice.rank, attempt=order.attempt, spare_index=None,
                env={**spare.env, **dict(notice.identity)},
                hang=policies.hang if policies is not None else None,
                progress=policies.progress if policies is not None else None,
            )
            self._supervisor.promote(pid, rank)
            used.append(spare)
            promoted.append(rank)
        watch = self._watch_attempt(self._supervisor.relabel(order.attempt, {}), echo_ranks, adopted=True, echoed=promoted)
        watch.start()
        if used:
            self._start_spares(self._fresh_spares(used, order.attempt))
        return {w.spec.rank: w.pid for w in self._supervisor.running() if w.spec.attempt == order.attempt}

    def _fresh_spares(self, used: Sequence[WorkerSpec], attempt: int) -> list[WorkerSpec]:
        """A new spare in the stead of each one handed a place: its own notice file and log (the
        used spare's notice now holds a place), numbered after the spares this node has had."""
        fresh = []
        for spare in used:
            index = self._next_spare
            self._next_spare += 1
            notice = spare.env[NOTICE_VAR].rsplit("-", 1)[0] + f"-{index}.inplace"
            log = spare.log_path.rsplit("-", 1)[0] + f"-{index}.log"
            fresh.append(replace(spare, attempt=attempt, spare_index=index, log_path=log,
                                 env={**spare.env, NOTICE_VAR: notice}))
        return fresh

    def _start_spares(self, spares: Sequence[WorkerSpec]) -> None:
        """Start the attempt's warm spares on this node (the watcher's thread), and say so."""
        attempt = spares[0].attempt
        self._next_spare = max(self._next_spare, *(1 + (spec.spare_index or 0) for spec in spares))
        try:
            pids = tuple(self._supervisor.start_helpers(spares))
        except (OSError, LaunchError) as error:
            self._alive(SparesStarted(attempt, self.node_id, (), self._clock.monotonic(), error=str(error)))
            return
        self._alive(SparesStarted(attempt, self.node_id, pids, self._clock.monotonic()))

    def _helper_ended(self, spec: WorkerSpec, pid: int, returncode: int) -> None:
        self._alive(HelperEnded(spec.attempt, self.node_id, spec.role.value, pid, returncode, self._clock.monotonic()))

    def _alive(self, report: SparesStarted | HelperEnded) -> None:
        if self._on_alive is not None:
            self._on_alive(report)

    def adopt(
        self, keeper: AdoptedKeeper, specs: Mapping[int, WorkerSpec], echo_ranks: Collection[int] | None,
    ) -> dict[int, RankStarted]:
        """Take over a dead driver's kept ranks: ``keeper``, resumed under this driver's
        generation (:func:`elastic.node.spawner.kept.resume_keeper`), and each rank's spec by pid
        (as the keeper started it, with this driver's policies). They are watched as a launch's
        are from now on (what their files hold already is no beat, sign of life or step, and is
        not echoed again), their exits reported, stopped and swept as this node's. Returns each
        rank's process."""
        ordered = sorted(specs.values(), key=lambda spec: spec.rank)
        watch = self._watch_attempt(ordered, echo_ranks, adopted=True)
        self._supervisor.adopt(keeper, specs)
        watch.start()
        return {spec.rank: RankStarted(pid) for pid, spec in specs.items()}

    def _watch_attempt(
        self, specs: Sequence[WorkerSpec], echo_ranks: Collection[int] | None, *, adopted: bool,
        spares: Sequence[WorkerSpec] = (), echoed: Sequence[WorkerSpec] | None = None,
    ) -> NodeWatch:
        """The console's echo of ``echo_ranks`` (None: all) among ``echoed`` (None: all of
        ``specs``; the ones not echoed yet), and the attempt's watcher thread, not started yet;
        it starts ``spares`` once every rank runs in place."""
        if self._follower is not None:
            for spec in specs if echoed is None else echoed:
                if echo_ranks is None or spec.rank in echo_ranks:
                    self._follower.follow(spec.rank, spec.log_path, from_end=adopted)
        self._stop_watching()
        # The jobs are made before the ranks start, so what their files hold now is no beat,
        # sign of life or step.
        jobs: list[WatchJob] = []
        policy = specs[0].hang if specs else None
        if policy is not None:
            jobs.append(HangWatcher(
                specs, policy, kill_hung=self._supervisor.kill_hung,
                clock=self._clock.monotonic, wall=self._clock.time,
            ))
        init_timeout = specs[0].init_timeout if specs else None
        if init_timeout is not None and init_timeout.active:
            jobs.append(InitWatch(
                specs, init_timeout, self._inits, kill_hung=self._supervisor.kill_hung,
                clock=self._clock.monotonic, wall=self._clock.time,
            ))
        self._life = None
        if self._on_alive is not None:
            self._life = LifeWatch(self.node_id, specs, self._on_alive, self._clock)
            jobs.append(self._life)
        progress = specs[0].progress if specs else None
        if progress is not None and self._on_alive is not None:
            self._steps = StepWatch(
                self.node_id, specs, progress, report=self._on_alive,
                kill_hung=self._supervisor.kill_hung, clock=self._clock,
                spawned_at=self._supervisor.spawn_requested_at, imported=self._supervisor.imported,
            )
            jobs.append(self._steps)
        if specs and not specs[0].prewarm and specs[0].prewarm_memory_pct > 0:
            # Every rank's warm successor once it is past its start-up, whether it prints steps or not.
            jobs.append(SuccessorWatch(specs, self._supervisor.imported, self._clock.monotonic))
        if specs and spares:
            jobs.append(SpareStart(specs, lambda: self._start_spares(spares)))
        attempt = specs[0].attempt if specs else -1
        self._watch = NodeWatch(attempt, jobs, running=self._supervisor.running, clock=self._clock.monotonic)
        return self._watch

    def stop(self, signum: int, grace_s: float, *, collateral: bool = False) -> None:
        """Stop the ranks: ``signum``, up to ``grace_s``, SIGKILL. ``collateral``: they survive a
        failure, and each that will not exit on the signal is killed as soon as that is clear,
        unless a checkpoint write is under way on this node (:mod:`elastic.node.probes.checkpoint_writes`)."""
        if self._watch is not None:
            self._watch.stop()  # a drain: nothing is called hung or stalled, nor a sign of the start

        def writes(workers: Sequence[RunningWorker]) -> CheckpointWrite:
            return checkpoint_writes(workers, wall=self._clock.time())

        self._supervisor.stop(signum, grace_s, writes=writes if collateral else None)
        if self._steps is not None:
            try:
                self._steps.flush()  # the last steps the ranks printed, before their end is reported
            except Exception:  # their steps, not the stop: the ranks' ends must still be reported
                traceback.print_exc()
        if self._follower is not None:
            self._follower.finish()

    def kill(self) -> None:
        self._supervisor.kill_all()

    def _exited(self, exit: WorkerExit) -> None:
        """A rank's exit, reported after its attempt's sign of life if it showed one: a rank
        that printed and exited between two looks of the watcher is no attempt without life."""
        life = self._life
        if life is not None and exit.attempt == life.attempt:
            try:
                life.flush()
            except Exception:  # a sign of life, not the exit: the exit must still be reported
                traceback.print_exc()
        self._on_exit(exit)

    def announce_preemption(self, attempt: int, notice: str) -> list[int]:
        """Write ``notice`` (a JSON line) to the preemption file of each running rank of
        ``attempt``, whole or not at all (a temporary file renamed), before any signal is
        sent: ``elastic.worker.preemption_requested()`` is true from then on. Returns the
        ranks told; a file that cannot be written leaves that rank to the signal alone."""
        told = []
        for worker in self._supervisor.running():
            path = worker.spec.env.get(PREEMPTION_FILE_VAR)
            if worker.spec.attempt != attempt or not path:
                continue
            if _write_whole(path, notice):
                told.append(worker.spec.rank)
        return told

    def silences(self, attempt: int) -> list[RankSilence]:
        """How long each rank of ``attempt`` still running here has shown no sign of life
        (output, heartbeat, checkpoint write), on this node's clocks (``--exit-timeout``)."""
        workers = [w for w in self._supervisor.running() if w.spec.attempt == attempt]
        return rank_silences(workers, now=self._clock.monotonic(), wall=self._clock.time())

    def kill_exit_hung(
        self, attempt: int, ranks: Collection[int], reason: str, detected_at: float
    ) -> list[HungRank]:
        """Dump the stacks of these ranks (those of ``attempt`` still running here), then
        SIGKILL them as hung at exit; returns what was seen of each just before: whether it
        had said it was done, its silence, the last checkpoint write, its uncaught error,
        and where its stack was (:mod:`elastic.node.watchers.end_evidence`)."""
        wanted = set(ranks)
        workers = [
            w for w in self._supervisor.running()
            if w.spec.attempt == attempt and w.spec.rank in wanted
        ]
        now, wall = self._clock.monotonic(), self._clock.time()
        written: dict[str, float | None] = {}
        seen = {
            w.spec.rank: hung_rank(w.spec, running_s=now - w.started_at, wall=wall, written=written, pid=w.pid)
            for w in workers
        }
        targets = [
            StackTarget(w.spec.rank, w.pid, w.spec.stack_path)
            for w in workers
            if w.spec.stack_path is not None
        ]
        note, frames = dump_and_explain(
            targets, header=f"taken because {rank_list(w.spec.rank for w in workers)} {reason}",
            clock=self._clock.monotonic
        )
        for worker in workers:
            self._supervisor.kill_hung(worker.pid, f"{reason}; {note}", detected_at)
        return [with_frame(hung, frames.get(rank)) for rank, hung in seen.items()]

    def dump_stacks(self) -> dict[int, str]:
        """Each running rank's stacks now, by rank (``elastic stack``)."""
        pids = {w.spec.rank: w.pid for w in self._supervisor.running()}
        return dump_ranks(pids, clock=self._clock.monotonic)

    def heartbeat_ages(self) -> dict[int, float]:
        """Seconds since each running rank's last sign of life, by rank; a rank
        with none yet is left out. Read from this node's files, on its clock."""
        now = self._clock.time()
        ages = {}
        for worker in self._supervisor.running():
            age = sign_of_life_age_s(worker.spec, now)
            if age is not None:
                ages[worker.spec.rank] = age
        return ages

    def _stop_watching(self) -> None:
        watch, self._watch, self._steps = self._watch, None, None
        if watch is not None:
            watch.stop()
            watch.join()

    def close(self) -> None:
        self._stop_watching()
        self._supervisor.close()
        if self._follower is not None:
            self._follower.close()
