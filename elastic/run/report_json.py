"""The end-of-run report (``report.json``) and its short console summary: a projection of the
journal's fold (:mod:`elastic.core.fold`), as the timeline, ``elastic status`` and the metrics are."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from elastic.core.fold import FailureMark, FoldedAttempt, RunFold
from elastic.core.messages import Outcome

__all__ = ["build_report", "downtime_s", "notice_text", "summary_lines"]

_TRACEBACK_LINES = 10  # of a recorded traceback, under the root cause's error


def _iso(when: datetime) -> str:
    return when.astimezone(timezone.utc).isoformat(timespec="milliseconds")


def _failure(mark: FailureMark | None) -> dict[str, Any] | None:
    if mark is None:
        return None
    failure = mark.to_failure()
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
        "traceback": failure.traceback,
    }


def _notice(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """An attempt's preemption notice as the report states it: source, deadline, what followed."""
    if record is None:
        return None
    deadline_s = record.get("deadline_s")
    at = record.get("time")
    deadline_at = None
    if isinstance(at, str) and isinstance(deadline_s, (int, float)):
        deadline_at = _iso(datetime.fromisoformat(at) + timedelta(seconds=deadline_s))
    return {
        "source": record.get("source"),
        "at": at,
        "deadline_at": deadline_at,
        "deadline_s": deadline_s,
        "deadline_from": record.get("deadline_from"),
        "nodes": list(record.get("nodes") or []),
        "then": record.get("then"),
    }


def notice_text(notice: Mapping[str, Any]) -> str:
    """``preemption notice (signal SIGUSR1; deadline 30.0s later, --grace-period); ended to be requeued``."""
    deadline_s = notice.get("deadline_s")
    until = f"deadline {deadline_s:.1f}s later" if isinstance(deadline_s, (int, float)) else "no deadline"
    if notice.get("deadline_from") == "--grace-period":
        until += ", --grace-period"
    then = "relaunched on the nodes left" if notice.get("then") == "relaunch" else "ended to be requeued"
    return f"preemption notice ({notice.get('source')}; {until}); {then}"


def downtime_s(attempts: Sequence[FoldedAttempt]) -> float:
    """Seconds between each restarted attempt's root cause and the next attempt running."""
    total = 0.0
    for previous, following in zip(attempts, attempts[1:]):
        cause = previous.root_cause
        if cause is not None and following.launched_s is not None:
            total += max(0.0, following.launched_s - cause.at_s)
    return total


def build_report(run: RunFold, *, command: Sequence[str], ended_s: float) -> dict[str, Any]:
    """``report.json`` of a finished run; ``ended_s``: the run's end, seconds since it started."""
    attempts = run.closed(ended_s)
    finished = run.finished or {}
    rows = []
    for attempt in attempts:
        end = attempt.ended_s if attempt.ended_s is not None else ended_s
        rows.append(
            {
                "attempt": attempt.number,
                "started_at": _iso(run.wall(attempt.begun_s)),
                "duration_s": round(end - attempt.begun_s, 6),
                "launch_s": None
                if attempt.launched_s is None
                else round(attempt.launched_s - attempt.begun_s, 6),
                "world_size": attempt.world_size,
                "phase_reached": attempt.phase_reached,
                "restarted": attempt.restarted,
                "resume_step": attempt.resume_step,
                "checkpoint_step": attempt.checkpoint_step,
                "root_cause": _failure(attempt.root_cause),
                "failures": [_failure(f) for f in attempt.effective_failures()],
                # Collateral failures past the first few are counted per node, not listed.
                "collateral": attempt.collateral,
                "collateral_counted": {c.node: c.count for c in attempt.collateral_counted},
                "preemption_notice": _notice(attempt.notice),
            }
        )
    return {
        "run_id": run.run_id,
        "command": list(command),
        "outcome": finished.get("outcome"),
        "exit_status": finished.get("exit_status"),
        "reason": finished.get("reason"),
        "started_at": _iso(run.wall(0.0)),
        "ended_at": _iso(run.wall(ended_s)),
        "duration_s": round(ended_s, 6),
        "restarts": sum(1 for a in attempts if a.restarted),
        "downtime_s": round(downtime_s(attempts), 6),
        "root_cause": _failure(run.run_root_cause(attempts)),
        "attempts": rows,
    }


def summary_lines(report: dict[str, Any], run_dir: str) -> list[str]:
    """A few lines for the console: outcome, each attempt, relaunch latency, where to look."""
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
        notice = row.get("preemption_notice")
        if cause is None and notice:
            lines.append(f"{head}, {notice_text(notice)}")
        elif cause is None:
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
        # The launcher's own latency: ranks' start-up (interpreter, framework) is not in it.
        lines.append(
            f"  relaunch latency: {report['downtime_s']:.2f}s from failure to the next attempt's ranks running"
        )
    cause = report["root_cause"]
    if report["outcome"] == Outcome.FAILED.value and cause is not None:
        lines.append(f"  root cause: {cause['description']}")
        if report["reason"]:
            lines.append(f"  why it stopped: {report['reason']}")
        if cause["message"]:
            lines.append(f"  error: {cause['message']}")
            traceback = (cause.get("traceback") or "").splitlines()[-_TRACEBACK_LINES:]
            if traceback:
                lines.append(f"  last lines of rank {cause['rank']}'s traceback:")
                lines.extend(f"    | {line}" for line in traceback)
        elif cause["log_tail"]:
            lines.append(f"  last lines of rank {cause['rank']}'s log:")
            lines.extend(f"    | {line}" for line in cause["log_tail"])
    lines.append(f"  run directory: {run_dir}")
    return lines
