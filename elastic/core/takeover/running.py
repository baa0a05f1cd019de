"""Which attempt a new driver may take over as it runs, read from the dead driver's journal.

Only an attempt that was simply running when its driver died can be adopted: the journal says it
entered ``running`` and names every rank's pid, and nothing of it had ended or begun to end (no
rank exited or failed, no drain, no exit timer, no preemption notice). Past any of those the dead
driver had begun to decide (a verdict, a drain, a wait for the last ranks) and not every part of
that decision is in the journal; such an attempt ends with its driver, as without a keeper, and
its kept ranks are drained. The cheaper error: a restart too many, never a decision made twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from elastic.core.journal.folded import FoldedAttempt

__all__ = ["RunningAttempt", "left_running", "not_the_same_job"]


@dataclass(frozen=True)
class RunningAttempt:
    """The attempt a dead driver left running: what a takeover checks its keepers' accounts
    against, and how the attempt was planned (its ``attempt_started`` record)."""

    attempt: int
    world_size: int
    nodes: tuple[str, ...]
    resume_step: int | None
    pids: Mapping[int, int]  # rank -> its pid on its node, as rank_pids journaled it
    plan: Mapping[str, Any] = field(default_factory=dict, compare=False)
    launched_at: float = 0.0  # when it entered running (epoch seconds)
    first_step: tuple[int, int] | None = None  # (rank, step) of its first step as journaled; None: none seen
    sign_of_life: bool = False  # its first output or heartbeat was journaled


def left_running(attempt: FoldedAttempt | None, launched_at: float | None = None) -> RunningAttempt | None:
    """``attempt`` (the journal's interrupted one, ``launched_at`` when it entered running, epoch
    seconds) when a new driver may adopt it as it runs; None when it may not (see the module's doc)."""
    if attempt is None or attempt.reached != "running" or attempt.world_size <= 0:
        return None
    began_to_end = (
        attempt.failures or attempt.exited_0 or attempt.drain_started_s is not None
        or attempt.exit_timer is not None or attempt.notice is not None
    )
    if began_to_end or set(attempt.pids) != set(range(attempt.world_size)) or launched_at is None:
        return None  # not known when it was launched: no telling its exits from its start-up's
    return RunningAttempt(
        attempt=attempt.number,
        world_size=attempt.world_size,
        nodes=tuple(str(node) for node in attempt.started.get("nodes") or ()),
        resume_step=attempt.resume_step,
        pids=dict(attempt.pids),
        plan=dict(attempt.started),
        launched_at=launched_at,
        first_step=None if attempt.first_step is None else (
            int(attempt.first_step.get("rank") or 0), int(attempt.first_step.get("step") or 0)),
        sign_of_life=attempt.sign_of_life_s is not None,
    )


def not_the_same_job(started: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
    """Why a rerun is not the job whose ranks it found running (``started``: the dead driver's
    ``run_started`` record; ``now``: the same fields of this driver's), so that it must not
    adopt them; None when it is. A rerun with another command or another world asked for a new
    start: adopting would go on with what it asked to change."""
    for name, what in (("command", "command"), ("nproc_per_node", "--nproc-per-node"), ("nnodes", "--nnodes")):
        if started.get(name) != now.get(name):
            return (f"the rerun's {what} ({now.get(name)!r}) is not the one its ranks were started with "
                    f"({started.get(name)!r})")
    return None

