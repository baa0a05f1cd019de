"""The shell around the controller: observations in, commands carried out via a Backend.

The driver is the loop; its parts each do one job: :mod:`elastic.run.signals`
(the stop-signal relay), :mod:`elastic.run.watches.scale` (the look for joined
nodes), :mod:`elastic.run.records.recorder` (journal, state.json, report.json),
:mod:`elastic.run.planning` (an attempt's world),
:mod:`elastic.run.watches.checkpoints` (the latest checkpoint),
:mod:`elastic.run.watches.caches` (a compilation cache the program replaced),
:mod:`elastic.run.observations` (backend reports as observations) and
:mod:`elastic.run.records.metrics` (the live snapshot).
"""

from __future__ import annotations

import json
import queue
import random
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from elastic.backends.protocol import Adopting, Backend, BackendFault, NodeReport, ReformsInPlace
from elastic.core.checkpoints.selection import Checkpoint
from elastic.core.controller.controller import Controller
from elastic.core.controller.settings import controller_settings
from elastic.core.events import EventName, LogEvent, Record
from elastic.core.failures import Failure, WorkerExit
from elastic.core.journal.fold import FoldedAttempt, RunFold
from elastic.core.inplace.reform import Reforming, notices
from elastic.core.journal.recovery import PriorRun
from elastic.core.labels import signal_name
from elastic.core.launch.compile_caches import cache_dirs, handed_jax_cache
from elastic.core.launch.prewarm_fit import prewarm_unfit
from elastic.core.messages import (
    Adopted, AnnouncePreemption, AttemptLaunched, Command, Decision, ExitHungKilled, ExitTimeoutPassed, FinishRun,
    KillExitHung, LaunchAttempt, Observation, Outcome, PlanAttempt, ReformDeadlinePassed, ReformFailed, ReformWorld,
    Resumed, RunStarted, StartExitTimer, StopWorkers, WatchReform, WorkerExited, WorkersStopped, WorldReformed,
)
from elastic.core.options.config import RunConfig
from elastic.core.takeover.running import not_the_same_job
from elastic.core.policy.restarts import Backoff, RestartPolicy
from elastic.core.training.stragglers import OnStraggler
from elastic.node.clock import Clock, SystemClock
from elastic.node.supervisor import LaunchError
from elastic.run.watches.caches import CacheWatch
from elastic.run.watches.checkpoints import CheckpointWatch
from elastic.run.records.journal import RunDirectory, RunWriteError
from elastic.run.records.metrics import MetricsServer, RunMetrics, bind_metrics, run_snapshot
from elastic.run.observations import observation_of
from elastic.run.planning import Planner
from elastic.run.records.recorder import Recorder, job_asked
from elastic.run.watches.scale import ScaleWatch
from elastic.run.signals import STOP_SIGNALS, SignalRelay
from elastic.run.takeover import Leftovers, reach_leftovers
from elastic.views.status import status_line

__all__ = ["Driver", "RANKS_AWAITED_AFTER_S", "RunResult", "STATE_STEP_EVERY_S", "STOP_SIGNALS"]

# state.json is written at each journaled step; between them, for a new training step, at most this
# often, and a step held back is written when this is up, whether or not anything else comes: what
# `elastic status` shows of a live run is at most this behind what the driver heard.
STATE_STEP_EVERY_S = 1.0
# Ranks still running this long after a peer's exit 0 are said to be waited for, once (ranks that
# end together, as most do, are not worth a line).
RANKS_AWAITED_AFTER_S = 2.0


@dataclass(frozen=True)
class RunResult:
    outcome: Outcome
    exit_status: int
    root_cause: Failure | None
    attempts: tuple[FoldedAttempt, ...]  # as the journal tells them, the report's reading
    report: Mapping[str, Any]


class Driver:
    """Runs one job to completion: the only place decisions turn into actions."""

    def __init__(
        self,
        config: RunConfig,
        backend: Backend,
        run_dir: RunDirectory,
        *,
        base_env: Mapping[str, str],
        clock: Clock | None = None,
        prior: PriorRun | None = None,
        metrics: MetricsServer | None = None,
    ) -> None:
        self._config = config
        self._backend = backend
        self._base_env = dict(base_env)
        self._clock = clock or SystemClock()
        self._prior = prior
        policy = RestartPolicy.create(
            max_restarts=config.max_restarts,
            restart_window_s=config.restart_window_s,
            max_preemptions=config.max_preemptions,
            preemption_window_s=config.preemption_window_s,
            rules=config.on_exit,
            backoff=Backoff(*config.backoff_s, rng=random.random),
            signatures=config.signatures,
        )
        if prior is not None:
            # Restarts the earlier driver charged still count, at their wall-clock age.
            to_now = self._clock.monotonic() - self._clock.time()
            policy = policy.with_charges(
                [at + to_now for at in prior.failure_charges],
                [at + to_now for at in prior.preemption_charges],
            )
        self._controller = Controller(policy, controller_settings(config, prior))
        self._exit_deadline: tuple[int, float] | None = None  # (attempt, deadline_at)
        self._ranks_awaited_at: tuple[int, float] | None = None  # (attempt, when to say the wait)
        self._exit_wait_for: int | None = None  # the last attempt whose wait was timed
        self._reform_watch: threading.Timer | None = None  # a re-formed world's deadline (--reform-timeout)
        self._state_step: int | None = None  # the training step state.json has, and when written
        self._state_step_at = float("-inf")
        # Bound by the caller before the run directory was made (bind_metrics), else at run();
        # the driver serves it once the run has started and closes it at the end.
        self._metrics: MetricsServer | None = metrics
        self._started_at: float | None = None
        self._cluster_address: str | None = None
        self._observations: queue.SimpleQueue[Observation] = queue.SimpleQueue()
        self._stop_requested = threading.Event()
        self._finish: FinishRun | None = None
        self._backend_fault: BackendFault | None = None
        self._log = structlog.get_logger("elastic").bind(run_id=config.run_id)
        self._layout = run_dir.layout
        self._recorder = Recorder(
            config, run_dir, self._controller, clock=self._clock,
            fold=prior.fold if prior is not None else RunFold(),
        )
        self._saves_since = 0.0  # the saves a drain's record has not carried yet: committed since then (wall clock)
        self._checkpoints = CheckpointWatch(
            config.checkpoint_dir, config.checkpoint_pattern,
            write=self._recorder.write, clock=self._clock, run_id=config.run_id,
        )
        self._caches = CacheWatch(
            run_dir.layout,
            handed_jax_cache(self._base_env, cache_dirs(str(config.cache_dir) if config.cache_dir else None)),
            write=self._recorder.write, clock=self._clock,
            journaled=prior is not None and prior.fold.cache_replaced is not None,
        )
        self._planner = Planner(
            config, backend, self._checkpoints,
            base_env=self._base_env, layout=run_dir.layout, stop_requested=self._stop_requested,
            backend_failed=lambda: self._backend_fault is not None,
            previous_world=prior.last_world if prior else None, clock=self._clock,
        )
        self._signals = SignalRelay(
            self._observations, self._stop_requested, backend.kill_workers, self._clock,
            notice_signal=config.notice_signal,
        )
        self._scale_watch = ScaleWatch(
            self._observations, self._stop_requested,
            available_nodes=backend.available_nodes,
            current_plan=lambda: self._planner.plan,
            latest_checkpoint=self._checkpoints.latest,
            clock=self._clock, run_id=config.run_id,
        )

    # -- the run ---------------------------------------------------------------------

    def run(self) -> RunResult:
        self._bind_metrics()
        restore = self._signals.install()
        # Every event logged during the run carries run_id, the backend's own too.
        bound = structlog.contextvars.bind_contextvars(run_id=self._config.run_id)
        started_at = self._started_at = self._clock.monotonic()
        leftovers = None
        try:
            leftovers = self._reach_leftovers()  # before the backend starts: it rewrites the keeper's record
            self._backend.start(self._on_worker_exit)
            self._cluster_address = self._backend.cluster_address()
            self._signals.claim()  # again: starting Ray installs its own SIGTERM handler
            adopted = None if leftovers is None else leftovers.adopt(
                self._backend, self._planner, grace_s=self._config.grace_period_s,
                longest_init_s=self._prior.longest_init_s if self._prior else None,
            )
            self._recorder.run_started(started_at, self._base_env)
            if self._config.prewarm and (unfit := prewarm_unfit(self._config.command, self._config.prewarm)) is not None:
                self._log.warning(LogEvent.PREWARM_NOT_APPLIED.value, reason=unfit,
                                  prewarm=",".join(self._config.prewarm))
            if self._prior is not None and leftovers is not None:
                self._recorder.run_resumed(started_at, self._prior, adopted)
                for stopped in leftovers.stopped:
                    self._recorder.write(Record(
                        EventName.LEFTOVERS_STOPPED, started_at, self._prior.next_attempt,
                        {"record": stopped.record.name,
                         "processes": [{"pid": p.pid, "name": p.name} for p in stopped.processes], **stopped.detail},
                    ))
            self._start_scale_watch()
            self._start_metrics(started_at)
            self._apply(self._controller.handle(RunStarted(started_at, self._resumed(adopted))))
            while not self._controller.done:
                self._apply_batch(self._next_observation())
        finally:
            if leftovers is not None:  # held, never adopted: the driver failed before
                leftovers.release(self._config.grace_period_s)
            self._scale_watch.stop()
            if self._reform_watch is not None:
                self._reform_watch.cancel()
            if self._metrics is not None:
                self._metrics.close()
            self._close_backend()
            restore()
            structlog.contextvars.reset_contextvars(**bound)
        assert self._finish is not None
        report = self._recorder.write_report()
        return RunResult(
            outcome=self._finish.outcome,
            exit_status=self._finish.exit_status,
            root_cause=self._finish.root_cause,
            attempts=self._recorder.attempts(),
            report=report,
        )

    def _reach_leftovers(self) -> Leftovers | None:
        """Taking a run over, before anything starts: what the dead driver left alive, its
        running attempt held for adoption when it can be, the rest stopped
        (:mod:`elastic.run.takeover`); None on a fresh run."""
        prior = self._prior
        if prior is None:
            return None
        config = self._config
        return reach_leftovers(
            self._layout, config.run_id, prior.running,
            adopting=isinstance(self._backend, Adopting), grace_s=config.grace_period_s,
            refused=not_the_same_job(prior.started_with, job_asked(config)) if prior.running is not None else None,
        )

    def _on_worker_exit(self, exit: NodeReport) -> None:
        if isinstance(exit, BackendFault):
            self._backend_fault = exit
        self._observations.put(observation_of(exit, self._clock.monotonic()))

    def _next_observation(self) -> Observation:
        """The next observation; state.json's training step written meanwhile when it is due
        (:meth:`_state_step_due_at`), whether or not an observation comes."""
        while True:
            observation = self._observation_before(self._state_step_due_at())
            if observation is not None:
                return observation
            self._write_state()

    def _observation_before(self, until: float | None) -> Observation | None:
        """The next observation, or None once ``until`` (monotonic) has passed first; the exit
        timer's when its deadline comes first (the wait said on the console on the way, once,
        when it lasts)."""
        while (timer := self._exit_deadline) is not None:
            say = self._ranks_awaited_at
            saying = say is not None and say[0] == timer[0] and say[1] < timer[1]
            due = say[1] if say is not None and saying else timer[1]
            try:
                return self._observations.get(
                    timeout=max(0.0, (due if until is None else min(due, until)) - self._clock.monotonic())
                )
            except queue.Empty:
                if until is not None and until <= due:
                    return None
                if saying:
                    self._ranks_awaited_at = None
                    self._say_exit_wait(timer[0], RANKS_AWAITED_AFTER_S + max(0.0, self._clock.monotonic() - due))
                    continue
                self._exit_deadline = None  # the wait is said later, if a check leaves ranks running
                # How long the ranks still running have been silent decides which are hung at exit.
                silences = tuple(self._backend.silences(timer[0]))
                return ExitTimeoutPassed(timer[0], self._clock.monotonic(), silences)
        if until is None:
            return self._observations.get()
        try:
            return self._observations.get(timeout=max(0.0, until - self._clock.monotonic()))
        except queue.Empty:
            return None

    def _say_exit_wait(self, attempt: int, waited_s: float) -> None:
        """Ranks still running a while after a peer's exit 0: said once, with how long they may
        be waited for (the journal has the timer's start)."""
        wait = self._controller.exit_wait
        if wait is None or self._controller.attempt != attempt:
            return
        peer, step, running = wait
        self._log.info(LogEvent.RANKS_AWAITED.value, attempt=attempt, rank=peer, step=step,
                       ranks=list(running), waited_s=round(waited_s, 1),
                       exit_timeout_s=self._config.exit_timeout_s)

    # -- applying a decision: journal first, then act ------------------------------------

    def _apply_batch(self, first: Observation) -> None:
        """Group commit: ``first`` and every observation already queued behind it are
        decided and journaled, one fsync for all, before any of their commands runs."""
        decision = self._controller.handle(first)
        written, commands = self._recorder.journal(decision), list(decision.commands)
        while not self._controller.done:
            try:
                observation = self._observations.get_nowait()
            except queue.Empty:
                break
            decision = self._controller.handle(observation)
            written += self._recorder.journal(decision)
            commands += decision.commands
        self._commit(written, commands)

    def _apply(self, decision: Decision) -> None:
        self._commit(self._recorder.journal(decision), decision.commands)

    def _commit(self, written: int, commands: Sequence[Command]) -> None:
        if written:
            # Durable before anything is acted on (DESIGN §3).
            self._recorder.sync()
        due_at = self._state_step_due_at()
        if written or (due_at is not None and due_at <= self._clock.monotonic()):
            self._write_state()
        for command in commands:
            self._execute(command)

    def _state_step_due_at(self) -> float | None:
        """When state.json's training step (what `elastic status` shows of a live run) is due on
        its own: it changed since state.json was written, and at most every STATE_STEP_EVERY_S
        (monotonic; None: nothing new to write)."""
        if self._controller.live_step == self._state_step:
            return None
        return self._state_step_at + STATE_STEP_EVERY_S

    def _write_state(self) -> None:
        self._state_step, self._state_step_at = self._controller.live_step, self._clock.monotonic()
        self._recorder.write_state(self._planner.plan, self._checkpoints.last, self._cluster_address)

    def _execute(self, command: Command) -> None:
        if isinstance(command, PlanAttempt):
            planned = self._planner.plan_attempt(command)
            if planned is not None:
                self._apply(self._controller.handle(planned))
        elif isinstance(command, LaunchAttempt):
            self._apply(self._controller.handle(self._launch(command.attempt)))
        elif isinstance(command, ReformWorld):
            if self._controller.reforms(command.attempt):  # not fallen back since it was decided
                self._apply(self._controller.handle(self._reform(command)))
        elif isinstance(command, WatchReform):
            if self._reform_watch is not None:
                self._reform_watch.cancel()
            self._reform_watch = threading.Timer(command.deadline_s, lambda: self._observations.put(
                ReformDeadlinePassed(command.attempt, self._clock.monotonic())))
            self._reform_watch.daemon = True
            self._reform_watch.start()
        elif isinstance(command, AnnouncePreemption):
            self._backend.announce_preemption(command.attempt, self._notice_text(command))
        elif isinstance(command, StopWorkers):
            self._backend.stop_workers(command.signal, command.grace_s, collateral=command.collateral)
            checkpoint_step, saves_s_ago = self._checkpoints_at_attempt_end(command.attempt)
            self._caches.check(command.attempt)
            # Every exit of the drained workers is already queued: FIFO keeps it first.
            self._observations.put(
                WorkersStopped(command.attempt, self._clock.monotonic(), checkpoint_step, saves_s_ago)
            )
        elif isinstance(command, FinishRun):
            self._finish = command
        elif isinstance(command, StartExitTimer):
            self._exit_deadline = (command.attempt, command.deadline_at)
            if self._exit_wait_for != command.attempt:  # its first timer: a recheck's is not said again
                self._exit_wait_for = command.attempt
                self._ranks_awaited_at = (command.attempt, self._clock.monotonic() + RANKS_AWAITED_AFTER_S)
        elif isinstance(command, KillExitHung):
            seen = self._backend.kill_exit_hung(
                command.attempt, command.ranks, command.reason, command.detected_at
            )
            # Before any queued exit: the controller must know who had finished.
            self._apply(
                self._controller.handle(
                    ExitHungKilled(command.attempt, command.ranks, tuple(seen), self._clock.monotonic(),
                                   self._checkpoints.newest_incomplete())
                )
            )

    def _notice_text(self, command: AnnouncePreemption) -> str:
        """The notice as ranks read it (``elastic.worker.preemption_notice()``): the deadline in Unix time."""
        deadline = self._clock.time() + (command.deadline_at - self._clock.monotonic())
        signal_text = signal_name(command.signal) if command.signal else "none"
        return json.dumps({"source": command.source, "deadline": round(deadline, 3), "signal": signal_text})

    def _bind_metrics(self) -> None:
        """Hold the metrics port before anything is journaled, if the caller did not:
        a port in use is then a ConfigError with nothing started."""
        config = self._config
        if self._metrics is None and config.metrics_port is not None:
            self._metrics = bind_metrics(config.metrics_host, config.metrics_port)

    def _start_metrics(self, started_at: float) -> None:
        config = self._config
        if self._metrics is None:
            return
        self._metrics.serve(self.metrics)
        self._recorder.write(
            Record(EventName.METRICS_SERVING, started_at, 0,
                   {"host": config.metrics_host, "port": self._metrics.port})
        )

    def status_text(self, checkpoint: Checkpoint | None = None) -> str:
        """The live one-line status for a terminal (safe to call from any thread): the training
        step as the nodes last reported it, and the newer of ``checkpoint`` (found on disk by
        the caller, :class:`elastic.run.console.live_status.LiveStatus`) and the driver's own last scan."""
        if self._started_at is None:
            return "elastic | starting"
        # What the line shows, read on its own: the metrics' snapshot (the ledger, every rank's
        # step) would cost as much at each redraw, several times a second.
        controller, plan, now = self._controller, self._planner.plan, self._clock.monotonic()
        known = [c.step for c in (checkpoint, self._checkpoints.last) if c is not None]
        return status_line(
            phase=controller.phase.value,
            attempt=controller.attempt,
            world_size=plan.world_size if plan else 0,
            elapsed_s=now - self._started_at,
            step=controller.live_step,
            checkpoint_step=max(known, default=None) if self._config.checkpoint_dir else False,
            restarts_left=controller.policy.failures.remaining(now),
        )

    def metrics(self) -> RunMetrics:
        """What the metrics endpoint serves now (safe to call from any thread, once running)."""
        return self._snapshot(heartbeat_ages=self._backend.heartbeat_ages())

    def _snapshot(self, heartbeat_ages: Mapping[int, float]) -> RunMetrics:
        assert self._started_at is not None, "the run has not started"
        return run_snapshot(
            self._config.run_id, self._controller, self._recorder, self._planner.plan,
            self._checkpoints.last, self._clock.monotonic(), heartbeat_ages,
        )

    def _start_scale_watch(self) -> None:
        """Look for joined nodes now and then while a run could still grow (DESIGN §7), or
        could leave a straggler's node out for a spare (``--on-straggler restart``)."""
        grows = self._controller.settings.scale_up.enabled and self._config.max_nodes > self._config.min_nodes
        if not grows and self._config.on_straggler is not OnStraggler.RESTART:
            return
        self._scale_watch.start()

    def _launch(self, attempt: int) -> Observation:
        specs = self._planner.specs
        try:
            started = self._backend.launch(specs, self._planner.helpers)
        except OSError as error:  # a rank log that cannot be created: a full disk
            if error.filename is None:
                raise
            raise RunWriteError(error.filename, error) from error
        except LaunchError as error:
            rank = next(s for s in specs if s.rank == error.rank)
            return WorkerExited(
                WorkerExit(
                    attempt=attempt,
                    rank=error.rank,
                    node=rank.node_id,
                    returncode=error.returncode,
                    observed_at=self._clock.monotonic(),
                    launch_error=str(error),
                )
            )
        # Each rank's pid on its node, for `elastic status` (a warm rank's /proc shows none of its variables).
        self._recorder.write(Record(EventName.RANK_PIDS, self._clock.monotonic(), attempt,
                                    {"pids": {str(rank): s.pid for rank, s in sorted(started.items())}}))
        warm = {rank: s.warm_kb for rank, s in started.items() if s.warm_kb is not None}
        if warm or any(s.prewarm for s in specs):  # which ranks a warm interpreter took, its memory
            cold = sorted(s.rank for s in specs if s.rank not in warm)
            held_mb = round(sum(warm.values()) / 1024, 1)
            self._recorder.write(Record(EventName.RANKS_STARTED, self._clock.monotonic(), attempt,
                                        {"warm": sorted(warm), "cold": cold, "warm_resident_mb": held_mb}))
        return AttemptLaunched(attempt, len(specs), self._clock.monotonic())

    def _reform(self, command: ReformWorld) -> WorldReformed | ReformFailed:
        """Carry out a re-forming in place: every survivor told its place, each lost place handed
        to a warm spare (the notices of :func:`elastic.core.inplace.reform.notices`, on the
        attempt's store), then the checkpoint looked at as after a drain."""
        following = command.attempt + 1
        store = self._planner.plan.inplace_store if self._planner.plan is not None else None
        if not isinstance(self._backend, ReformsInPlace) or store is None:
            return ReformFailed(command.attempt, self._clock.monotonic(), "the backend cannot re-form a world in place")
        told, handed = notices(command.reform, store)
        try:
            pids = self._backend.reform(Reforming(following, tuple(sorted(told.items())), tuple(handed)))
        except LookupError as error:  # a spare gone since the node said it started
            return ReformFailed(command.attempt, self._clock.monotonic(), str(error))
        at = self._clock.monotonic()
        self._recorder.write(Record(EventName.RANK_PIDS, at, following,
                                    {"pids": {str(rank): pid for rank, pid in sorted(pids.items())}}))
        return WorldReformed(command.attempt, at, pids, *self._checkpoints_at_attempt_end(command.attempt))

    def _checkpoints_at_attempt_end(self, attempt: int) -> tuple[int | None, tuple[tuple[float, float], ...]]:
        """At the end of ``attempt`` (drained, or re-formed in place): the latest complete checkpoint's
        step, and the saves committed since the last look, each (began, committed) in seconds ago."""
        checkpoint = self._checkpoints.latest(journal_for=attempt)
        wall = self._clock.time()
        saves = self._checkpoints.saves_since(self._saves_since)
        self._saves_since = wall
        return (checkpoint.step if checkpoint else None,
                tuple((wall - began, wall - committed) for began, committed in saves))

    def _resumed(self, adopted: Adopted | None) -> Resumed | None:
        """What the controller takes over from a dead driver: its streak, and the attempt it ran,
        ``adopted`` as it runs, or ended with it with the checkpoint found now, which says whether
        that attempt progressed."""
        prior = self._prior
        if prior is None:
            return None
        if adopted is not None:  # it goes on: its saves are journaled at its drain, as any attempt's
            self._saves_since = prior.interrupted_began_at or self._saves_since
            return Resumed(no_progress_streak=prior.no_progress_streak, last_cause=prior.last_cause, adopted=adopted)
        interrupted = prior.interrupted
        checkpoint = self._checkpoints.latest() if interrupted is not None else None
        # The saves of the attempt it ran, each dated before the record that lists them: the
        # takeover's, written at the run's start, not now (the backend has started since: an
        # embedded Ray's seconds, which placed every save that much too early in the ledger).
        now = self._clock.time()
        started = self._clock.monotonic() if self._started_at is None else self._started_at
        at_start = now - (self._clock.monotonic() - started)
        since = prior.interrupted_began_at if prior.interrupted_began_at is not None else self._saves_since
        saves = self._checkpoints.saves_since(since) if interrupted is not None else []
        self._saves_since = now if interrupted is not None else self._saves_since
        return Resumed(
            no_progress_streak=prior.no_progress_streak,
            interrupted=interrupted[0] if interrupted else None,
            interrupted_resume_step=interrupted[1] if interrupted else None,
            interrupted_by_notice=prior.interrupted_by_notice,
            checkpoint_step=checkpoint.step if checkpoint else None,
            interrupted_step=prior.last_step_seen[0] if prior.last_step_seen else None,
            interrupted_step_at=prior.last_step_seen[1] if prior.last_step_seen else None,
            last_cause=prior.last_cause,
            succeeded_attempt=prior.succeeded_attempt,
            saves_s_ago=tuple((at_start - began, at_start - committed) for began, committed in saves),
        )

    # -- teardown --------------------------------------------------------

    def _close_backend(self) -> None:
        try:
            self._backend.close()
        except Exception as error:  # teardown must never change the outcome
            self._log.warning(LogEvent.TEARDOWN_FAILED.value, error=repr(error))
