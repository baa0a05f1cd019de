"""The end-of-run report and its short console summary, built from the core's values."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from elastic.core.controller import AttemptSummary
from elastic.core.failures import Failure
from elastic.core.messages import Outcome

__all__ = ["build_report", "downtime_s", "summary_lines"]


def _iso(wall: float) -> str:
    return datetime.fromtimestamp(wall, tz=timezone.utc).isoformat(timespec="milliseconds")


def _failure(failure: Failure | None) -> dict[str, Any] | None:
    if failure is None:
        return None
    return {
        "kind": failure.kind.value,
        "attempt": failure.attempt,
        "rank": failure.rank,
        "node": failure.node,
        "exit_code": failure.exit_code,
        "signal": failure.signal_name,
        "signal_number": failure.signal,
        "exit_status": failure.exit_status,
        "description": failure.describe(),
        "message": failure.message,
        "log_tail": list(failure.log_tail),
    }


def _phase_reached(attempt: AttemptSummary) -> str:
    if attempt.launched_at is not None:
        return "running"
    return "launching" if attempt.world_size else "pending"


def downtime_s(attempts: Sequence[AttemptSummary]) -> float:
    """Seconds between each restarted attempt's root cause and the next attempt running."""
    total = 0.0
    for previous, following in zip(attempts, attempts[1:]):
        cause = previous.root_cause
        if cause is not None and following.launched_at is not None:
            total += max(0.0, following.launched_at - cause.observed_at)
    return total


def build_report(
    *,
    run_id: str,
    command: Sequence[str],
    outcome: Outcome,
    exit_status: int,
    reason: str,
    root_cause: Failure | None,
    attempts: Sequence[AttemptSummary],
    started_at: float,
    ended_at: float,
    wall_offset_s: float,
) -> dict[str, Any]:
    """``report.json``: monotonic times become wall times through ``wall_offset_s``."""
    rows = []
    for attempt in attempts:
        end = attempt.ended_at if attempt.ended_at is not None else ended_at
        rows.append(
            {
                "attempt": attempt.attempt,
                "started_at": _iso(attempt.started_at + wall_offset_s),
                "duration_s": round(end - attempt.started_at, 6),
                "launch_s": None
                if attempt.launched_at is None
                else round(attempt.launched_at - attempt.started_at, 6),
                "world_size": attempt.world_size,
                "phase_reached": _phase_reached(attempt),
                "restarted": attempt.restarted,
                "resume_step": attempt.resume_step,
                "checkpoint_step": attempt.checkpoint_step,
                "root_cause": _failure(attempt.root_cause),
                "failures": [_failure(f) for f in attempt.failures],
                # Collateral failures past the first few are counted per node, not listed.
                "collateral": attempt.collateral,
                "collateral_counted": dict(attempt.collateral_counted),
            }
        )
    return {
        "run_id": run_id,
        "command": list(command),
        "outcome": outcome.value,
        "exit_status": exit_status,
        "reason": reason,
        "started_at": _iso(started_at + wall_offset_s),
        "ended_at": _iso(ended_at + wall_offset_s),
        "duration_s": round(ended_at - started_at, 6),
        "restarts": sum(1 for a in attempts if a.restarted),
        "downtime_s": round(downtime_s(attempts), 6),
        "root_cause": _failure(root_cause),
        "attempts": rows,
    }


def summary_lines(report: dict[str, Any], run_dir: str) -> list[str]:
    """A few lines for the console: outcome, each attempt, time lost, where to look."""
    attempts = report["attempts"]
    noun = "attempt" if len(attempts) == 1 else "attempts"
    lines = [
        f"elastic: run {report['run_id']} {report['outcome']} after {len(attempts)} {noun} "
        f"in {report['duration_s']:.1f}s (exit status {report['exit_status']})"
    ]
    for row in attempts:
        cause = row["root_cause"]
        head = (
            f"  attempt {row['attempt']}: {row['world_size']} workers, {row['duration_s']:.1f}s, "
            f"reached {row['phase_reached']}"
        )
        if row["checkpoint_step"] is not None:
            head += f", checkpoint step {row['checkpoint_step']}"
        if cause is None:
            lines.append(f"{head}, no failure")
        else:
            then = "restarted" if row["restarted"] else "not restarted"
            lines.append(f"{head}, {cause['description']}; {then}")
        counted = row.get("collateral_counted") or {}
        if counted:
            lines.append(
                f"    {row['collateral']} ranks ended as collateral "
                f"({sum(counted.values())} of them counted per node in report.json, on "
                f"{len(counted)} node{'s' if len(counted) != 1 else ''})"
            )
    last_cause = attempts[-1]["root_cause"] if attempts else None
    if report["outcome"] == Outcome.SUCCEEDED.value and last_cause is not None and report["reason"]:
        lines.append(f"  {report['reason']}")  # e.g. "finished; rank 1 hung at exit and was killed"
    if report["restarts"]:
        lines.append(f"  time lost: {report['downtime_s']:.2f}s from failure to the next attempt running")
    cause = report["root_cause"]
    if report["outcome"] == Outcome.FAILED.value and cause is not None:
        lines.append(f"  root cause: {cause['description']}")
        if report["reason"]:
            lines.append(f"  why it stopped: {report['reason']}")
        if cause["message"]:
            lines.append(f"  error: {cause['message']}")
        elif cause["log_tail"]:
            lines.append(f"  last lines of rank {cause['rank']}'s log:")
            lines.extend(f"    | {line}" for line in cause["log_tail"])
    lines.append(f"  run directory: {run_dir}")
    return lines
