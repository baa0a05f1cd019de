"""The closed vocabulary of run events: past-tense facts shared by journal and logs."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EventName", "Record"]


class EventName(enum.Enum):
    RUN_STARTED = "run_started"
    RUN_RESUMED = "run_resumed"
    METRICS_SERVING = "metrics_serving"
    ATTEMPT_STARTED = "attempt_started"
    PHASE_CHANGED = "phase_changed"
    WORKER_EXITED = "worker_exited"
    WORKER_FAILED = "worker_failed"
    COLLATERAL_COUNTED = "collateral_counted"  # collateral failures past the first few, per node
    ROOT_CAUSE_REVISED = "root_cause_revised"
    RESTART_SCHEDULED = "restart_scheduled"
    BACKOFF_STARTED = "backoff_started"
    SCALE_UP_SCHEDULED = "scale_up_scheduled"
    BUDGET_EXHAUSTED = "budget_exhausted"
    RESTART_REFUSED = "restart_refused"
    CRASH_LOOP_DETECTED = "crash_loop_detected"
    STOP_REQUESTED = "stop_requested"
    EXIT_TIMER_STARTED = "exit_timer_started"
    EXIT_HANG_DETECTED = "exit_hang_detected"
    EXIT_HUNG_KILLED = "exit_hung_killed"
    BACKEND_FAILED = "backend_failed"
    WORKERS_STOPPED = "workers_stopped"
    CHECKPOINT_REJECTED = "checkpoint_rejected"
    CHECKPOINTS_UNRECOGNISED = "checkpoints_unrecognised"
    RUN_FINISHED = "run_finished"


@dataclass(frozen=True)
class Record:
    """One event as the core states it; the driver adds run id and wall time."""

    event: EventName
    at: float
    attempt: int
    fields: Mapping[str, Any] = field(default_factory=dict)
