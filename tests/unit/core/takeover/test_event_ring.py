"""The keeper's event ring: bounded, numbered from 1, and honest about what a reader missed."""

from __future__ import annotations

import pytest

from elastic.core.takeover.ring import EventRing


def test_a_reader_gets_every_event_after_the_number_it_last_saw() -> None:
    ring = EventRing(capacity=8)
    for at in range(5):
        ring.add("step", float(at), step=at)
    read = ring.since(2)
    assert ([3, 4, 5], 0, 6) == ([e.number for e in read.events], read.missed, read.next_number)
    assert {"step": 2} == read.events[0].fields


def test_a_full_ring_drops_its_oldest_and_says_how_many_a_reader_missed() -> None:
    """Ten events in a ring of four: a reader from the start missed six, one from 7 missed none."""
    ring = EventRing(capacity=4)
    for at in range(10):
        ring.add("heartbeat", float(at))
    from_start, from_seven = ring.since(0), ring.since(7)
    assert ([7, 8, 9, 10], 6) == ([e.number for e in from_start.events], from_start.missed)
    assert ([8, 9, 10], 0) == ([e.number for e in from_seven.events], from_seven.missed)


def test_an_empty_ring_or_a_reader_up_to_date_gets_nothing_and_misses_nothing() -> None:
    ring = EventRing(capacity=2)
    assert ((), 0, 1) == (ring.since(0).events, ring.since(0).missed, ring.since(0).next_number)
    ring.add("lost", 1.0)
    assert ((), 0) == (ring.since(1).events, ring.since(1).missed)


def test_a_ring_holds_at_least_one_event() -> None:
    with pytest.raises(ValueError, match="at least one"):
        EventRing(capacity=0)
