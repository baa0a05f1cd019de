"""Each dead driver of a benchmark job, and what its successor's takeover cost the program."""

from __future__ import annotations

from datetime import datetime, timezone

from goodput.takeovers import takeovers


def _at(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat()


STEPS = [{"step": n, "t": 100.0 + 0.1 * n} for n in range(1, 60)]  # a step every 0.1 s, 100.1 to 105.9


def test_a_takeover_is_timed_from_the_successors_process_start_and_the_steps_through_it_counted() -> None:
    journal = [
        {"event": "run_started", "time": _at(99.0), "process_started_s_ago": 0.5},
        {"event": "attempt_started", "attempt": 0, "time": _at(99.1)},
        {"event": "run_started", "time": _at(103.3), "process_started_s_ago": 0.6},
        {"event": "attempt_adopted", "attempt": 0, "time": _at(103.4)},
    ]
    [found] = takeovers(journal, STEPS, [{"t": 101.05, "kind": "driver_oom"}])
    assert found.kind == "driver_oom" and round(found.adopted_s or 0, 6) == 0.7  # 102.7 → 103.4
    assert 24 == found.steps_during  # steps 11 to 34: trained through the outage
    assert found.slowest_over_median is not None and round(found.slowest_over_median, 6) == 1.0


def test_a_successor_that_starts_an_attempt_of_its_own_restarted_instead() -> None:
    """No step while no driver ran, and the gap to the restart's first step is one long interval."""
    journal = [
        {"event": "run_started", "time": _at(99.0)},
        {"event": "run_started", "time": _at(103.3)},
        {"event": "attempt_started", "attempt": 1, "time": _at(103.4)},
    ]
    restarted = [*STEPS[:10], {"step": 11, "t": 106.0}]  # its first step 5 s after step 10
    [found] = takeovers(journal, restarted, [{"t": 101.05, "kind": "driver_kill"}, {"t": 102.0, "kind": "sigkill"}])
    assert (None, 0) == (found.adopted_s, found.steps_during)
    assert found.slowest_over_median is not None and round(found.slowest_over_median, 6) == 50.0
