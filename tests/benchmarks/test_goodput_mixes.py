"""The mixes draw seeded schedules with the rates, kinds, notices and bursts they stand for."""

from __future__ import annotations

import statistics
from collections import Counter

import pytest
from goodput.mixes import MIXES, generate


def test_a_seed_draws_the_same_schedule_and_another_seed_another() -> None:
    mix = MIXES["llama3"]
    assert generate(mix, 1, events=30) == generate(mix, 1, events=30)
    assert generate(mix, 1, events=30) != generate(mix, 2, events=30)


@pytest.mark.parametrize("name", sorted(MIXES))
def test_a_schedule_of_n_events_has_them_all_and_ends_one_mean_gap_after_the_last(name: str) -> None:
    drawn = generate(MIXES[name], 3, events=25)
    assert len(drawn.events) == 25
    assert drawn.duration_s == pytest.approx(drawn.events[-1].at_s + MIXES[name].mtbf_s)


def test_a_long_llama3_schedule_keeps_the_papers_rate_and_shares() -> None:
    drawn = generate(MIXES["llama3"], 11, events=4000)
    gaps = [b.at_s - a.at_s for a, b in zip(drawn.events, drawn.events[1:], strict=False)]
    assert statistics.mean(gaps) == pytest.approx(54 * 86400 / 466, rel=0.05)
    kinds = Counter(e.kind for e in drawn.events)
    assert kinds["sigkill"] / 4000 == pytest.approx(268 / 466, abs=0.03)
    assert kinds["preemption"] / 4000 == pytest.approx(47 / 466, abs=0.02)
    assert all(e.planned and e.notice_s == 600.0 for e in drawn.events if e.kind == "preemption")
    assert {e.rank for e in drawn.events if e.target == "rank"} == {0, 1}


def test_a_spot_schedule_gives_every_event_a_notice_and_bursts_some() -> None:
    drawn = generate(MIXES["spot"], 5, events=300)
    assert {e.kind for e in drawn.events} == {"preemption"}
    assert {e.notice_s for e in drawn.events} == {30.0, 120.0}
    bursts = Counter(e.burst for e in drawn.events if e.burst is not None)
    assert bursts and all(2 <= n <= 4 for n in bursts.values())
    for burst in bursts:
        times = [e.at_s for e in drawn.events if e.burst == burst]
        assert max(times) - min(times) <= MIXES["spot"].burst_window_s


def test_a_research_cluster_schedule_has_every_kind_at_the_rsc_rate() -> None:
    drawn = generate(MIXES["rsc"], 2, duration_s=2000 * 7.9 * 3600)
    assert len(drawn.events) == pytest.approx(2000, rel=0.1)
    assert {e.kind for e in drawn.events} == {"sigkill", "sigstop", "exception", "node_lost", "preemption", "driver_kill"}


def test_a_schedule_is_asked_for_by_events_or_by_duration_not_both() -> None:
    with pytest.raises(ValueError):
        generate(MIXES["rsc"], 1)
    with pytest.raises(ValueError):
        generate(MIXES["rsc"], 1, events=3, duration_s=10.0)
