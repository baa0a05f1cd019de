"""``elastic status``: what a run directory's journal says, in a few lines (read through its fold)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from elastic.core.failures import FailureKind, describe_exit_hung
from elastic.core.journal.fold import FailureMark, failure_from, fold
from elastic.core.journal.folded import FoldedAttempt
from elastic.core.journal.ledger import CAUSE_WORDS, Ledger, run_ledger
from elastic.core.labels import node_label, plural, rank_ranges
from elastic.core.training.stragglers import straggler_text
from elastic.views.report import after_exit_0_text, notice_text, still_running_after_exit_0, symptoms_of, symptoms_text

__all__ = [
    "RankPlace",
    "describe_exit_wait",
    "describe_journal",
    "describe_pids",
    "describe_state",
    "ledger_table",
    "rank_places",
    "status_line",
]


@dataclass(frozen=True)
class RankPlace:
    """The node a rank of an attempt ran on, as the journal recorded it."""

    node_id: str
    address: str | None  # None in journals written before addresses were recorded

    def describe(self) -> str:
        return f"node {self.node_id}" + (f" ({self.address})" if self.address else "")


def rank_places(events: Sequence[dict[str, Any]], attempt: int) -> dict[int, RankPlace]:
    """Where each rank of ``attempt`` ran: node 0 holds ranks 0..n-1, and so on
    (the order :func:`elastic.core.launch.plan.assign_ranks` gives); empty if it never started."""
    folded = fold(events, strict_times=False).attempts.get(attempt)
    started = folded.started if folded is not None else {}
    if not started:
        return {}
    nodes = started.get("nodes") or []
    addresses = started.get("node_addresses") or [None] * len(nodes)
    places: dict[int, RankPlace] = {}
    for node_id, address, nproc in zip(nodes, addresses, started.get("nproc_per_node") or [], strict=False):
        for _ in range(int(nproc)):
            places[len(places)] = RankPlace(str(node_id), address)
    return places


def describe_pids(events: Sequence[dict[str, Any]]) -> list[str]:
    """Each rank's pid in the latest attempt that journaled them (``rank_pids``), by node:
    ``pids of attempt 1: rank 0 4321, rank 1 4322 (node vm)``; empty when none did. A rank
    started in a warm interpreter is found by its pid only: its ``/proc/PID/environ`` holds
    none of its variables."""
    run = fold(events, strict_times=False)
    latest = next((a for _, a in sorted(run.attempts.items(), reverse=True) if a.pids), None)
    if latest is None:
        return []
    places = rank_places(events, latest.number)
    by_node: dict[str, list[str]] = {}
    for rank, pid in sorted(latest.pids.items()):
        place = places.get(rank)
        node = node_label(place.node_id) if place is not None else "?"
        by_node.setdefault(node, []).append(f"rank {rank} {pid}")
    return [f"pids of attempt {latest.number}: "
            + "; ".join(f"{', '.join(ranks)} (node {node})" for node, ranks in by_node.items())]


def _failure_line(failure: FailureMark) -> str:
    if failure.kind is FailureKind.EXIT_HUNG:
        return describe_exit_hung(failure.rank, node_label(str(failure.node)), failure.message)
    how = failure.signal if failure.signal else f"exit code {failure.exit_code}"
    signature = f" [{failure.diagnosis.signature}]" if failure.diagnosis else ""
    if failure.kind is FailureKind.COLLATERAL and failure.diagnosis:  # a root cause found in the drain
        return f"rank {failure.rank} on {node_label(str(failure.node))} failed, ended by the drain ({how}){signature}"
    return f"rank {failure.rank} on {node_label(str(failure.node))} {failure.kind.value} ({how}){signature}"


def _checkpoint_line(event: Mapping[str, Any]) -> str:
    if event["event"] == "checkpoints_unrecognised":
        shown = ", ".join(str(e) for e in event.get("entries") or [])
        more = int(event.get("count") or 0) - len(event.get("entries") or [])
        return (f"nothing in {event.get('checkpoint_dir')} is named like a checkpoint ({shown}"
                f"{f', and {more} more' if more > 0 else ''}); name yours with --checkpoint-pattern "
                "(see docs/getting-started/restarts-and-checkpoints.md)")
    step = event.get("step")
    return f"{event.get('entry')}{'' if step is None else f' (step {step})'} rejected: {event.get('reason')}"


def _step_lines(attempts: Sequence[FoldedAttempt]) -> list[str]:
    """``attempt 1: first step 120 at 14.2s (rank 0's output); reached step 480 (rank 3)``."""
    lines = []
    for attempt in attempts:
        first, reached = attempt.first_step, attempt.step_reached
        if first is None or attempt.first_step_s is None:
            continue
        line = (
            f"attempt {attempt.number}: first step {first.get('step')} "
            f"{attempt.first_step_s - attempt.begun_s:.2f}s after its start "
            f"(rank {first.get('rank')}'s {first.get('source')})"
        )
        if reached is not None:
            line += f"; reached step {reached.get('step')} (rank {reached.get('rank')})"
        lines.append(line)
    return lines


def _exit_wait_lines(attempt: FoldedAttempt) -> list[str]:
    """Ranks left running after a peer's exit 0 because they still worked, and ranks still
    running after it when the drain began."""
    lines = []
    if attempt.exit_spared is not None:
        lines.append(f"left running: {attempt.exit_spared.get('reason')}")
    running = still_running_after_exit_0(attempt)
    if running is not None:
        lines.append(str(running["description"]))
    lines.extend(attempt.exit_judged_lines())
    if attempt.rerun_warning:
        lines.append(f"warning: {attempt.rerun_warning}")
    return lines


def describe_journal(events: Sequence[dict[str, Any]], now_wall: float | None = None) -> list[str]:
    """Phase, attempts, failures and root cause, from journal events in order; the ledger up
    to ``now_wall`` (epoch seconds) for a live run, else up to the last event."""
    run = fold(events, strict_times=False)
    attempts = [a for _, a in sorted(run.attempts.items())]
    started = sum(1 for a in attempts if a.started)
    # A failure a revised root cause superseded is its consequence, not a cause; the rank the
    # drain ended that explains a symptom is the cause, collateral as it ended.
    listed = [(a, f) for a in attempts for f in a.effective_failures() if f.kind is not FailureKind.COLLATERAL or f == a.root_cause]
    symptoms = {a.number: symptoms_text(symptoms_of(a)) for a in attempts}
    finished = run.finished
    lines = [f"run {run.run_id}: phase {run.phase}, {started} attempt{'s' if started != 1 else ''}"]
    if finished is not None:
        lines.append(
            f"outcome: {finished.get('outcome')} (exit status {finished.get('exit_status')})"
        )
    if finished is not None and finished.get("outcome") == "succeeded" and listed:
        lines.append(f"  {finished.get('reason')}")  # e.g. "finished; rank 1 hung at exit and was killed"
    elif finished is not None and finished.get("outcome") == "failed" and not finished.get("root_cause"):
        lines.append(f"  {finished.get('reason')}")  # nothing failed: e.g. no node passed --preflight
    lines.append(f"failures: {len(listed)}")
    for a, f in listed:
        lines.append(f"  attempt {f.attempt}: {_failure_line(f)}")
        peer_gone = a.failed_after_exit_0() if f == a.root_cause else None
        if peer_gone is not None:
            lines.append(f"    {after_exit_0_text(*peer_gone)}")
        if f == a.root_cause and symptoms[a.number]:
            lines.append(f"    {symptoms[a.number]}")
    for previous, following in zip(attempts, attempts[1:]):
        after = following.sign_of_life_after(previous)
        seen = following.sign_of_life or {}
        if after is not None:
            backoff = f", {following.backoff_s:.1f}s of backoff apart" if following.backoff_s >= 0.05 else ""
            lines.append(
                f"attempt {following.number}: first sign of life {after:.2f}s after attempt "
                f"{previous.number}'s failure{backoff} (rank {seen.get('rank')}'s {seen.get('source')})"
            )
    lines.extend(_step_lines(attempts))
    lines.extend(f"attempt {a.number}: {death.describe()}" for a in attempts if (death := a.driver_death))
    killed = [f"  attempt {a.number}: {line}" for a in attempts for line in a.grace_kill_lines()]
    if killed:
        lines.append("killed when the grace ran out:")
        lines.extend(killed)
    stragglers = [(a.number, s) for a in attempts for s in a.stragglers]
    if stragglers:
        lines.append(f"stragglers: {len(stragglers)}")
        lines.extend(f"  attempt {number}: {straggler_text(s)}" for number, s in stragglers)
    exit_waits = [f"  attempt {a.number}: {line}" for a in attempts for line in _exit_wait_lines(a)]
    if exit_waits:
        lines.append("after a peer's exit 0 (--exit-timeout):")
        lines.extend(exit_waits)
    notices = [(a.number, a.notice) for a in attempts if a.notice is not None]
    if notices:
        lines.append(f"preemption notices: {len(notices)}")
        lines.extend(f"  attempt {number}: {notice_text(notice)}" for number, notice in notices)
    if run.checkpoint_notes:
        lines.append(f"checkpoints passed over: {len(run.checkpoint_notes)}")
        lines.extend(f"  attempt {e.get('attempt')}: {_checkpoint_line(e)}" for e in run.checkpoint_notes)
    if run.excluded_nodes:
        lines.append(f"excluded nodes: {len(run.excluded_nodes)}")
        lines.extend(f"  {node_label(str(e['node']))} after attempt {e['attempt']}: {e['reason']}"
                     for e in run.excluded_nodes)
    cause = finished.get("root_cause") if finished else None
    if isinstance(cause, Mapping) and cause:
        mark = failure_from(cause)
        lines.append(f"root cause: attempt {cause.get('attempt')}: {_failure_line(mark)}")
        if mark.message:
            lines.append(f"  {mark.message}")
        if symptoms.get(mark.attempt):
            lines.append(f"  {symptoms[mark.attempt]}")
    until_s = None if now_wall is None else run.since_start(now_wall)
    lines.extend(ledger_table(run_ledger(run, until_s).run))
    return lines


def ledger_table(ledger: Ledger) -> list[str]:
    """The goodput ledger in a few lines: each cause with time, largest first, and its share."""
    total = ledger.total_s
    shown = [(c, s) for c, s in sorted(ledger.seconds.items(), key=lambda cs: -cs[1]) if s >= 0.005]
    if total <= 0 or not shown:
        return []
    width = max(len(CAUSE_WORDS[c]) for c, _ in shown)
    return [f"where the time went ({total:.1f}s):"] + [
        f"  {CAUSE_WORDS[c]:<{width}} {s:>9.1f}s {s / total:>4.0%}" for c, s in shown
    ]


def describe_exit_wait(events: Sequence[dict[str, Any]], now_wall: float) -> list[str]:
    """While the driver waits for ranks to exit after a peer exited 0: the ranks by state.

    Empty unless the latest attempt started its ``--exit-timeout`` clock.
    """
    run = fold(events, strict_times=False)
    if run.last_started is None:
        return []
    started = run.last_started
    attempt = run.attempts[int(started.get("attempt", 0))]
    timer = attempt.exit_timer
    if timer is None:
        return []
    exited_0 = set(attempt.exited_0)
    failed = {f.rank for f in attempt.failures if f.rank is not None}
    world = sum(int(n) for n in started.get("nproc_per_node") or [])
    still_running = set(range(world)) - exited_0 - failed
    parts = [f"exited 0: {rank_ranges(exited_0)}"]
    if failed:
        parts.append(f"failed: {rank_ranges(failed)}")
    parts.append(f"still running: {rank_ranges(still_running) or 'none'}")
    waited_s = max(0.0, now_wall - datetime.fromisoformat(str(timer["time"])).timestamp())
    lines = [
        f"ranks of attempt {started.get('attempt')}: " + "; ".join(parts),
        f"  rank {timer.get('rank')} exited 0 {waited_s:.0f} s ago: ranks still running after it and "
        f"silent for {timer.get('exit_timeout_s'):g} s are exit-hung (--exit-timeout)",
    ]
    spared = attempt.exit_spared
    if spared is not None:
        checked_s = max(0.0, now_wall - datetime.fromisoformat(str(spared["time"])).timestamp())
        lines.append(f"  checked {checked_s:.0f} s ago, left running: {spared.get('reason')}")
    return lines


def describe_state(state: dict[str, Any], heartbeat_ages: dict[int, float]) -> list[str]:
    """A live run, from the driver's ``state.json`` and the ranks' heartbeat ages."""
    step = state.get("checkpoint_step")
    trained = state.get("step")
    lines = [
        f"live: phase {state.get('phase')}, attempt {state.get('attempt')}, "
        f"world {state.get('world_size')} on {_count(state.get('nodes'), 'node')}, "
        f"{_count(state.get('ranks_alive'), 'rank')} alive",
        f"training step: {'none yet' if trained is None else trained} (the attempt's highest, as "
        "its ranks last reported it)",
        f"last checkpoint step: {'none' if step is None else step}, "
        f"restarts: {state.get('restarts')}, failure budget left: "
        f"{'unlimited' if state.get('failures_budget_left') is None else state.get('failures_budget_left')}",
    ]
    if heartbeat_ages:
        ages = ", ".join(f"rank {r}: {age:.1f}s" for r, age in sorted(heartbeat_ages.items()))
        lines.append(f"heartbeat age: {ages}")
    return lines


def _count(value: object, noun: str) -> str:
    """``1 node``, ``2 nodes``; what state.json holds, shown as is when it is no count."""
    return plural(value, noun) if isinstance(value, int) else f"{value} {noun}s"


def status_line(
    *, phase: str, attempt: int, world_size: int, elapsed_s: float, step: int | None,
    restarts_left: int | None, checkpoint_step: int | None | Literal[False] = False,
) -> str:
    """The one-line live status shown at the bottom of a terminal: the training step and,
    with a checkpoint directory (``checkpoint_step`` not False), the newest complete checkpoint
    apart (``step 21 · ckpt 20``)."""
    hours, rest = divmod(int(elapsed_s), 3600)
    minutes, seconds = divmod(rest, 60)
    left = "unlimited" if restarts_left is None else str(restarts_left)
    progress = f"step {'-' if step is None else step}"
    if checkpoint_step is not False:
        progress += f" · ckpt {'-' if checkpoint_step is None else checkpoint_step}"
    return (
        f"elastic | {phase} | attempt {attempt} | world {world_size} | "
        f"{hours:02d}:{minutes:02d}:{seconds:02d} | {progress} | restarts left {left}"
    )
