"""A failure schedule is data: checked when built, kept through JSON, compressed keeping its ratios."""

from __future__ import annotations

import pytest
from goodput.schedule import Event, Schedule


def schedule(*events: Event, duration_s: float = 100.0) -> Schedule:
    return Schedule("test", 7, duration_s, mtbf_s=20.0, checkpoint_interval_s=10.0, checkpoint_cost_s=1.0, events=events)


def test_an_event_names_its_target_by_its_kind() -> None:
    assert Event(1.0, "sigkill", rank=1).target == "rank"
    assert Event(1.0, "preemption", notice_s=3.0).target == "node"
    assert Event(1.0, "driver_kill").target == "driver"
    assert Event(1.0, "preemption", notice_s=3.0).describe() == "preemption node (notice 3 s)"
    assert Event(1.0, "sigstop", rank=0).describe() == "sigstop rank 0"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kind": "reboot"},
        {"kind": "sigkill"},  # a rank event without its rank
        {"kind": "node_lost", "rank": 0},
        {"kind": "sigkill", "rank": 0, "notice_s": 2.0},
        {"kind": "preemption", "notice_s": -1.0},
    ],
)
def test_an_event_that_cannot_be_injected_is_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Event(1.0, **kwargs)  # type: ignore[arg-type]


def test_a_schedule_holds_its_events_in_time_order_within_its_duration_and_ranks() -> None:
    with pytest.raises(ValueError, match="time order"):
        schedule(Event(5.0, "node_lost"), Event(1.0, "node_lost"))
    with pytest.raises(ValueError, match="within"):
        schedule(Event(101.0, "node_lost"))
    with pytest.raises(ValueError, match="ranks"):
        schedule(Event(1.0, "sigkill", rank=2))


def test_a_schedule_reads_back_what_it_wrote() -> None:
    original = schedule(Event(1.0, "sigkill", rank=1, cause="GPU"), Event(2.5, "preemption", notice_s=4.0, burst=0))
    assert Schedule.from_json(original.to_json()) == original


def test_compression_divides_every_duration_by_one_factor_and_keeps_the_ratios() -> None:
    original = schedule(Event(40.0, "preemption", notice_s=8.0), Event(60.0, "sigkill", rank=0))
    fast = original.compressed(4.0)
    assert [e.at_s for e in fast.events] == [10.0, 15.0]
    assert fast.events[0].notice_s == 2.0
    assert (fast.duration_s, fast.mtbf_s, fast.checkpoint_interval_s, fast.checkpoint_cost_s) == (25.0, 5.0, 2.5, 0.25)
    assert fast.compression == 4.0
    assert fast.ratios(step_s=0.25)["mtbf_steps"] == 20.0
    kept = ("checkpoint_interval_over_mtbf", "checkpoint_cost_over_interval", "median_notice_over_checkpoint_cost")
    assert {k: fast.ratios(1.0)[k] for k in kept} == {k: original.ratios(1.0)[k] for k in kept}
    with pytest.raises(ValueError):
        original.compressed(0.0)
