"""The closed vocabulary of run events: past-tense facts shared by journal and logs.

Every structlog event in ``elastic`` is a member of :class:`EventName` (journaled,
and logged as the driver journals it) or of :class:`LogEvent` (logged only: the
launcher's housekeeping, which no fold of the journal needs). A unit test reads
every logging call in the package and refuses any other first argument.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EventName", "LogEvent", "Record"]


class EventName(enum.Enum):
    RUN_STARTED = "run_started"
    RUN_RESUMED = "run_resumed"
    LEFTOVERS_STOPPED = "leftovers_stopped"  # taking a run over: the dead driver's embedded Ray, stopped by pid
    METRICS_SERVING = "metrics_serving"
    ATTEMPT_STARTED = "attempt_started"
    # A dead driver's attempt taken over with its ranks running (generation, world_size, nodes, exits_kept)
    ATTEMPT_ADOPTED = "attempt_adopted"
    PHASE_CHANGED = "phase_changed"
    SIGN_OF_LIFE_SEEN = "sign_of_life_seen"  # an attempt's first output line or heartbeat, any rank
    FIRST_STEP_SEEN = "first_step_seen"  # an attempt's first training step, any rank (rank, step, source, seen_s_ago, read_to_step)
    # An attempt's start-up by phase (elastic.core.training.startup): once, when every rank showed a
    # step, else at its end; the median of each phase, the slowest rank, each rank's (the first few).
    STARTUP_PROFILED = "startup_profiled"
    STEP_REACHED = "step_reached"  # the attempt's highest step so far (step, rank, seen_s_ago): at most every 60 s
    RANKS_STARTED = "ranks_started"  # with --prewarm: the attempt's ranks that started warm, and cold
    # --spares: a node's warm spares started (node, pids; or error), once every rank there ran in place
    SPARES_STARTED = "spares_started"
    # --spares: a spare or the in-place store's host ended while its attempt ran (node, role, pid, exit_code)
    HELPER_ENDED = "helper_ended"
    # --spares: the attempt's world re-formed in place as the next one (generation, lost, survivors
    # [old, new], joiners, identical); the next attempt's ranks are its survivors and spares
    WORLD_REFORMED = "world_reformed"
    # --spares: a failure that could not be repaired in place (reason): the run restarts as without
    INPLACE_FELL_BACK = "inplace_fell_back"
    RANK_PIDS = "rank_pids"  # each rank's pid on its node (pids: rank -> pid), once the attempt launched
    STRAGGLER_SEEN = "straggler_seen"  # a rank slower than its peers (rank, node, ratio, action), once per attempt
    WORKER_EXITED = "worker_exited"
    WORKER_FAILED = "worker_failed"
    COLLATERAL_COUNTED = "collateral_counted"  # collateral failures past the first few, per node
    ROOT_CAUSE_REVISED = "root_cause_revised"
    PREFLIGHT_RAN = "preflight_ran"  # --preflight on each node of the planned attempt (results: node, passed, output...)
    NODE_EXCLUDED = "node_excluded"  # a suspected node: the next attempts run without it (node, reason)
    NODE_KEPT = "node_kept"  # a suspected node kept: too few nodes without it (node, reason)
    RESTART_SCHEDULED = "restart_scheduled"
    BACKOFF_STARTED = "backoff_started"
    SCALE_UP_SCHEDULED = "scale_up_scheduled"
    BUDGET_EXHAUSTED = "budget_exhausted"
    RESTART_REFUSED = "restart_refused"
    CRASH_LOOP_DETECTED = "crash_loop_detected"
    STOP_REQUESTED = "stop_requested"
    PREEMPTION_NOTICED = "preemption_noticed"
    EXIT_TIMER_STARTED = "exit_timer_started"
    EXIT_HANG_DETECTED = "exit_hang_detected"
    EXIT_HANG_SPARED = "exit_hang_spared"  # ranks still running after --exit-timeout but not silent: left running
    EXIT_HUNG_KILLED = "exit_hung_killed"
    BACKEND_FAILED = "backend_failed"
    WORKERS_STOPPED = "workers_stopped"
    CHECKPOINT_REJECTED = "checkpoint_rejected"
    CHECKPOINTS_UNRECOGNISED = "checkpoints_unrecognised"
    COMPILE_CACHE_REPLACED = "compile_cache_replaced"  # a rank's program compiled into another cache than elastic's, once a run
    RUN_FINISHED = "run_finished"


class LogEvent(enum.Enum):
    """Events that are logged but never journaled."""

    # the driver
    SCALE_CHECK_FAILED = "scale_check_failed"
    CHECKPOINT_SCAN_FAILED = "checkpoint_scan_failed"
    RUN_FILE_WRITE_FAILED = "run_file_write_failed"
    TEARDOWN_FAILED = "teardown_failed"
    PREWARM_NOT_APPLIED = "prewarm_not_applied"  # --prewarm given for a command it cannot serve
    RANKS_AWAITED = "ranks_awaited"  # ranks still running a while after a peer's exit 0 (--exit-timeout)
    # the Ray backend: connecting
    RAY_AUTH_MODE_OVERRIDDEN = "ray_auth_mode_overridden"
    CLUSTER_AUTH_PROBE_FAILED = "cluster_auth_probe_failed"
    UNAUTHENTICATED_CLUSTER_JOINED = "unauthenticated_cluster_joined"
    STALE_RAY_CLUSTER_RECORD_IGNORED = "stale_ray_cluster_record_ignored"  # /tmp/ray/ray_current_cluster of a dead head
    # the Ray backend: nodes and agents
    NODES_AWAITED = "nodes_awaited"
    CLUSTER_READ_FAILED = "cluster_read_failed"
    AGENT_STARTED = "agent_started"
    AGENT_LOST = "agent_lost"
    AGENT_FAILED = "agent_failed"
    NODE_LOST = "node_lost"
    STOP_FAILED = "stop_failed"
    EXIT_HANG_KILL_FAILED = "exit_hang_kill_failed"
    SILENCE_NOT_MEASURED = "silence_not_measured"  # an agent did not say how long its ranks were silent
    NOTICE_NOT_DELIVERED = "notice_not_delivered"
    DRAIN_WATCH_FAILED = "drain_watch_failed"
    RPC_RETRIED = "rpc_retried"
    CONSOLE_LINES_DROPPED = "console_lines_dropped"
    EVENT_PUMP_FAILED = "event_pump_failed"
    TEARDOWN_ERROR_IGNORED = "teardown_error_ignored"


@dataclass(frozen=True)
class Record:
    """One event as the core states it; the driver adds run id and wall time."""

    event: EventName
    at: float
    attempt: int
    fields: Mapping[str, Any] = field(default_factory=dict)
