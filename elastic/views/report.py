"""The end-of-run report (``report.json``) and its short console summary: a projection of the
journal's fold (:mod:`elastic.core.journal.fold`), as the timeline, ``elastic status`` and the metrics are."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from elastic.core.exit_codes import ExitCode
from elastic.core.journal.fold import FailureMark, FoldedAttempt, RunFold
from elastic.core.journal.ledger import CAUSE_WORDS, Ledger, run_ledger, startup_breakdown
from elastic.core.labels import node_label, plural, rank_list, without_own_prefix
from elastic.core.messages import Outcome
from elastic.core.training.stragglers import straggler_text

__all__ = [
    "after_exit_0_text",
    "build_report",
    "downtime_s",
    "ledger_lines",
    "notice_text",
    "sign_of_life_s",
    "startup_line",
    "still_running_after_exit_0",
    "summary_lines",
    "symptoms_of",
    "symptoms_text",
]

_REQUEUE = int(ExitCode.NODES_UNAVAILABLE)  # "requeue me": a rerun with the same run id continues
_TRACEBACK_LINES = 10  # of a recorded traceback, under the root cause's error
_NO_LEDGER = Ledger({})


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
        "step": failure.step,  # the rank's last training step seen when it failed (None: none seen)
        # Its signature (elastic.core.diagnosis.signatures): {"signature", "class", "line"}, or None.
        "diagnosis": None if failure.diagnosis is None else failure.diagnosis.fields(),
    }


def symptoms_of(attempt: FoldedAttempt) -> list[dict[str, Any]]:
    """The attempt's failures whose signature is a symptom, but its root cause, counted by signature."""
    cause = attempt.root_cause
    ranks: dict[str, list[int]] = {}
    for failure in attempt.effective_failures():
        diagnosis = failure.diagnosis
        if diagnosis is None or diagnosis.failure_class.value != "symptom" or failure == cause:
            continue
        ranks.setdefault(diagnosis.signature, []).append(failure.rank if failure.rank is not None else -1)
    return [{"signature": s, "count": len(r), "ranks": sorted(r)} for s, r in ranks.items()]


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


def symptoms_text(symptoms: Sequence[Mapping[str, Any]]) -> str | None:
    """``2 ranks then failed as symptoms: nccl-timeout (ranks 0, 2)``: an attempt's symptoms
    (:func:`symptoms_of`) in one line to print under its root cause; ``None`` when there were none."""
    if not symptoms:
        return None
    several = len(symptoms) > 1
    parts = [f"{s['signature']} ({str(s['count']) + ': ' if several else ''}{rank_list(s['ranks'])})"
             for s in symptoms]
    total = sum(int(s["count"]) for s in symptoms)
    return f"{plural(total, 'rank')} then failed as symptoms: {', '.join(parts)}"


def notice_text(notice: Mapping[str, Any]) -> str:
    """``preemption notice (signal SIGUSR1; deadline 30.0s later, --grace-period); ended to be requeued``."""
    deadline_s = notice.get("deadline_s")
    until = f"deadline {deadline_s:.1f}s later" if isinstance(deadline_s, (int, float)) else "no deadline"
    if notice.get("deadline_from") == "--grace-period":
        until += ", --grace-period"
    then = "relaunched on the nodes left" if notice.get("then") == "relaunch" else "ended to be requeued"
    return f"preemption notice ({notice.get('source')}; {until}); {then}"


def downtime_s(attempts: Sequence[FoldedAttempt]) -> float:
    """Seconds between each restarted attempt's root cause and the next attempt running, less
    the backoff between (the wait the policy chose, shown apart): the launcher's own part."""
    total = 0.0
    for previous, following in zip(attempts, attempts[1:]):
        cause = previous.root_cause
        if cause is not None and following.launched_s is not None:
            total += max(0.0, following.launched_s - cause.at_s - following.backoff_s)
    return total


def sign_of_life_s(attempts: Sequence[FoldedAttempt]) -> float | None:
    """Seconds between each restarted attempt's root cause and the next attempt's first sign
    of life (output or heartbeat), less the backoff between, summed; None when no restarted
    attempt showed one."""
    spans = [f.sign_of_life_after(p) for p, f in zip(attempts, attempts[1:])]
    shown = [s for s in spans if s is not None]
    return sum(shown) if shown else None


def _sign_of_life(attempt: FoldedAttempt, previous: FoldedAttempt | None) -> dict[str, Any] | None:
    seen = attempt.sign_of_life
    if seen is None or attempt.sign_of_life_s is None:
        return None
    after_failure = None if previous is None else attempt.sign_of_life_after(previous)
    return {
        "rank": seen.get("rank"),
        "node": seen.get("node"),
        "source": seen.get("source"),
        "after_start_s": round(attempt.sign_of_life_s - attempt.begun_s, 6),
        "after_launch_s": None
        if attempt.launched_s is None
        else round(attempt.sign_of_life_s - attempt.launched_s, 6),
        "after_failure_s": None if after_failure is None else round(after_failure, 6),
    }


def _first_step(attempt: FoldedAttempt) -> dict[str, Any] | None:
    seen = attempt.first_step
    if seen is None or attempt.first_step_s is None:
        return None
    return {"step": seen.get("step"), "rank": seen.get("rank"), "source": seen.get("source")}


def _steps(run: RunFold, attempt: FoldedAttempt) -> dict[str, Any]:
    """Its first training step (which, who, when) and the highest step journaled."""
    reached = attempt.step_reached
    at_s = attempt.first_step_s
    return {
        "first_step": _first_step(attempt),
        "first_step_at": None if at_s is None else _iso(run.wall(at_s)),
        "first_step_s": None if at_s is None else round(at_s - attempt.begun_s, 6),
        "step_reached": None if reached is None else {"step": reached.get("step"), "rank": reached.get("rank")},
    }


def _started_warm(attempt: FoldedAttempt) -> dict[str, Any] | None:
    """Which ranks started in a warm interpreter and which cold, and the memory the warm ones held
    when handed their ranks (with ``--prewarm``, or when any started warm; else None)."""
    started = attempt.ranks_started
    if started is None:
        return None
    held = started.get("warm_resident_mb")
    return {
        "warm": [r for r in started.get("warm") or () if isinstance(r, int)],
        "cold": [r for r in started.get("cold") or () if isinstance(r, int)],
        "warm_resident_mb": held if isinstance(held, (int, float)) and not isinstance(held, bool) else None,
    }


def _straggler(run: RunFold, record: Mapping[str, Any]) -> dict[str, Any]:
    at_s = record.get("at_s")
    return {
        **{k: record.get(k) for k in _STRAGGLER_KEYS},
        "at": None if not isinstance(at_s, (int, float)) else _iso(run.wall(at_s)),
        "description": straggler_text(record),
    }


def still_running_after_exit_0(attempt: FoldedAttempt) -> dict[str, Any] | None:
    """Ranks still running when the attempt's drain (a stop, a notice) began after a peer's
    exit 0: which, after whose exit 0, how long after it, and in words."""
    running = attempt.running_after_exit_0()
    if running is None:
        return None
    ranks, peer, seconds = running
    why = f" ({attempt.drain_reason})" if attempt.drain_reason else ""
    return {
        "ranks": ranks,
        "after_rank": peer,
        "seconds": round(seconds, 3),
        "description": f"{rank_list(ranks)} still running {seconds:.1f} s after rank {peer} exited 0{why}",
    }


_STRAGGLER_KEYS = ("rank", "node", "step", "step_time_s", "median_s", "ratio", "source", "action", "reason")


def build_report(run: RunFold, *, command: Sequence[str], ended_s: float) -> dict[str, Any]:
    """``report.json`` of a finished run; ``ended_s``: the run's end, seconds since it started."""
    attempts = run.closed(ended_s)
    finished = run.finished or {}
    ledger = run_ledger(run, ended_s)
    rows = []
    for previous, attempt in zip([None, *attempts], attempts):
        end = attempt.ended_s if attempt.ended_s is not None else ended_s
        waited_s = min(attempt.waited_s, end - attempt.begun_s)
        rows.append(
            {
                "attempt": attempt.number,
                "started_at": _iso(run.wall(attempt.begun_s)),
                # The time its ranks ran: from its launch to the last rank reaped. The wait before
                # the launch (the backoff, and pending for nodes) is apart: waited_s, backoff_s of it.
                "duration_s": round(max(0.0, end - attempt.begun_s - waited_s), 6),
                "waited_s": round(waited_s, 6),
                "backoff_s": round(attempt.backoff_s, 6),
                "launch_s": None
                if attempt.launched_s is None
                else round(attempt.launched_s - attempt.begun_s, 6),
                "world_size": attempt.world_size,
                "phase_reached": attempt.phase_reached,
                "restarted": attempt.restarted,
                "reformed_in_place": attempt.reformed_as is not None,
                "resume_step": attempt.resume_step,
                "checkpoint_step": attempt.checkpoint_step,
                # Its first output line or heartbeat (any rank), after its start, launch and
                # the root cause of the attempt before it.
                "first_sign_of_life": _sign_of_life(attempt, previous),
                # Its first training step (first_step_s: seconds from its start) and the step reached.
                **_steps(run, attempt),
                # The ranks handed to a warm interpreter (--prewarm, --prewarm-memory), those started
                # cold, and the memory the warm ones held when handed their ranks.
                "ranks_started": _started_warm(attempt),
                "root_cause": _failure(attempt.root_cause),
                # A rank that had exited 0 while its peers ran, before the root cause: who, how long before.
                "after_exit_0": _after_exit_0(attempt),
                "failures": [_failure(f) for f in attempt.effective_failures()],
                # Ranks that crashed on their way out, their work done, taken as finished, and why.
                "finished_in_teardown": [{"rank": rank, "why": why}
                                         for rank, why in sorted(attempt.finished_in_teardown.items())],
                # Failures that were consequences of another's, by their symptom signature (nccl-timeout...).
                "symptoms": symptoms_of(attempt),
                # Collateral failures past the first few are counted per node, not listed.
                "collateral": attempt.collateral,
                "collateral_counted": {c.node: c.count for c in attempt.collateral_counted},
                # The drain's grace (which option, why) and the ranks SIGKILLed when it ran out.
                "drain_grace": dict(attempt.drain_grace) if attempt.drain_grace else None,
                "killed_at_grace": {
                    "count": attempt.killed_at_grace_count,
                    "ranks": [dict(k) for k in attempt.killed_at_grace],
                    "description": attempt.grace_kill_lines(),
                },
                "preemption_notice": _notice(attempt.notice),
                # --exit-timeout: ranks left running because they still showed signs of life (the
                # latest check's words), and ranks still running after a peer's exit 0 when the drain began.
                "exit_hang_spared": None if attempt.exit_spared is None else attempt.exit_spared.get("reason"),
                "still_running_after_exit_0": still_running_after_exit_0(attempt),
                # Ranks killed as hung at exit: judged finished or not, on which evidence, why.
                "exit_hung": [{"rank": rank, **judged} for rank, judged in attempt.exit_judged_by_rank()],
                "exit_hung_description": attempt.exit_judged_lines(),
                # Restarted after a checkpoint that holds the last step it reached: it may train the end again.
                "rerun_warning": attempt.rerun_warning,
                # Its driver died while it ran: how far it trained at least (the step, the steps, on
                # which evidence) and in words; None when its driver did not die.
                "driver_died": _driver_died(attempt),
                # Ranks slower than their peers (elastic.core.training.stragglers), and what followed.
                "stragglers": [_straggler(run, s) for s in attempt.stragglers],
                # Its seconds by cause (the goodput ledger, elastic.core.journal.ledger).
                "ledger": (ledger.of(attempt.number) or _NO_LEDGER).to_dict(),
                # Where its start-up went, by phase (seconds, the median over its ranks, each measured
                # from its spawn request to its first step), its slowest rank, each of the first ranks.
                "startup_breakdown": _startup(attempt),
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
        "sign_of_life_s": None if (life := sign_of_life_s(attempts)) is None else round(life, 6),
        "root_cause": _failure(run.run_root_cause(attempts)),
        # The run's seconds by cause; they add up to duration_s.
        "ledger": ledger.run.to_dict(),
        # A rank's program that compiled into another cache than the one elastic handed over
        # (--cache-dir): the first seen, with what set it and how to use elastic's.
        "compile_cache_replaced": _cache_replaced(run.cache_replaced),
        # Nodes left out of later attempts (elastic.core.diagnosis.nodes): {"node", "reason", "attempt"}.
        "excluded_nodes": run.excluded_nodes,
        # Nodes suspected but kept, too few being left without them: {"node", "reason", "attempt"}.
        "kept_nodes": [{"node": e.get("node"), "reason": e.get("reason"), "attempt": e.get("attempt")}
                       for e in run.node_verdicts if e.get("event") == "node_kept"],
        "attempts": rows,
    }


def _after_exit_0(attempt: FoldedAttempt) -> dict[str, Any] | None:
    found = attempt.failed_after_exit_0()
    if found is None:
        return None
    rank, seconds = found
    return {"rank": rank, "seconds": round(seconds, 3), "description": after_exit_0_text(rank, seconds)}


def after_exit_0_text(rank: int, seconds: float) -> str:
    """``after rank 0 had exited 0 (0.4 s before)``: a peer gone before the failure it may have caused."""
    before = f"{seconds * 1000:.0f} ms" if seconds < 0.1 else f"{seconds:.1f} s"
    return f"after rank {rank} had exited 0 ({before} before)"


def _driver_died(attempt: FoldedAttempt) -> dict[str, Any] | None:
    death = attempt.driver_death
    if death is None:
        return None
    return {"step": death.step, "steps": death.steps, "at_least": True, "source": death.source,
            "description": death.describe()}


def _startup(attempt: FoldedAttempt) -> dict[str, Any] | None:
    found = startup_breakdown(attempt)
    if found is None:
        return None
    by_rank = (attempt.startup_profiled or {}).get("by_rank")
    return {
        **found.to_dict(),
        "total_s": round(found.total_s, 6),
        "by_rank": dict(by_rank) if isinstance(by_rank, Mapping) else {},
        "description": found.describe(),
    }


def startup_line(row: Mapping[str, Any]) -> str | None:
    """``start-up to the first step 4.2s: spawn 0.05s, imports 2.1s, ...``: an attempt's phases (the
    medians over its ranks), and its slowest rank when it has more than one; None if not measured."""
    found = row.get("startup_breakdown")
    if not found:
        return None
    line = f"start-up to the first step {found['total_s']:.1f}s: {found['description']}"
    if (found.get("ranks") or 0) > 1:
        line += f" (median of {found['ranks']} ranks; slowest rank {found['slowest_rank']}, {found['slowest_s']:.1f}s)"
    return line


def _cache_replaced(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if record is None:
        return None
    keys = ("attempt", "rank", "framework", "cache_dir", "handed", "reason")
    return {key: record.get(key) for key in keys}


def ledger_lines(ledger: Mapping[str, float] | None, *, indent: str = "") -> list[str]:
    """``where the time went: productive training 61.0s (80%), ...``: the causes with time, largest first."""
    if not ledger:
        return []
    total = sum(ledger.values())
    shown = sorted(((c, s) for c, s in ledger.items() if s >= 0.05 or (s > 0 and c == "productive")),
                   key=lambda cs: -cs[1])
    if total <= 0 or not shown:
        return []
    parts = [f"{CAUSE_WORDS.get(c, c)} {s:.1f}s ({_share(s / total)})" for c, s in shown]
    return [f"{indent}where the time went: {', '.join(parts)}"]  # one line: a terminal wraps it, we do not


def _share(fraction: float) -> str:
    """``80%``; ``<1%`` for a cause shown (0.05 s or more) that rounds to nothing."""
    return "<1%" if fraction < 0.005 else f"{fraction:.0%}"


def _waited(row: Mapping[str, Any]) -> str:
    """``waited 60.0s (backoff), ``: an attempt's wait before its launch, when there was one."""
    waited, backoff = row.get("waited_s") or 0.0, row.get("backoff_s") or 0.0
    if waited < 0.05:
        return ""
    if backoff < 0.05:
        return f"waited {waited:.1f}s (for nodes), "
    if waited - backoff < 0.05:
        return f"waited {waited:.1f}s (backoff), "
    return f"waited {waited:.1f}s ({backoff:.1f}s backoff), "


# Kinds whose description already holds the failure's message (the launcher wrote it: a hang's
# silence, an exit hang's wait and frame): the summary's ``error:`` line would say it again.
_MESSAGE_DESCRIBED = frozenset({"hung", "exit-hung", "preempted", "node-lost", "launch-failed"})


def _said_below(report: Mapping[str, Any], row: Mapping[str, Any]) -> bool:
    """Whether the summary's ``root cause:`` line gives this attempt's root cause in full."""
    cause = report["root_cause"]
    return (report["outcome"] == Outcome.FAILED.value and cause is not None
            and cause.get("attempt") == row["attempt"] and cause.get("rank") == (row["root_cause"] or {}).get("rank"))


def _brief(cause: Mapping[str, Any]) -> str:
    """An attempt's root cause when the ``root cause:`` line gives it in full: a hang at exit as
    ``rank 1 on vm hung at exit`` (its sentence, stacks and frame said once, there)."""
    if cause.get("kind") != "exit-hung":
        return str(cause["description"])
    node = _exit_hung_head(cause).rpartition("(exit-hung on ")[2].rstrip(")")
    return f"rank {cause['rank']} on {node} hung at exit"


def _without_note(cause: Mapping[str, Any]) -> str:
    """An attempt's root cause on its line: a hang at exit without where its stacks went and its
    frame (the attempt's ``rank 1 hung at exit, ...`` line below gives the frame)."""
    return _exit_hung_head(cause) if cause.get("kind") == "exit-hung" else str(cause["description"])


def _exit_hung_head(cause: Mapping[str, Any]) -> str:
    """``rank 1 still running 300 s after ... (exit-hung on vm)``: the description
    (:func:`elastic.core.failures.describe_exit_hung`) up to its note."""
    head, note, _ = str(cause["description"]).partition("; ")
    return f"{head})" if note else head


def _after_cause(reason: str, description: str) -> str:
    """Why the run stopped, without the root cause the line above gave (the run's reason opens
    with it: ``rank 1 on vm exited (exit code 1); failures budget exhausted``)."""
    rest = reason.removeprefix(f"{description}; ")
    return rest or reason


def summary_lines(report: dict[str, Any], run_dir: str) -> list[str]:
    """A few lines for the console: outcome, each attempt, relaunch latency, where to look."""
    attempts = report["attempts"]
    lines = [
        f"elastic: run {report['run_id']} {report['outcome']} after {plural(len(attempts), 'attempt')} "
        f"in {report['duration_s']:.1f}s (exit status {report['exit_status']})"
    ]
    for row in attempts:
        cause = row["root_cause"]
        head = (
            f"  attempt {row['attempt']}: {plural(row['world_size'], 'worker')}, {_waited(row)}"
            f"ran {row['duration_s']:.1f}s, reached {row['phase_reached']}"
        )
        if row["checkpoint_step"] is not None:
            head += f", checkpoint step {row['checkpoint_step']}"
        notice = row.get("preemption_notice")
        running = row.get("still_running_after_exit_0")
        if cause is None and notice:
            lines.append(f"{head}, {notice_text(notice)}")
        elif cause is None and running:
            lines.append(f"{head}, {running['description']}")
        elif cause is None and row.get("driver_died"):
            lines.append(f"{head}, {row['driver_died']['description']}")
        elif cause is None and row["phase_reached"] == "pending":
            lines.append(f"{head}, not launched")
        elif cause is None:
            lines.append(f"{head}, no failure")
        else:
            then = "repaired in place" if row.get("reformed_in_place") else "restarted" if row["restarted"] else "not restarted"
            signature = f" [{cause['diagnosis']['signature']}]" if cause.get("diagnosis") else ""
            early = f", {row['after_exit_0']['description']}" if row.get("after_exit_0") else ""
            said = _brief(cause) if _said_below(report, row) else _without_note(cause)
            lines.append(f"{head}, {said}{signature}{early}; {then}")
        for ended in row.get("finished_in_teardown") or ():
            lines.append(f"    rank {ended['rank']} finished: {ended['why']}")
        symptoms = symptoms_text(row.get("symptoms") or ())
        if symptoms:
            lines.append(f"    {symptoms}")
        if row.get("exit_hang_spared"):
            lines.append(f"    left running (--exit-timeout): {row['exit_hang_spared']}")
        if row.get("restarted"):  # a success's reason already says why its hung ranks finished
            lines.extend(f"    {line}" for line in row.get("exit_hung_description") or ())
        if row.get("rerun_warning"):
            lines.append(f"    warning: {row['rerun_warning']}")
        killed = row.get("killed_at_grace") or {}
        lines.extend(f"    {line}" for line in killed.get("description") or ())
        lines.extend(f"    straggler: {s['description']}" for s in row.get("stragglers") or ())
        counted = row.get("collateral_counted") or {}
        if counted:
            lines.append(
                f"    {plural(row['collateral'], 'rank')} ended as collateral "
                f"({sum(counted.values())} of them counted per node in report.json, on "
                f"{plural(len(counted), 'node')})"
            )
        startup = startup_line(row)  # after what the attempt's failure says, which reads on from its line
        if startup:
            lines.append(f"    {startup}")
    last_cause = attempts[-1]["root_cause"] if attempts else None
    if report["outcome"] == Outcome.SUCCEEDED.value and last_cause is not None and report["reason"]:
        lines.append(f"  {report['reason']}")  # e.g. "finished; rank 1 hung at exit and was killed"
    if report["restarts"]:
        # The launcher's own latency: ranks' start-up (interpreter, framework) is not in it, nor
        # the backoff the policy chose.
        line = f"  relaunch latency: {report['downtime_s']:.2f}s from failure to the next attempt's ranks running"
        if report.get("sign_of_life_s") is not None:  # the ranks' start-up included
            line += f"; {report['sign_of_life_s']:.2f}s to their first output or heartbeat"
        backoff = (report.get("ledger") or {}).get("backoff") or 0.0
        if backoff >= 0.05:
            line += f" (backoff apart: {backoff:.1f}s)"
        lines.append(line)
    lines.extend(ledger_lines(report.get("ledger"), indent="  "))
    for excluded in report.get("excluded_nodes") or ():
        lines.append(f"  node {node_label(str(excluded['node']))} excluded after attempt {excluded['attempt']}: "
                     f"{excluded['reason']}")
        lines.extend(f"    | {line}" for line in excluded.get("output") or ())  # its --preflight's last lines
    for kept in report.get("kept_nodes") or ():
        lines.append(f"  node {node_label(str(kept['node']))} suspected in attempt {kept['attempt']}: {kept['reason']}")
    replaced = report.get("compile_cache_replaced")
    if replaced:
        lines.append(f"  compilation cache of rank {replaced['rank']}: {replaced['reason']}")
    cause = report["root_cause"]
    if report["outcome"] == Outcome.FAILED.value and cause is not None:
        its = [row for row in attempts if row["attempt"] == cause["attempt"]]
        peer_gone = (its[0].get("after_exit_0") or {}) if its else {}
        lines.append(f"  root cause: {cause['description']}"
                     + (f", {peer_gone['description']}" if peer_gone.get("description") else ""))
        symptoms = symptoms_text(its[0].get("symptoms") or ()) if its else None
        if symptoms:
            lines.append(f"    {symptoms}")
        diagnosis = cause.get("diagnosis")
        if diagnosis:
            lines.append(f"  signature: {diagnosis['signature']} ({diagnosis['class']}): {diagnosis['line']}")
            if diagnosis.get("hint"):
                lines.append(f"  hint: {diagnosis['hint']}")
            if diagnosis["class"] == "symptom":
                lines.append("  a symptom: the rank it waited for is not known (no other rank's failure, nor a rank "
                             "silent below the others' steps, explained it)")
        if report["reason"]:
            lines.append(f"  why it stopped: {_after_cause(report['reason'], cause['description'])}")
        if cause["message"] and cause["kind"] not in _MESSAGE_DESCRIBED:
            lines.append(f"  error: {cause['message']}")
            traceback = (cause.get("traceback") or "").splitlines()[-_TRACEBACK_LINES:]
            if traceback:
                lines.append(f"  last lines of rank {cause['rank']}'s traceback:")
                lines.extend(f"    | {line}" for line in traceback)
        elif cause["log_tail"]:
            lines.append(f"  last lines of rank {cause['rank']}'s log:")
            lines.extend(f"    | {without_own_prefix(cause['rank'], line)}" for line in cause["log_tail"])
    elif report["outcome"] == Outcome.FAILED.value and report["reason"]:  # nothing failed: no node to run on
        lines.append(f"  why it stopped: {report['reason']}")
    if report["exit_status"] == _REQUEUE:
        lines.append(f"  worth requeueing: rerun with --run-id {report['run_id']} to continue this run")
    elif report["outcome"] == Outcome.STOPPED.value:  # by a signal: paused, as a requeued job is
        lines.append(f"  stopped, not over: rerun with --run-id {report['run_id']} to continue this run")
    lines.append(f"  run directory: {run_dir}")
    return lines
