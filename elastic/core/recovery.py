"""What an earlier driver of the same run left behind, read from its journal (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["PriorRun", "prior_run"]


@dataclass(frozen=True)
class PriorRun:
    """Where a run stood when its driver died: enough to continue counting."""

    run_id: str
    next_attempt: int
    failure_charges: tuple[float, ...]  # wall-clock times of restarts charged to each budget
    preemption_charges: tuple[float, ...]
    driver_pid: int | None
    finished_outcome: str | None
    truncated_tail: bool


def _wall(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["time"])).timestamp()


def prior_run(events: Sequence[dict[str, Any]], *, truncated_tail: bool = False) -> PriorRun:
    """Replay a journal: the next attempt number, budget charges, and whether it ended."""
    run_id = ""
    next_attempt = 0
    charges: dict[str, list[float]] = {"failures": [], "preemptions": []}
    driver_pid: int | None = None
    finished: str | None = None
    for event in events:
        name = event.get("event")
        if name == "run_started":
            run_id = str(event.get("run_id", run_id))
            driver_pid = event.get("pid")
        elif name == "attempt_started":
            next_attempt = max(next_attempt, int(event["attempt"]) + 1)
        elif name == "restart_scheduled" and event.get("budget") in charges:
            charges[event["budget"]].append(_wall(event))
        elif name == "root_cause_revised" and charges.get(event.get("refunded") or "", []):
            charges[event["refunded"]].pop()
        elif name == "run_finished":
            finished = str(event.get("outcome"))
    return PriorRun(
        run_id=run_id,
        next_attempt=next_attempt,
        failure_charges=tuple(charges["failures"]),
        preemption_charges=tuple(charges["preemptions"]),
        driver_pid=driver_pid,
        finished_outcome=finished,
        truncated_tail=truncated_tail,
    )
