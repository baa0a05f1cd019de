"""The keeper's ring of events: bounded, numbered, and telling a reader what it missed.

While no driver reads, a keeper notes what happens (the loss, each exit, the drain) in a ring of
at most ``capacity`` events. Each event gets the next number; when the ring is full the oldest is
dropped. A new driver asks for every event after the last number it saw and learns how many it
can no longer have. Exits are also kept one per rank outside the ring
(:class:`elastic.core.takeover.reading.KeptExit`), so an overflowing ring costs detail, never a
verdict. Standard library only: the spawner imports it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEFAULT_CAPACITY", "EventRing", "RingEvent", "RingRead"]

DEFAULT_CAPACITY = 1024


@dataclass(frozen=True)
class RingEvent:
    """One event: its number in the ring, its kind, its time (the keeper's wall clock), its values."""

    number: int
    kind: str
    at: float
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RingRead:
    """What a reader gets: the events after the number it gave, and how many it missed (dropped)."""

    events: tuple[RingEvent, ...]
    missed: int
    next_number: int  # the number the next event will have: give it back as ``after`` next time


class EventRing:
    """A bounded, numbered ring of events, numbered from 1."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"a ring holds at least one event, not {capacity}")
        self._events: deque[RingEvent] = deque(maxlen=capacity)
        self._next = 1

    def add(self, kind: str, at: float, **fields: Any) -> RingEvent:
        event = RingEvent(self._next, kind, at, dict(fields))
        self._events.append(event)  # a full deque drops its oldest
        self._next += 1
        return event

    def since(self, after: int = 0) -> RingRead:
        """Every event numbered above ``after`` still held, and how many above it were dropped."""
        first = self._events[0].number if self._events else self._next
        missed = max(0, first - max(after, 0) - 1)
        return RingRead(tuple(e for e in self._events if e.number > after), missed, self._next)
