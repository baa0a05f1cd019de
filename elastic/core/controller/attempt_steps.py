"""An attempt's training steps as the controller journals them: the first, and the highest.

``first_step_seen`` is journaled once per attempt, for the first rank to show a
step; ``step_reached`` (the highest step over the ranks, and who reached it)
when the attempt's drain starts, when it ends, and while it runs at most once
every :data:`STEP_REACHED_EVERY_S` when the step changed, so a driver that
dies loses at most that much of the record. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from elastic.core.messages import RankStep

__all__ = ["STEP_REACHED_EVERY_S", "AttemptSteps"]

STEP_REACHED_EVERY_S = 60.0


class AttemptSteps:
    """The steps one attempt's ranks reported, and what of them is journaled."""

    def __init__(self) -> None:
        self.first: RankStep | None = None
        self.best: RankStep | None = None  # the highest step over the ranks, first to reach it
        self._by_rank: dict[int, int] = {}
        self._journaled: int | None = None
        self._journaled_at: float | None = None

    @property
    def by_rank(self) -> Mapping[int, int]:
        """Each rank's highest step: a copy taken at the call (one C-level dict
        copy), safe to read from any thread."""
        return MappingProxyType(self._by_rank.copy())

    def saw(self, steps: Sequence[RankStep]) -> RankStep | None:
        """Take a node's latest steps (at the cost of these, not of every rank's); returns the
        attempt's first step if these hold it."""
        if not steps:
            return None
        for seen in steps:
            self._by_rank[seen.rank] = seen.step  # the node's word: it knows which source wins
            if self.best is None or seen.step > self.best.step:
                self.best = seen
        if self.first is not None:
            return None
        self.first = min(steps, key=lambda s: (s.at, s.rank))
        self._journaled_at = self.first.at
        return self.first

    def reached_due(self, now: float, *, force: bool) -> RankStep | None:
        """The ``step_reached`` to journal now, if any: the step changed since the last one,
        and ``force`` (a drain starts, the attempt ends) or a minute has passed."""
        best = self.best
        if best is None or best.step == self._journaled:
            return None
        if not force and self._journaled_at is not None and now - self._journaled_at < STEP_REACHED_EVERY_S:
            return None
        self._journaled, self._journaled_at = best.step, now
        return best
