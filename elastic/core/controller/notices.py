"""The decision on a preemption notice: where the drain it begins leads. Pure.

A notice is the launcher's ``--notice-signal`` (Slurm's ``--signal=B:USR1@N``: the
whole job is going) or, on Ray, nodes of the attempt drained with a deadline (an
autoscaler or KubeRay reclaiming spot nodes). Either way every rank is told and
sent ``--preempt-signal`` (a collective job cannot lose one rank and go on), and
gets until the deadline to save. Then the run goes on without the leaving nodes
when at least ``--nnodes`` MIN remain, charged to no budget: the job did nothing
wrong. Otherwise it ends with :data:`ExitCode.NODES_UNAVAILABLE` (75, "requeue me").
"""

from __future__ import annotations

from dataclasses import dataclass

from elastic.core.controller.drain import DrainReason, Draining
from elastic.core.exit_codes import ExitCode
from elastic.core.failures import node_label
from elastic.core.controller.machine import Phase
from elastic.core.messages import Outcome, PreemptionNoticed

__all__ = ["NoticeDecision", "decide_notice", "drain_source"]


def drain_source(node: str) -> str:
    """How the journal names a Ray drain: ``ray drain of node 1a2b3c4d5e6f``."""
    return f"ray drain of node {node_label(node)}"


@dataclass(frozen=True)
class NoticeDecision:
    """What a notice amounts to: the drain, and what the journal says of it."""

    draining: Draining
    relaunch: bool
    fields: dict[str, object]


def decide_notice(
    notice: PreemptionNoticed, *, now: float, grace_s: float, min_nodes: int, preempt_signal: int
) -> NoticeDecision:
    """The drain a notice begins: until its deadline (or ``grace_s`` without one), then
    a relaunch on the nodes left, or the end with the requeue status."""
    given = notice.deadline_at is not None
    grace = max(0.0, notice.deadline_at - now) if notice.deadline_at is not None else grace_s
    relaunch = bool(notice.nodes) and notice.usable_nodes >= min_nodes
    if relaunch:
        then = f"relaunch on the {notice.usable_nodes} nodes left"
    elif notice.nodes:
        then = f"end to be requeued: {notice.usable_nodes} nodes left, --nnodes needs {min_nodes}"
    else:
        then = "end to be requeued: the whole job is going"
    detail = f"preemption notice ({notice.source}); {then}"
    draining = Draining(
        DrainReason.PREEMPTION,
        Phase.PENDING if relaunch else Phase.DONE,
        None if relaunch else Outcome.STOPPED,
        detail,
        stop_signal=preempt_signal,
        exit_status=None if relaunch else int(ExitCode.NODES_UNAVAILABLE),
        grace_s=grace,
    )
    fields: dict[str, object] = {
        "source": notice.source,
        "deadline_s": round(grace, 3),  # from the notice to when the ranks are SIGKILLed
        "deadline_from": "notice" if given else "--grace-period",
        "nodes": list(notice.nodes),
        "then": "relaunch" if relaunch else "requeue",
        "reason": detail,
    }
    return NoticeDecision(draining, relaunch, fields)
