"""The controller's handlers of an attempt's progress: signs of life, steps, stragglers. Pure.

What the nodes report while an attempt runs becomes records: its first sign of
life and first step journaled once, the step reached (:mod:`elastic.core.controller.attempts`),
and each straggler (:mod:`elastic.core.training.stragglers`), which with ``--on-straggler
restart`` drains the attempt. :class:`ProgressHandlers` is a layer of
:class:`elastic.core.controller.controller.Controller`, which sets the attributes it declares.
"""

from __future__ import annotations

from collections.abc import Mapping

from elastic.core.controller.attempts import Attempt
from elastic.core.controller.drain import DrainReason, Draining
from elastic.core.controller.machine import Phase
from elastic.core.controller.state import StepState
from elastic.core.events import EventName
from elastic.core.labels import node_label
from elastic.core.messages import SignOfLife, StepsSeen
from elastic.core.training.stragglers import OnStraggler, Straggler, decide_straggler

__all__ = ["ProgressHandlers"]


class ProgressHandlers(StepState):
    """Journals what an attempt shows of its progress; serves each rank's step and step time."""

    # Set by the controller's constructor; _available_nodes updated by the scale check.
    on_straggler: OnStraggler
    min_nodes: int
    _available_nodes: int | None

    def _on_sign_of_life(self, seen: SignOfLife) -> None:
        """The attempt's first output line or heartbeat, from any rank: journaled once."""
        current = self._attempts[-1] if self._attempts else None
        if current is None or seen.attempt != current.number or self.done:
            return
        if current.sign_of_life_at is not None:
            return
        current.sign_of_life_at = self._now
        self._record(EventName.SIGN_OF_LIFE_SEEN, rank=seen.rank, node=seen.node, source=seen.source)

    def _on_steps_seen(self, seen: StepsSeen) -> None:
        """A node's latest steps: the attempt's first step journaled once, the step reached
        at most every minute (and at the drain and the end, see :meth:`_drain`)."""
        current = self._attempts[-1] if self._attempts else None
        if current is None or seen.attempt != current.number or self.done or not seen.steps:
            return
        first = current.steps.saw(seen.steps)
        if first is not None:
            self._advance(first.at)
            self._record(EventName.FIRST_STEP_SEEN, rank=first.rank, step=first.step, source=first.source)
        self._advance(seen.at)
        for found in current.stragglers.saw(seen.node, seen.steps):
            self._on_straggler(current, found)
        if self.draining is None:
            self._journal_step_reached(current, force=False)

    def _on_straggler(self, current: Attempt, found: Straggler) -> None:
        """A rank slower than its peers (:mod:`elastic.core.training.stragglers`): journaled once; with
        ``--on-straggler restart`` the next attempts run without its node, charged to no budget."""
        decision = decide_straggler(
            found, on_straggler=self.on_straggler, nodes=current.nodes, min_nodes=self.min_nodes,
            available_nodes=self._available_nodes,
            running=self.phase is Phase.RUNNING and self.draining is None,
        )
        self._record(EventName.STRAGGLER_SEEN, **found.fields(), action=decision.action.value,
                     reason=decision.reason)
        if decision.action is OnStraggler.RESTART:
            self.left_out = (*self.left_out, found.node)
            current.restarted = True
            current.charged = None
            self._drain(Draining(
                DrainReason.STRAGGLER, Phase.PENDING, None,
                f"rank {found.rank} straggles ({found.ratio:.2f}x the median step time): "
                f"the next attempt runs without node {node_label(found.node)}",
            ))

    def _journal_step_reached(self, current: Attempt, *, force: bool) -> None:
        reached = current.steps.reached_due(self._now, force=force)
        if reached is not None:
            self._record(EventName.STEP_REACHED, step=reached.step, rank=reached.rank)

    def _drain(self, draining: Draining) -> None:
        if self._attempts and self.draining is None:
            self._journal_step_reached(self._attempts[-1], force=True)
        super()._drain(draining)

    @property
    def live_step(self) -> int | None:
        """The current attempt's highest training step over its ranks, as last reported."""
        best = self._attempts[-1].steps.best if self._attempts else None
        return None if best is None else best.step

    @property
    def rank_steps(self) -> Mapping[int, int]:
        """The current attempt's highest step by rank, as reported (any thread may read it)."""
        return self._attempts[-1].steps.by_rank if self._attempts else {}

    @property
    def rank_step_times(self) -> Mapping[int, float]:
        """The current attempt's step time by rank, as reported (any thread may read it)."""
        return self._attempts[-1].stragglers.step_times if self._attempts else {}
