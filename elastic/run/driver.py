"""The shell around the controller: observations in, commands carried out via a Backend."""

from __future__ import annotations

import contextvars
import functools
import os
import queue
import random
import signal
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from types import FrameType
from typing import Any

import structlog

from elastic.backends.protocol import Backend, BackendFault, NodeLaunchError, NotEnoughNodes
from elastic.run.checkpoint_scan import Checkpoint, CheckpointDirError, Selection, scan_checkpoints
from elastic.node.clock import Clock, SystemClock
from elastic.core.config import RunConfig
from elastic.core.controller import AttemptSummary, Controller
from elastic.core.events import EventName, LogEvent, Record
from elastic.core.failures import Failure, WorkerExit
from elastic.core.fold import JOURNAL_VERSION, RunFold
from elastic.run.journal import RunDirectory, RunWriteError
from elastic.core.messages import (
    AttemptLaunched,
    AttemptPlanned,
    BackendFailed,
    Command,
    ExitHungKilled,
    ExitTimeoutPassed,
    FinishRun,
    KillExitHung,
    LaunchAttempt,
    NodesUnavailable,
    Observation,
    Outcome,
    PlanAttempt,
    Resumed,
    RunStarted,
    ScaleCheck,
    StartExitTimer,
    Step,
    StopRequested,
    StopWorkers,
    WorkerExited,
    WorkersStopped,
)
from elastic.run.metrics import MetricsServer, RunMetrics
from elastic.core.plan import AttemptPlan, World, WorkerSpec, plan_attempt, worker_specs
from elastic.core.policy import Backoff, RestartPolicy, ScaleUp
from elastic.core.recovery import PriorRun
from elastic.core.redact import redact_argv, redact_env
from elastic.run.report_json import build_report
from elastic.run.status import status_line
from elastic.node.supervisor import LaunchError

__all__ = ["Driver", "RunResult", "STOP_SIGNALS"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# How often a run below its --nnodes MAX looks for nodes that joined.
_SCALE_CHECK_S = 2.0


@dataclass(frozen=True)
class RunResult:
    outcome: Outcome
    exit_status: int
    root_cause: Failure | None
    attempts: tuple[AttemptSummary, ...]
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
    ) -> None:
        self._config = config
        self._backend = backend
        self._run_dir = run_dir
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
        )
        if prior is not None:
            # Restarts the earlier driver charged still count, at their wall-clock age.
            to_now = self._clock.monotonic() - self._clock.time()
            policy = policy.with_charges(
                [at + to_now for at in prior.failure_charges],
                [at + to_now for at in prior.preemption_charges],
            )
        self._controller = Controller(
            policy,
            grace_s=config.grace_period_s,
            tracks_progress=config.checkpoint_dir is not None,
            max_no_progress=config.max_no_progress,
            first_attempt=prior.next_attempt if prior else 0,
            scale_up=ScaleUp(
                enabled=config.scale_up and config.checkpoint_dir is not None,
                interval_s=config.scale_up_interval_s,
                max_nodes=config.max_nodes,
            ),
            exit_timeout_s=config.exit_timeout_s,
            exit_hang=config.exit_hang,
        )
        self._exit_deadline: tuple[int, float] | None = None  # (attempt, deadline_at)
        self._watching = threading.Event()
        self._metrics: MetricsServer | None = None
        self._started_at: float | None = None
        self._cluster_address: str | None = None
        self._observations: queue.SimpleQueue[Observation] = queue.SimpleQueue()
        self._plan: AttemptPlan | None = None
        # The world the dead driver's last attempt ran on, for the first resumed attempt.
        self._previous_world: World | None = prior.last_world if prior else None
        # Every record journaled (a dead driver's too), folded as written: the metrics read
        # what the report will.
        self._fold = prior.fold if prior is not None else RunFold()
        self._fold_lock = threading.Lock()
        self._specs: tuple[WorkerSpec, ...] = ()
        self._stop_requested = threading.Event()
        self._signals_claimed = False
        self._checkpoint: Checkpoint | None = None
        self._checkpoint_notes: set[tuple[str, str]] = set()  # rejections and warnings journaled
        self._finish: FinishRun | None = None
        self._backend_fault: BackendFault | None = None
        self._interrupts = 0
        self._log = structlog.get_logger("elastic").bind(run_id=config.run_id)
        self._wall_offset_s = self._clock.time() - self._clock.monotonic()

    # -- the run ---------------------------------------------------------------------

    def run(self) -> RunResult:
        restore = self._install_signal_handlers()
        # Every event logged during the run carries run_id, the backend's own too.
        bound = structlog.contextvars.bind_contextvars(run_id=self._config.run_id)
        started_at = self._started_at = self._clock.monotonic()
        try:
            self._backend.start(self._on_worker_exit)
            self._cluster_address = self._backend.cluster_address()
            self._claim_signals()  # again: starting Ray installs its own SIGTERM handler
            self._journal_run_started(started_at)
            if self._prior is not None:
                self._journal_run_resumed(started_at, self._prior)
            self._start_scale_watch()
            self._start_metrics(started_at)
            self._apply(self._controller.handle(RunStarted(started_at, self._resumed())))
            while not self._controller.done:
                self._apply_batch(self._next_observation())
        finally:
            self._watching.clear()
            if self._metrics is not None:
                self._metrics.close()
            self._close_backend()
            restore()
            structlog.contextvars.reset_contextvars(**bound)
        assert self._finish is not None
        ended_wall = self._clock.monotonic() + self._wall_offset_s
        with self._fold_lock:
            report = build_report(
                self._fold,
                command=redact_argv(self._config.command),
                ended_s=self._fold.since_start(ended_wall),
            )
        self._keep_writing(self._run_dir.write_report, report)
        return RunResult(
            outcome=self._finish.outcome,
            exit_status=self._finish.exit_status,
            root_cause=self._finish.root_cause,
            attempts=self._controller.attempts,
            report=report,
        )

    def _on_worker_exit(self, exit: WorkerExit | BackendFault) -> None:
        if isinstance(exit, BackendFault):
            self._backend_fault = exit
            self._observations.put(BackendFailed(exit.reason, exit.requeue, self._clock.monotonic()))
            return
        self._observations.put(WorkerExited(exit))

    def _next_observation(self) -> Observation:
        """The next observation; the exit timer's when its deadline comes first."""
        timer = self._exit_deadline
        if timer is None:
            return self._observations.get()
        try:
            return self._observations.get(timeout=max(0.0, timer[1] - self._clock.monotonic()))
        except queue.Empty:
            self._exit_deadline = None
            return ExitTimeoutPassed(timer[0], self._clock.monotonic())

    # -- applying a step: journal first, then act ------------------------------------

    def _apply_batch(self, first: Observation) -> None:
        """Group commit: ``first`` and every observation already queued behind it are
        decided and journaled, one fsync for all, before any of their commands runs."""
        step = self._controller.handle(first)
        written, commands = self._journal(step), list(step.commands)
        while not self._controller.done:
            try:
                observation = self._observations.get_nowait()
            except queue.Empty:
                break
            step = self._controller.handle(observation)
            written += self._journal(step)
            commands += step.commands
        self._commit(written, commands)

    def _apply(self, step: Step) -> None:
        self._commit(self._journal(step), step.commands)

    def _journal(self, step: Step) -> int:
        """Write the step's records, not yet fsynced: :meth:`_commit` syncs them."""
        for record in step.records:
            self._write(record, sync=False)
        return len(step.records)

    def _commit(self, written: int, commands: Sequence[Command]) -> None:
        if written:
            # Durable before anything is acted on (DESIGN §3).
            self._keep_writing(lambda _: self._run_dir.sync(), {})
            self._write_state()
        for command in commands:
            self._execute(command)

    def _execute(self, command: Command) -> None:
        if isinstance(command, PlanAttempt):
            planned = self._plan_attempt(command)
            if planned is not None:
                self._apply(self._controller.handle(planned))
        elif isinstance(command, LaunchAttempt):
            self._apply(self._controller.handle(self._launch(command.attempt)))
        elif isinstance(command, StopWorkers):
            self._backend.stop_workers(command.signal, command.grace_s)
            checkpoint = self._latest_checkpoint(journal_for=command.attempt)
            # Every exit of the drained workers is already queued: FIFO keeps it first.
            self._observations.put(
                WorkersStopped(
                    command.attempt,
                    self._clock.monotonic(),
                    checkpoint.step if checkpoint else None,
                )
            )
        elif isinstance(command, FinishRun):
            self._finish = command
        elif isinstance(command, StartExitTimer):
            self._exit_deadline = (command.attempt, command.deadline_at)
        elif isinstance(command, KillExitHung):
            finished = self._backend.kill_exit_hung(
                command.attempt, command.ranks, command.reason, command.detected_at
            )
            # Before any queued exit: the controller must know who had finished.
            self._apply(
                self._controller.handle(
                    ExitHungKilled(command.attempt, command.ranks, finished, self._clock.monotonic())
                )
            )

    def _plan_attempt(self, command: PlanAttempt) -> Observation | None:
        """Back off, wait for nodes, then fix the world; ``None`` when a stop cut it short."""
        attempt = command.attempt
        config = self._config
        if command.delay_s > 0:  # the controller journaled the backoff with its level
            if self._stop_requested.wait(command.delay_s):
                return None  # the queued StopRequested ends the run
        world = self._plan.world if self._plan else self._previous_world
        previous = list(world.node_ids) if world else []
        try:
            nodes = self._backend.acquire_nodes(
                previous,
                config.min_nodes,
                config.max_nodes,
                config.node_wait_timeout_s,
                self._stop_requested,
            )
            master_port, coordinator_port = self._backend.free_ports(nodes[0], 2)
        except NotEnoughNodes as missing:
            if self._stop_requested.is_set() or self._backend_fault is not None:
                return None  # the queued StopRequested or BackendFailed ends the run
            return NodesUnavailable(attempt, missing.needed, missing.seen, self._clock.monotonic())
        except NodeLaunchError as error:  # a node's agent cannot start: nothing can run there
            return WorkerExited(
                WorkerExit(attempt=attempt, rank=error.rank, node=error.node,
                           returncode=error.returncode, observed_at=self._clock.monotonic(),
                           launch_error=str(error))
            )
        checkpoint = self._latest_checkpoint(journal_for=attempt)
        plan = plan_attempt(
            run_id=config.run_id,
            attempt=attempt,
            max_restarts=config.max_restarts,
            nodes=nodes,
            master_addr=config.master_addr,
            master_port=config.master_port or master_port,
            coordinator_port=coordinator_port,
            previous=world,
            checkpoint_dir=str(config.checkpoint_dir) if config.checkpoint_dir else None,
            resume_from=str(checkpoint.path) if checkpoint else None,
            resume_step=checkpoint.step if checkpoint else None,
        )
        self._plan = plan
        self._specs = worker_specs(
            plan,
            config.command,
            self._base_env,
            self._run_dir.layout,
            isolate_gpus=config.isolate_gpus,
            cwd=os.getcwd(),
            hang=config.hang,
        )
        return AttemptPlanned(
            attempt, plan.world_size, self._clock.monotonic(), plan.resume_step, len(plan.nodes),
            plan={
                "world_size": plan.world_size,
                "nodes": [n.node_id for n in plan.nodes],
                "node_addresses": [n.address for n in plan.nodes],
                "nproc_per_node": [n.nproc for n in plan.nodes],
                "master_addr": plan.master_addr,
                "master_port": plan.master_port,
                "world_changed": plan.world_changed,
                "resume_from": plan.resume_from,
                "resume_step": plan.resume_step,
            },
        )

    def _start_metrics(self, started_at: float) -> None:
        config = self._config
        if config.metrics_port is None:
            return
        self._metrics = MetricsServer(
            self.metrics, host=config.metrics_host, port=config.metrics_port
        )
        self._metrics.start()
        self._write(
            Record(EventName.METRICS_SERVING, started_at, 0,
                   {"host": config.metrics_host, "port": self._metrics.port})
        )

    def status_text(self) -> str:
        """The live one-line status for a terminal (safe to call from any thread)."""
        if self._started_at is None:
            return "elastic | starting"
        snapshot = self._snapshot(heartbeat_ages={})  # the line shows none: ask no agent
        return status_line(
            phase=snapshot.phase.value,
            attempt=snapshot.attempt,
            world_size=snapshot.world_size,
            elapsed_s=self._clock.monotonic() - self._started_at,
            step=snapshot.checkpoint_step,
            restarts_left=snapshot.budget_left["failures"],
        )

    def metrics(self) -> RunMetrics:
        """What the metrics endpoint serves now (safe to call from any thread, once running)."""
        return self._snapshot(heartbeat_ages=self._backend.heartbeat_ages())

    def _snapshot(self, heartbeat_ages: Mapping[int, float]) -> RunMetrics:
        started_at = self._started_at
        assert started_at is not None, "the run has not started"
        controller = self._controller
        now = self._clock.monotonic()
        restarts: Counter[str] = Counter()
        failures: Counter[str] = Counter()
        with self._fold_lock:
            since_start = self._fold.since_start(now + self._wall_offset_s)
            attempts = self._fold.closed(since_start)
            for attempt in attempts:
                failures.update(attempt.failure_kinds())
                if attempt.restarted:
                    cause = attempt.root_cause
                    restarts[cause.kind if cause else "scale-up"] += 1
            goodput = self._fold.goodput(since_start)
        policy = controller.policy
        return RunMetrics(
            run_id=self._config.run_id,
            phase=controller.phase,
            attempt=controller.attempt,
            world_size=self._plan.world_size if self._plan else 0,
            ranks_alive=controller.ranks_alive,
            restarts_by_kind=restarts,
            failures_by_kind=failures,
            budget_left={
                "failures": policy.failures.remaining(now),
                "preemptions": policy.preemptions.remaining(now),
            },
            checkpoint_step=self._checkpoint.step if self._checkpoint else None,
            goodput=goodput,
            heartbeat_age_s=heartbeat_ages,
        )

    def _start_scale_watch(self) -> None:
        """Look for joined nodes now and then while a run could still grow (DESIGN §7)."""
        if not self._controller.scale_up.enabled or self._config.max_nodes <= self._config.min_nodes:
            return
        self._watching.set()
        threading.Thread(target=contextvars.copy_context().run, args=(self._watch_scale,),  # run_id bound
                         name="elastic-scale-watch", daemon=True).start()

    def _watch_scale(self) -> None:
        while self._watching.is_set() and not self._stop_requested.wait(_SCALE_CHECK_S):
            if self._plan is None or not self._watching.is_set():
                continue
            try:
                available = self._backend.available_nodes()
            except Exception as error:  # a look that failed is only a missed look
                self._log.info(LogEvent.SCALE_CHECK_FAILED.value, error=repr(error))
                continue
            checkpoint = self._latest_checkpoint()
            self._observations.put(
                ScaleCheck(
                    self._plan.attempt,
                    available,
                    checkpoint.step if checkpoint else None,
                    self._clock.monotonic(),
                )
            )

    def _latest_checkpoint(self, *, journal_for: int | None = None) -> Checkpoint | None:
        """The latest complete checkpoint; if the directory turns unreadable, the last known.

        With ``journal_for`` (an attempt, at a moment no rank writes: before a
        launch, after a drain) what was passed over is journaled, each once.
        """
        config = self._config
        if config.checkpoint_dir is None:
            return None
        try:
            selection = scan_checkpoints(config.checkpoint_dir, config.checkpoint_pattern)
        except CheckpointDirError as error:
            self._log.warning(LogEvent.CHECKPOINT_SCAN_FAILED.value, error=str(error))
            return self._checkpoint
        self._checkpoint = selection.latest
        if journal_for is not None:
            self._journal_checkpoint_notes(selection, journal_for, str(config.checkpoint_dir))
        return self._checkpoint

    def _journal_checkpoint_notes(self, selection: Selection, attempt: int, directory: str) -> None:
        """Journal entries newer than the chosen checkpoint that are not whole, and a directory
        where nothing is named like a checkpoint (a layout to name with --checkpoint-pattern)."""
        for rejection in selection.rejected:
            if (rejection.name, rejection.reason) not in self._checkpoint_notes:
                self._checkpoint_notes.add((rejection.name, rejection.reason))
                self._write(Record(
                    EventName.CHECKPOINT_REJECTED, self._clock.monotonic(), attempt,
                    {"checkpoint_dir": directory, "entry": rejection.name, "step": rejection.step,
                     "reason": rejection.reason},
                ))
        if selection.recognised_none and ("", "unrecognised") not in self._checkpoint_notes:
            self._checkpoint_notes.add(("", "unrecognised"))
            self._write(Record(
                EventName.CHECKPOINTS_UNRECOGNISED, self._clock.monotonic(), attempt,
                {"checkpoint_dir": directory, "count": len(selection.unrecognised),
                 "entries": list(selection.unrecognised[:_UNRECOGNISED_SHOWN])},
            ))

    def _launch(self, attempt: int) -> Observation:
        specs = self._specs
        try:
            self._backend.launch(specs)
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
        return AttemptLaunched(attempt, len(specs), self._clock.monotonic())

    # -- records ---------------------------------------------------------------------

    def _write(self, record: Record, *, sync: bool = True, **journal_only: Any) -> None:
        """Journal the record (fsynced unless ``sync`` is false: then the caller syncs)
        and log it; ``journal_only`` fields skip the console."""
        wall = record.at + self._wall_offset_s
        event = {
            "event": record.event.value,
            "time": datetime.fromtimestamp(wall, tz=timezone.utc).isoformat(timespec="microseconds"),
            "run_id": self._config.run_id,
            "attempt": record.attempt,
            **record.fields,
            **journal_only,
        }
        with self._fold_lock:
            self._fold.apply(event)
        self._keep_writing(functools.partial(self._run_dir.append, sync=sync), event)
        collateral = record.fields.get("kind") == "collateral"
        level = "warning" if record.event in _WARNINGS and not collateral else "info"
        logged = {k: v for k, v in record.fields.items() if k not in _JOURNAL_ONLY}
        getattr(self._log, level)(record.event.value, attempt=record.attempt, **logged)

    def _journal_run_started(self, started_at: float) -> None:
        config = self._config
        self._write(
            Record(
                EventName.RUN_STARTED,
                started_at,
                0,
                {
                    "journal_version": JOURNAL_VERSION,
                    "command": redact_argv(config.command),
                    "nproc_per_node": config.nproc_per_node,
                    "nnodes": f"{config.min_nodes}:{config.max_nodes}",
                    "max_restarts": config.max_restarts,
                    "grace_period_s": config.grace_period_s,
                    "heartbeat_timeout_s": config.hang.timeout_s if config.hang else None,
                    "exit_timeout_s": config.exit_timeout_s,
                    "exit_hang": config.exit_hang.value,
                    "backend": config.backend,
                    "pid": os.getpid(),
                },
            ),
            environment=redact_env(self._base_env),
        )

    def _resumed(self) -> Resumed | None:
        """What the controller takes over from a dead driver: its streak, and the attempt it ran
        (ended with it) with the checkpoint found now, which says whether that attempt progressed."""
        prior = self._prior
        if prior is None:
            return None
        interrupted = prior.interrupted
        checkpoint = self._latest_checkpoint() if interrupted is not None else None
        return Resumed(
            no_progress_streak=prior.no_progress_streak,
            interrupted=interrupted[0] if interrupted else None,
            interrupted_resume_step=interrupted[1] if interrupted else None,
            checkpoint_step=checkpoint.step if checkpoint else None,
        )

    def _journal_run_resumed(self, at: float, prior: PriorRun) -> None:
        self._write(
            Record(
                EventName.RUN_RESUMED,
                at,
                prior.next_attempt,
                {
                    "previous_driver_pid": prior.driver_pid,
                    "failures_charged": len(prior.failure_charges),
                    "preemptions_charged": len(prior.preemption_charges),
                    "journal_tail_truncated": prior.truncated_tail,
                    "no_progress_streak": prior.no_progress_streak,
                },
            )
        )

    def _keep_writing(
        self, write: Callable[[Mapping[str, Any]], None], data: Mapping[str, Any]
    ) -> None:
        """Write to the run directory; a full disk ends the run only while its outcome is open.

        Once the outcome is known (every rank exited 0, or the failure that ends
        the run), a file that cannot be written is a warning naming it: what
        happened to the ranks stands, success included.
        """
        try:
            write(data)
        except RunWriteError as error:
            controller = self._controller
            draining = controller.draining
            if controller.outcome is None and (draining is None or draining.outcome is None):
                raise
            self._log.warning(LogEvent.RUN_FILE_WRITE_FAILED.value, path=error.path, error=str(error))

    def _write_state(self) -> None:
        controller = self._controller
        self._keep_writing(
            self._run_dir.write_state,
            {
                "run_id": self._config.run_id,
                "phase": controller.phase.value,
                "attempt": controller.attempt,
                "world_size": self._plan.world_size if self._plan else 0,
                "nodes": len(self._plan.nodes) if self._plan else 0,
                "ranks_alive": controller.ranks_alive,
                "checkpoint_step": self._checkpoint.step if self._checkpoint else None,
                "restarts": controller.restarts,
                "failures_budget_left": controller.policy.failures.remaining(
                    self._clock.monotonic()
                ),
                "outcome": controller.outcome.value if controller.outcome else None,
                "pid": os.getpid(),
                "backend": self._config.backend,
                "cluster_address": self._cluster_address,
            }
        )

    # -- teardown and signals --------------------------------------------------------

    def _close_backend(self) -> None:
        try:
            self._backend.close()
        except Exception as error:  # teardown must never change the outcome
            self._log.warning(LogEvent.TEARDOWN_FAILED.value, error=repr(error))

    def _install_signal_handlers(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {signum: signal.signal(signum, self._on_signal) for signum in STOP_SIGNALS}
        self._signals_claimed = True

        def restore() -> None:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

        return restore

    def _claim_signals(self) -> None:
        if self._signals_claimed:
            for signum in STOP_SIGNALS:
                signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._stop_requested.set()
        if signum == signal.SIGINT:
            self._interrupts += 1
            if self._interrupts > 1:  # a second Ctrl-C: no more grace
                self._backend.kill_workers()
        self._observations.put(StopRequested(signum, self._clock.monotonic()))


_JOURNAL_ONLY = frozenset({"log_tail"})  # record fields the console does not repeat
_UNRECOGNISED_SHOWN = 5  # names of unrecognised entries a warning lists
_WARNINGS = frozenset(
    {
        EventName.CHECKPOINT_REJECTED,
        EventName.CHECKPOINTS_UNRECOGNISED,
        EventName.WORKER_FAILED,
        EventName.BUDGET_EXHAUSTED,
        EventName.RESTART_REFUSED,
        EventName.STOP_REQUESTED,
        EventName.BACKEND_FAILED,
    }
)
