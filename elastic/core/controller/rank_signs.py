"""What the ranks show while an attempt runs, as the controller hears it: signs of life, steps, stragglers. Pure.

What the nodes report while an attempt runs becomes records: its first sign of
life and first step journaled once, its start-up by phase once every rank's is known
(:meth:`elastic.core.controller.state.ControllerState.journal_startup`), the step reached (:mod:`elastic.core.controller.attempts`),
and each straggler (:mod:`elastic.core.training.stragglers`), which with ``--on-straggler
restart`` drains the attempt.

:class:`RankSigns` is a part of :class:`elastic.core.controller.controller.Controller`,
built with the shared :class:`elastic.core.controller.state.ControllerState` and its own
settings. It writes into that state rather than returning values: its records
interleave with the steps journaled and with the drain a straggler begins (the
next straggler of the same report is judged with that drain under way), which only
the one step being written keeps in order. It never decides a failure.
"""

from __future__ import annotations

from collections.abc import Mapping

from elastic.core.controller.attempts import Attempt
from elastic.core.controller.drain import DrainReason, Draining
from elastic.core.controller.machine import Phase
from elastic.core.controller.state import ControllerState
from elastic.core.events import EventName
from elastic.core.labels import node_label
from elastic.core.messages import SignOfLife, StepsSeen
from elastic.core.training.stragglers import OnStraggler, Straggler, decide_straggler

__all__ = ["RankSigns"]


class RankSigns:
    """Journals what an attempt shows of its progress; serves each rank's step and step time."""

    def __init__(self, state: ControllerState, *, on_straggler: OnStraggler, min_nodes: int) -> None:
        self._state = state
        self._on_straggler = on_straggler
        self._min_nodes = min_nodes

    def on_sign_of_life(self, seen: SignOfLife) -> None:
        """The attempt's first output line or heartbeat, from any rank: journaled once."""
        state = self._state
        current = state.current
        if current is None or seen.attempt != current.number or state.done:
            return
        if current.sign_of_life_at is not None:
            return
        current.sign_of_life_at = state.now
        state.record(EventName.SIGN_OF_LIFE_SEEN, rank=seen.rank, node=seen.node, source=seen.source)

    def on_steps_seen(self, seen: StepsSeen) -> None:
        """A node's latest steps: the attempt's first step journaled once, the step reached
        at most every minute (and at the drain and the end, see :meth:`ControllerState.drain`)."""
        state = self._state
        current = state.current
        if current is None or seen.attempt != current.number or state.done or not seen.steps:
            return
        first = current.steps.saw(seen.steps)
        if first is not None:
            # Dated when the node saw it, which can be before the journal's clock (another
            # observation handled first, a takeover's records): seen_s_ago says how long before,
            # as step_reached does, so the goodput ledger starts training there.
            # Steps read at once are dated by the last written: read_to_step says which that is.
            read_to = current.steps.first_read_to
            state.advance(first.at)
            state.record(EventName.FIRST_STEP_SEEN, rank=first.rank, step=first.step, source=first.source,
                         seen_s_ago=round(max(0.0, state.now - first.at), 6),
                         **({"read_to_step": read_to} if read_to is not None and read_to > first.step else {}))
        state.advance(seen.at)
        for step in seen.steps:
            if step.startup and not current.startup_journaled:
                current.startup.setdefault(step.rank, step.startup)
        state.journal_startup(current, force=False)
        for found in current.stragglers.saw(seen.node, seen.steps):
            self._straggler(current, found)
        if state.draining is None:
            state.journal_step_reached(current, force=False)

    def _straggler(self, current: Attempt, found: Straggler) -> None:
        """A rank slower than its peers (:mod:`elastic.core.training.stragglers`): journaled once; with
        ``--on-straggler restart`` the next attempts run without its node, charged to no budget."""
        state = self._state
        decision = decide_straggler(
            found, on_straggler=self._on_straggler, nodes=current.nodes, min_nodes=self._min_nodes,
            available_nodes=state.available_nodes,
            running=state.phase is Phase.RUNNING and state.draining is None,
        )
        state.record(EventName.STRAGGLER_SEEN, **found.fields(), action=decision.action.value,
                     reason=decision.reason)
        if decision.action is OnStraggler.RESTART:
            state.left_out = (*state.left_out, found.node)
            current.charged = None
            state.drain(Draining(
                DrainReason.STRAGGLER, Phase.PENDING, None,
                f"rank {found.rank} straggles ({found.ratio:.2f}x the median step time): "
                f"the next attempt runs without node {node_label(found.node)}",
            ))

    @property
    def live_step(self) -> int | None:
        """The current attempt's highest training step over its ranks, as last reported."""
        current = self._state.current
        best = current.steps.best if current is not None else None
        return None if best is None else best.step

    @property
    def rank_steps(self) -> Mapping[int, int]:
        """The current attempt's highest step by rank, as reported (any thread may read it)."""
        current = self._state.current
        return current.steps.by_rank if current is not None else {}

    @property
    def rank_step_times(self) -> Mapping[int, float]:
        """The current attempt's step time by rank, as reported (any thread may read it)."""
        current = self._state.current
        return current.stragglers.step_times if current is not None else {}
