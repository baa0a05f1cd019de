"""What an earlier driver of the same run left behind: a projection of the journal's fold (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from elastic.core.failures import Failure
from elastic.core.exit_codes import ExitCode
from elastic.core.journal.fold import RunFold, fold
from elastic.core.journal.folded import optional_int
from elastic.core.messages import Outcome
from elastic.core.training.init_hang import longest_init_s
from elastic.core.launch.plan import World
from elastic.core.takeover.running import RunningAttempt, left_running

__all__ = ["PriorRun", "continuable", "node_names", "prior_run"]


@dataclass(frozen=True)
class PriorRun:
    """Where a run stood when its driver died: enough to go on counting and deciding."""

    run_id: str
    next_attempt: int
    failure_charges: tuple[float, ...]  # wall-clock times of restarts charged to each budget
    preemption_charges: tuple[float, ...]
    driver_pid: int | None
    finished_outcome: str | None
    truncated_tail: bool
    finished_exit_status: int | None = None  # how it ended, when it did (a stopped run: 128+N)
    # A rerun with the same run id goes on from it (see continuable): its driver died, or it
    # ended stopped or with "requeue me", as a requeued batch job or a rescheduled pod does.
    continuable: bool = True
    no_progress_streak: int = 0  # the crash-loop streak, which is also the backoff level
    interrupted: tuple[int, int | None] | None = None  # (attempt, its resume step) it was running
    interrupted_by_notice: bool = False  # that attempt had a preemption notice: it was ending for it
    interrupted_began_at: float | None = None  # when that attempt began (epoch seconds): its saves are since
    # Its last attempt, when every rank of it exited 0 but the driver died before it recorded the
    # run's end (killed during the success drain): the run is finished, the rerun only records it.
    succeeded_attempt: int | None = None
    last_world: World | None = None  # the world of the last attempt it started
    left_out: tuple[str, ...] = ()  # stragglers' nodes it left out (--on-straggler restart): still out
    # The names it gave its nodes, by the backend's own id (Ray's node id): they keep them.
    node_names: Mapping[str, str] = field(default_factory=dict)
    # Its last attempt's root cause, which the next attempt's may repeat (elastic.core.diagnosis.repeats).
    last_cause: Failure | None = None
    # The interrupted attempt's highest step its ranks were seen at, and when (ISO time): read by
    # the shell at the takeover from the dead driver's state.json and the ranks' logs, which go
    # on after the journal's last step_reached (journaled at most once a minute); None: none.
    last_step_seen: tuple[int, str] | None = None
    # The longest distributed initialisation its attempts' start-up profiles hold (--init-timeout auto).
    longest_init_s: float | None = None
    # The interrupted attempt when it was simply running (elastic.core.takeover.running): kept ranks
    # of it may be adopted; None: it ends with its driver.
    running: RunningAttempt | None = None
    # Its own run_started record: what it was asked to run (a rerun asking for another job adopts nothing).
    started_with: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # The fold itself: the new driver folds its own records on, so its report and metrics
    # cover the whole run.
    fold: RunFold = field(default_factory=RunFold, compare=False, repr=False)


def prior_run(events: Sequence[Mapping[str, Any]], *, truncated_tail: bool = False) -> PriorRun:
    """The fold of a journal, read for a driver that takes the run over."""
    run = fold(events, strict_times=False)  # a driver must take over even a damaged journal
    interrupted = run.interrupted()
    started = run.last_started
    return PriorRun(
        run_id="" if run.run_id == "?" else run.run_id,
        next_attempt=run.next_attempt,
        failure_charges=tuple(run.charges["failures"]),
        preemption_charges=tuple(run.charges["preemptions"]),
        driver_pid=run.driver_pid,
        finished_outcome=run.outcome,
        truncated_tail=truncated_tail,
        finished_exit_status=optional_int((run.finished or {}).get("exit_status")),
        continuable=continuable(run.finished),
        no_progress_streak=run.no_progress_streak,
        interrupted=None if interrupted is None else (interrupted.number, interrupted.resume_step),
        started_with=next((dict(e) for e in reversed(events) if e.get("event") == "run_started"), {}),
        running=left_running(interrupted, None if interrupted is None or interrupted.launched_s is None
                             or run.origin is None else run.wall(interrupted.launched_s).timestamp()),
        interrupted_by_notice=interrupted is not None and interrupted.notice is not None,
        interrupted_began_at=None if interrupted is None or run.origin is None else run.wall(interrupted.begun_s).timestamp(),
        succeeded_attempt=_succeeded_attempt(run),
        last_world=None if started is None else World(
            tuple(str(n) for n in started.get("nodes") or ()),
            int(started.get("world_size") or 0),
        ),
        left_out=tuple(
            str(s["node"]) for a in run.attempts.values() for s in a.stragglers if s.get("action") == "restart"
        ) + tuple(str(e["node"]) for e in run.excluded_nodes),
        last_cause=_last_cause(run),
        node_names=node_names(run),
        longest_init_s=longest_init_s(
            (a.startup_profiled or {}).get("by_rank") for a in run.attempts.values()
        ),
        fold=run,
    )


def node_names(run: RunFold) -> dict[str, str]:
    """Backend id -> name of every node an attempt of the run started on, from the plans'
    ``node_ids`` (name -> backend id); empty for a backend whose ids are the names."""
    names: dict[str, str] = {}
    for attempt in run.attempts.values():
        ids = (attempt.started or {}).get("node_ids")
        if isinstance(ids, Mapping):
            names.update({str(backend_id): str(name) for name, backend_id in ids.items()})
    return names


def _succeeded_attempt(run: RunFold) -> int | None:
    """The last attempt that started, if the run has no end recorded and every rank of it exited 0."""
    if run.finished is not None or run.last_started is None:
        return None
    number = int(run.last_started.get("attempt", 0))
    return number if run.attempts[number].ended_in_success else None


def _last_cause(run: RunFold) -> Failure | None:
    """The root cause of the last attempt that started, if it had one."""
    if run.last_started is None:
        return None
    cause = run.attempts[int(run.last_started.get("attempt", 0))].root_cause
    return None if cause is None else cause.to_failure()


def continuable(finished: Mapping[str, Any] | None) -> bool:
    """Whether a run that ended with ``finished`` (its ``run_finished`` record; ``None``: it never
    ended, its driver died) may be continued by a rerun with the same run id.

    A run stopped from outside (the launcher got SIGTERM, SIGINT or SIGHUP: a scheduler's
    preemption or requeue, a pod's eviction, a Ctrl-C; or a preemption notice ended it) and one
    that ended with 75, "requeue me" (too few nodes, Ray lost), are paused: the same job started
    again goes on with its attempts, budgets and checkpoint. Succeeded and failed runs are final.
    A run whose driver died after every rank exited 0 is continued only to record its success
    (:attr:`PriorRun.succeeded_attempt`): nothing trains again.
    """
    if finished is None:
        return True
    return finished.get("outcome") == Outcome.STOPPED.value or finished.get("exit_status") == int(
        ExitCode.NODES_UNAVAILABLE
    )
