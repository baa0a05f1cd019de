"""Events injected from outside (`elastic report --events`): read from their log, placed on a hand-made run's timeline."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from elastic.core.journal.injected import InjectedEvent, InjectedLogError, injected_lines, place_injected, read_injected
from elastic.core.journal.timeline import build_timeline
from journal_events import T0, ev, killed_and_restarted


def line(t: float | str, kind: str = "sigkill", **fields: Any) -> str:
    return json.dumps({"t": t, "kind": kind, **fields})


def test_each_line_gives_a_time_a_kind_a_target_and_a_cause() -> None:
    """Unix seconds or ISO 8601 with a zone; target and cause optional; other fields and blank lines ignored."""
    text = "\n".join([
        line(T0.timestamp() + 10, target="rank 1", cause="faulty GPU", pid=42),
        "",
        line((T0 + timedelta(seconds=20)).isoformat(), "node_lost"),
    ])

    events = read_injected(text, source="events.jsonl")

    assert (InjectedEvent(T0.timestamp() + 10, "sigkill", "rank 1", "faulty GPU", 1),
            InjectedEvent(T0.timestamp() + 20, "node_lost", "", "", 3)) == events


@pytest.mark.parametrize(("text", "why"), [
    ('{"t": 1', "events.jsonl:2: not a JSON line"),
    ("[1, 2]", "events.jsonl:2: not a JSON object"),
    (line("yesterday"), 'events.jsonl:2: no time: "t" is Unix seconds or an ISO 8601 time with its zone'),
    (line("2026-12-02T09:00:00"), 'events.jsonl:2: no time: "t" is Unix seconds or an ISO 8601 time with its zone'),
    (json.dumps({"t": 1.0}), 'events.jsonl:2: no "kind" (a string: sigkill, preemption, ...)'),
])
def test_a_line_that_cannot_be_read_is_named_with_its_file_and_number(text: str, why: str) -> None:
    with pytest.raises(InjectedLogError) as raised:
        read_injected(line(1.0) + "\n" + text, source="events.jsonl")
    assert why == str(raised.value)


def test_an_event_is_placed_in_its_attempt_beside_the_failure_and_the_recovery_elastic_saw() -> None:
    """The kill at 10.0 s: in attempt 0, rank 1's SIGKILL journaled 0.2 s later, attempt 1 stepping 6 s later."""
    timeline = build_timeline(killed_and_restarted())
    events = read_injected("\n".join([line(T0.timestamp() + 10.0, target="rank 1", cause="faulty GPU"),
                                      line(T0.timestamp() + 20.0, "sigstop", target="rank 0"),
                                      line(T0.timestamp() - 5.0, "exception")]), source="e")

    marks = place_injected(timeline, events)

    assert [-5.0, 10.0, 20.0] == [pytest.approx(m.at_s) for m in marks]
    assert [None, 0, 1] == [m.attempt for m in marks]
    kill = marks[1]
    assert "in attempt 0" == kill.where
    assert "rank 1 on n0 killed (SIGKILL)" == kill.seen
    assert (kill.seen_after_s, kill.next_step_attempt, kill.next_step_after_s) == (
        pytest.approx(0.2), 1, pytest.approx(6.0))
    assert (None, None) == (marks[2].seen, marks[2].next_step_attempt)
    assert [
        "injected events (e), from the run's start:",
        "  -5.00 s exception: before the run's first attempt",
        "  +10.00 s sigkill rank 1 (faulty GPU): in attempt 0; elastic saw rank 1 on n0 killed (SIGKILL) 0.20 s "
        "later; attempt 1's first step 6.00 s later",
        "  +20.00 s sigstop rank 0: in attempt 1",
    ] == injected_lines(marks, "e")


def test_the_failure_seen_is_the_injected_one_not_its_collateral_even_when_stamped_a_little_before() -> None:
    """elastic may record the kill before the log's stamp (the clock read after the act), and a peer's
    collateral exit first: the kill is what it saw, so long as it came within STAMP_SLACK_S before."""
    events = killed_and_restarted()
    events.insert(5, ev(10.2, "worker_failed", 0, kind="collateral", rank=0, node="n0", exit_code=None,
                        signal="SIGTERM", message=None))
    timeline = build_timeline(events)

    (mark,) = place_injected(timeline, read_injected(line(T0.timestamp() + 10.3), source="e"))

    assert "rank 1 on n0 killed (SIGKILL) 0.10 s earlier" == mark.seen_text()
    assert () == place_injected(timeline, ())


def test_a_preemption_notice_elastic_received_is_what_it_saw_of_an_injected_preemption() -> None:
    events = killed_and_restarted()
    events.insert(5, ev(10.1, "preemption_noticed", 0, source="signal SIGUSR1", deadline_s=1.0))
    timeline = build_timeline(events)

    (mark,) = place_injected(timeline, read_injected(line(T0.timestamp() + 10.0, "preemption"), source="e"))

    assert "a preemption notice (signal SIGUSR1) 0.10 s later" == mark.seen_text()
