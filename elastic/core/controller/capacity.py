"""Nodes coming and going, as the controller hears of them: too few, more, a preemption notice, one at fault. Pure.

An attempt with too few nodes to plan on ends the run with the requeue status; the
scale watch's look at the usable nodes drains the attempt to grow after a new
checkpoint (``--scale-up``, :class:`elastic.core.policy.restarts.ScaleUp`); a preemption
notice drains it to relaunch on the nodes left or to end with the requeue status
(:func:`decide_notice`); a node at fault (a failure's node suspected by
:func:`elastic.core.diagnosis.nodes.judge_node`) is left out of the next attempts when
enough nodes are left without it (:meth:`Capacity.suspect_node`, asked by the controller
before it decides after a failure; spares the attempt did not use count, as they do for
the preflight); a node whose ``--preflight`` failed is left out the same
way, before anything is launched (:meth:`Capacity.on_preflight_ran`,
:func:`elastic.core.diagnosis.preflight.judge_preflight`): the attempt is planned again
without it, or the run fails when too few nodes are left.

:class:`Capacity` is a part of :class:`elastic.core.controller.controller.Controller`,
built with the shared :class:`elastic.core.controller.state.ControllerState` and its own
settings (``--nnodes`` MIN, ``--preempt-signal``, ``--scale-up``, ``--grace-period``).
Each of its handlers ends in a drain or in nothing, never in a failure to decide, so it
begins the drain itself, through the state (one step, its records in order); the
usable nodes the scale watch saw it leaves there for the straggler rule
(:mod:`elastic.core.controller.rank_signs`).

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
from elastic.core.controller.machine import Phase
from elastic.core.controller.state import ControllerState
from elastic.core.diagnosis.nodes import judge_node
from elastic.core.diagnosis.preflight import judge_preflight
from elastic.core.events import EventName
from elastic.core.exit_codes import ExitCode
from elastic.core.failures import Failure
from elastic.core.journal.fold import made_progress
from elastic.core.labels import node_label, plural
from elastic.core.messages import (
    AnnouncePreemption, NodesUnavailable, Outcome, PlanAttempt, PreemptionNoticed, PreflightRan, ScaleCheck,
)
from elastic.core.policy.restarts import ScaleUp

__all__ = ["Capacity", "NoticeDecision", "decide_notice", "drain_source"]

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
        then = f"relaunch on the {plural(notice.usable_nodes, 'node')} left"
    elif notice.nodes:
        then = f"end to be requeued: {plural(notice.usable_nodes, 'node')} left, --nnodes needs {min_nodes}"
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


class Capacity:
    """Drains the attempt when its nodes are too few or going, or when more are there to grow onto."""

    def __init__(
        self, state: ControllerState, *, min_nodes: int, preempt_signal: int, scale_up: ScaleUp, grace_s: float
    ) -> None:
        self._state = state
        self._min_nodes = min_nodes  # --nnodes MIN
        self._preempt_signal = preempt_signal  # 0: none (the notice file alone)
        self._scale_up = scale_up
        self._grace_s = grace_s  # --grace-period: a notice's deadline when it gives none
        self._last_grown_at: float | None = None

    def on_scale_check(self, seen: ScaleCheck) -> None:
        """The scale watch's look at the usable nodes: grow after a new checkpoint (``--scale-up``)."""
        state = self._state
        current = state.current
        state.available_nodes = seen.available_nodes  # a straggler's node may be left out for a spare
        if current is None or seen.attempt != current.number or state.phase is not Phase.RUNNING or state.draining:
            return
        new_checkpoint = made_progress(current.resume_step, seen.checkpoint_step)
        if not self._scale_up.should_grow(
            now=state.now,
            nodes=current.nodes,
            available=seen.available_nodes,
            new_checkpoint=new_checkpoint,
            last_grown_at=self._last_grown_at,
        ):
            return
        self._last_grown_at = state.now
        grow_to = min(seen.available_nodes, self._scale_up.max_nodes)
        detail = f"scale up from {current.nodes} to {grow_to} nodes after checkpoint {seen.checkpoint_step}"
        state.record(EventName.SCALE_UP_SCHEDULED, reason=detail, nodes=current.nodes, to=grow_to)
        state.drain(Draining(DrainReason.SCALE_UP, Phase.PENDING, None, detail))

    def on_nodes_unavailable(self, seen: NodesUnavailable) -> None:
        """Too few nodes to plan the attempt on: the run ends with the requeue status."""
        state = self._state
        if seen.attempt != state.attempt or state.phase is not Phase.PENDING:
            return
        state.drain(
            Draining(
                DrainReason.FAILURE, Phase.DONE, Outcome.FAILED,
                f"needed at least {plural(seen.needed, 'node')}, {seen.seen} available",
                exit_status=int(ExitCode.NODES_UNAVAILABLE),
            )
        )

    def on_preemption_noticed(self, seen: PreemptionNoticed) -> None:
        """Tell every rank, give them until the deadline, then relaunch on the nodes left
        (charged to no budget) or end with the requeue status (:func:`decide_notice`)."""
        state = self._state
        current = state.current
        if state.done or current is None:
            return
        if seen.nodes and (
            seen.attempt != current.number
            or state.phase not in (Phase.LAUNCHING, Phase.RUNNING)
            or state.draining is not None
        ):
            # Nodes of an attempt already over or draining: the next one is planned without them.
            return
        decision = decide_notice(
            seen, now=state.now, grace_s=self._grace_s, min_nodes=self._min_nodes,
            preempt_signal=self._preempt_signal,
        )
        state.record(EventName.PREEMPTION_NOTICED, **decision.fields)
        if state.phase in (Phase.LAUNCHING, Phase.RUNNING) and state.draining is None:
            state.command(
                AnnouncePreemption(
                    current.number, seen.source, state.now + (decision.draining.grace_s or 0.0),
                    self._preempt_signal,
                )
            )
        if decision.relaunch:
            current.charged = None
            state.drain(decision.draining)
        else:
            state.end_instead(decision.draining)

    def suspect_node(self, cause: Failure, *, identical: bool) -> bool:
        """A failure's node suspected (:func:`elastic.core.diagnosis.nodes.judge_node`): journaled,
        and left out of the next attempts when enough usable nodes of the cluster are left without
        it (spares included: the backend's count at placement, or the scale watch's later look);
        whether it was left out. ``identical``: ``cause`` is the same failure as the attempt
        before's, on its node."""
        state = self._state
        current = state.current
        assert current is not None
        verdict = judge_node(
            cause, state.earlier_causes, identical=identical, left_out=state.left_out,
            nodes=current.nodes, available=state.available_nodes, min_nodes=self._min_nodes,
        )
        if verdict is None:
            return False
        state.record(EventName.NODE_EXCLUDED if verdict.excluded else EventName.NODE_KEPT, **verdict.fields())
        if verdict.excluded:
            state.left_out = (*state.left_out, verdict.node)
        return verdict.excluded

    def on_preflight_ran(self, seen: PreflightRan) -> bool:
        """Every node of the planned attempt ran ``--preflight``: journaled; whether the attempt
        launches as planned. A node that failed it is excluded, and the attempt is planned again
        without it, or, with too few nodes left, the run fails before anything is launched."""
        state = self._state
        if seen.attempt != state.attempt or state.phase is not Phase.PENDING or state.draining is not None:
            return False
        verdict = judge_preflight(seen.results, timeout_s=seen.timeout_s, available=seen.available,
                                  min_nodes=self._min_nodes)
        state.record(EventName.PREFLIGHT_RAN, results=[r.fields() for r in seen.results],
                     passed=not verdict.excluded)
        if not verdict.excluded:
            return True
        output = {r.node: list(r.output) for r in seen.results}
        for node, reason in verdict.excluded:
            state.record(EventName.NODE_EXCLUDED, node=node, reason=reason, output=output[node])
            state.left_out = (*state.left_out, node)
        if verdict.goes_on:
            state.command(PlanAttempt(seen.attempt, 0.0, state.left_out, state.longest_init_s))
            return False
        assert verdict.message is not None
        state.drain(Draining(DrainReason.FAILURE, Phase.DONE, Outcome.FAILED, verdict.message,
                             exit_status=int(ExitCode.NODES_UNAVAILABLE)))
        return False
