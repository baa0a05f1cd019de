"""The ranks' heartbeat ages on Ray, for the metrics: asked of every agent at once, at most once a second.

Each agent measures its own ranks' ages on its own clock; a scrape waits at
most :data:`_AGES_TIMEOUT_S` for them, and an answer younger than
:data:`_AGES_FRESH_S` is served again, aged by the time since, instead of
asking anew.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from elastic.backends.ray.calls import Ok, gather, submit
from elastic.backends.ray.agents.roster import Roster

__all__ = ["HeartbeatAges"]

_AGES_TIMEOUT_S = 1.0
_AGES_FRESH_S = 1.0


class HeartbeatAges:
    """Rank -> seconds since its last heartbeat, from the agents of the roster's live nodes."""

    def __init__(self, roster: Roster, clock: Callable[[], float], closed: threading.Event) -> None:
        self._roster = roster
        self._clock = clock
        self._closed = closed
        self._ages_lock = threading.Lock()
        self._ages: dict[int, float] = {}
        self._ages_at = float("-inf")

    def heartbeat_ages(self) -> dict[int, float]:
        """Each agent measures its own ranks' ages on its own clock; asked at most once a second."""
        with self._ages_lock:
            if self._clock() - self._ages_at >= _AGES_FRESH_S:
                self._ages = self._ask_ages()
                self._ages_at = self._clock()
            since_s = self._clock() - self._ages_at
            return {rank: age + since_s for rank, age in self._ages.items()}

    def _ask_ages(self) -> dict[int, float]:
        nodes = [n for n in self._roster.alive() if n.live_ranks]
        if self._closed.is_set() or not nodes:
            return {}
        calls = {n.node_id: submit(n.actor.heartbeat_ages) for n in nodes}
        ages: dict[int, float] = {}
        for result in gather(calls, self._clock() + _AGES_TIMEOUT_S, self._clock).values():
            if isinstance(result, Ok):  # out of reach: left out, the pump deals with the node
                ages.update(result.value)
        return ages
