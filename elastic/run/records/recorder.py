"""The run's records: the journal (group commit), the fold over it, state.json and report.json."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import structlog

from elastic.core.options.config import RunConfig
from elastic.core.controller.controller import Controller
from elastic.core.events import EventName, LogEvent, Record
from elastic.core.journal.fold import JOURNAL_VERSION, FoldedAttempt, RunFold
from elastic.core.messages import Adopted, Decision
from elastic.core.launch.plan import AttemptPlan
from elastic.core.journal.recovery import PriorRun
from elastic.core.redact import redact_argv, redact_env, redact_value
from elastic.node.clock import Clock, SystemClock
from elastic.core.checkpoints.selection import Checkpoint
from elastic.run.records.journal import RunDirectory, RunWriteError
from elastic.views.report import build_report

__all__ = ["PROCESS_AGE_MAX_S", "Recorder", "job_asked"]

PROCESS_AGE_MAX_S = 600.0  # a launcher's own start-up is seconds; an older process is no fresh launch

_JOURNAL_ONLY = frozenset({"log_tail", "traceback"})  # record fields the console does not repeat
_WARNINGS = frozenset(
    {
        EventName.CHECKPOINT_REJECTED,
        EventName.CHECKPOINTS_UNRECOGNISED,
        EventName.COMPILE_CACHE_REPLACED,
        EventName.WORKER_FAILED,
        EventName.BUDGET_EXHAUSTED,
        EventName.RESTART_REFUSED,
        EventName.STOP_REQUESTED,
        EventName.BACKEND_FAILED,
        EventName.STRAGGLER_SEEN,  # a slow rank costs every rank its pace: worth a warning
        EventName.NODE_KEPT,  # a node suspected at fault, kept: too few nodes without it
    }
)


def job_asked(config: RunConfig) -> dict[str, Any]:
    """What a run was asked to run, as its ``run_started`` record says it: the command (redacted),
    the ranks a node and the nodes (a rerun asking for another job adopts nothing of this one)."""
    return {"command": redact_argv(config.command), "nproc_per_node": config.nproc_per_node,
            "nnodes": f"{config.min_nodes}:{config.max_nodes}"}


class Recorder:
    """Writes what the run did to its directory, and logs it.

    Every record journaled (a dead driver's too) is folded as written, so the
    metrics read what the report will: read :attr:`fold` under :attr:`fold_lock`.
    A full disk ends the run only while its outcome is open (:meth:`keep_writing`).
    """

    def __init__(
        self,
        config: RunConfig,
        run_dir: RunDirectory,
        controller: Controller,
        *,
        clock: Clock,
        fold: RunFold,
    ) -> None:
        self._config = config
        self._run_dir = run_dir
        self._controller = controller
        self._clock = clock
        self._log = structlog.get_logger("elastic").bind(run_id=config.run_id)
        self.fold = fold
        self.fold_lock = threading.Lock()
        self.wall_offset_s = clock.time() - clock.monotonic()

    def write(self, record: Record, *, sync: bool = True, **journal_only: Any) -> None:
        """Journal the record (fsynced unless ``sync`` is false: then the caller syncs)
        and log it; ``journal_only`` fields skip the console."""
        wall = record.at + self.wall_offset_s
        # What ranks printed (log tails, diagnosis lines, tracebacks) is copied into records:
        # credentials in it are redacted here, for the journal, the console and, read from the
        # journal, report.json and the summary.
        fields = {k: redact_value(v) for k, v in record.fields.items()}
        event = {
            "event": record.event.value,
            "time": datetime.fromtimestamp(wall, tz=timezone.utc).isoformat(timespec="microseconds"),
            "run_id": self._config.run_id,
            "attempt": record.attempt,
            **fields,
            **{k: redact_value(v) for k, v in journal_only.items()},
        }
        with self.fold_lock:
            self.fold.apply(event)
        self.keep_writing(functools.partial(self._run_dir.append, event, sync=sync))
        collateral = record.fields.get("kind") == "collateral"
        level = "warning" if record.event in _WARNINGS and not collateral else "info"
        logged = {k: v for k, v in fields.items() if k not in _JOURNAL_ONLY}
        getattr(self._log, level)(record.event.value, attempt=record.attempt, **logged)

    def journal(self, decision: Decision) -> int:
        """Write the decision's records, not yet fsynced: :meth:`sync` makes them durable."""
        for record in decision.records:
            self.write(record, sync=False)
        return len(decision.records)

    def sync(self) -> None:
        self.keep_writing(self._run_dir.sync)

    def _process_age(self, at: float) -> dict[str, float]:
        """``process_started_s_ago``: how long before ``at`` (monotonic) this process started (its
        imports, the backend's start): the run's wall time begins there, as a scheduler's does.
        Only on the system's clock, and for a start within :data:`PROCESS_AGE_MAX_S`."""
        if not isinstance(self._clock, SystemClock):
            return {}
        try:  # Linux: the process's start in clock ticks since boot, against the time since boot now
            ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
            uptime = float(Path("/proc/uptime").read_text().split()[0])
            ago = uptime - ticks / os.sysconf("SC_CLK_TCK") - (self._clock.monotonic() - at)
        except (OSError, ValueError, IndexError):
            return {}
        return {"process_started_s_ago": round(ago, 6)} if 0.0 <= ago <= PROCESS_AGE_MAX_S else {}

    def run_started(self, started_at: float, base_env: Mapping[str, str]) -> None:
        config = self._config
        self.write(
            Record(
                EventName.RUN_STARTED,
                started_at,
                0,
                {
                    "journal_version": JOURNAL_VERSION,
                    **job_asked(config),
                    "max_restarts": config.max_restarts,
                    "grace_period_s": config.grace_period_s,
                    "failure_grace_s": config.failure_grace_s,
                    "heartbeat_timeout_s": config.hang.timeout_s if config.hang else None,
                    "exit_timeout_s": config.exit_timeout_s,
                    "exit_hang": config.exit_hang.value,
                    "backend": config.backend,
                    "pid": os.getpid(),
                    **self._process_age(started_at),
                },
            ),
            environment=redact_env(base_env),
        )

    def run_resumed(self, at: float, prior: PriorRun, adopted: Adopted | None) -> None:
        """The takeover of a run: where it goes on (its next attempt, or ``adopted``: the attempt
        its dead driver ran, taken over with its ranks) and what it goes on from."""
        self.write(
            Record(
                EventName.RUN_RESUMED,
                at,
                prior.next_attempt if adopted is None else adopted.attempt,
                {
                    **({"adopted": True} if adopted is not None else {}),
                    "previous_driver_pid": prior.driver_pid,
                    "failures_charged": len(prior.failure_charges),
                    "preemptions_charged": len(prior.preemption_charges),
                    "journal_tail_truncated": prior.truncated_tail,
                    "no_progress_streak": prior.no_progress_streak,
                    # what it goes on from: a run stopped by a signal or "requeue me" (75); None
                    # when its driver died
                    "previous_outcome": prior.finished_outcome,
                    "previous_exit_status": prior.finished_exit_status,
                },
            )
        )

    def write_state(
        self, plan: AttemptPlan | None, checkpoint: Checkpoint | None, cluster_address: str | None
    ) -> None:
        controller = self._controller
        state = {
            "run_id": self._config.run_id,
            "phase": controller.phase.value,
            "attempt": controller.attempt,
            "world_size": plan.world_size if plan else 0,
            "nodes": len(plan.nodes) if plan else 0,
            "ranks_alive": controller.ranks_alive,
            "step": controller.live_step,  # the attempt's highest training step, as last reported
            "checkpoint_step": checkpoint.step if checkpoint else None,  # at the last scan
            # where `elastic status` looks for the latest checkpoint now (the driver scans
            # only at an attempt's start and end)
            "checkpoint_dir": str(self._config.checkpoint_dir) if self._config.checkpoint_dir else None,
            "checkpoint_pattern": pattern.pattern if (pattern := self._config.checkpoint_pattern) else None,
            "restarts": controller.restarts,
            "failures_budget_left": controller.policy.failures.remaining(
                self._clock.monotonic()
            ),
            "outcome": controller.outcome.value if controller.outcome else None,
            "pid": os.getpid(),
            "backend": self._config.backend,
            "cluster_address": cluster_address,
        }
        self.keep_writing(functools.partial(self._run_dir.write_state, state))

    def write_report(self) -> Mapping[str, Any]:
        """Build report.json from the fold, write it (see :meth:`keep_writing`) and return it.

        A finished run ends at its ``run_finished`` record, as the journal's other readers
        (``elastic status``, the timeline) have it: one wall time everywhere, whatever the
        teardown after it costs (an embedded Ray's shutdown)."""
        ended_wall = self._clock.monotonic() + self.wall_offset_s
        with self.fold_lock:
            ended_s = self.fold.now_s if self.fold.finished is not None else self.fold.since_start(ended_wall)
            report = build_report(self.fold, command=redact_argv(self._config.command), ended_s=ended_s)
        self.keep_writing(functools.partial(self._run_dir.write_report, report))
        return report

    def attempts(self) -> tuple[FoldedAttempt, ...]:
        """The run's attempts as its journal tells them: the fold's, which the report reads."""
        with self.fold_lock:
            return tuple(self.fold.closed())

    def keep_writing(self, write: Callable[[], None]) -> None:
        """Write to the run directory; a full disk ends the run only while its outcome is open.

        Once the outcome is known (every rank exited 0, or the failure that ends
        the run), a file that cannot be written is a warning naming it: what
        happened to the ranks stands, success included.
        """
        try:
            write()
        except RunWriteError as error:
            controller = self._controller
            draining = controller.draining
            if controller.outcome is None and (draining is None or draining.outcome is None):
                raise
            self._log.warning(LogEvent.RUN_FILE_WRITE_FAILED.value, path=error.path, error=str(error))
