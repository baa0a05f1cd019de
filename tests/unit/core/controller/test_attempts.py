"""An attempt's step history: what a rank surely trained after a moment (a stop's catch), never more
than it did, whatever the report pace and however far back the moment is. Pure."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from elastic.core.controller.attempts import STEP_HISTORY_FULL_S, AttemptSteps
from elastic.core.messages import RankStep
from elastic.core.rank_ends import STEPS_AFTER_STOP


def reported(reports: list[tuple[float, int]], rank: int = 0) -> AttemptSteps:
    steps = AttemptSteps()
    for at, step in reports:
        steps.saw([RankStep(rank, step, "output", at)])
    return steps


def test_a_rank_that_stopped_one_step_after_its_catch_trained_fewer_steps_after_it_than_a_stop_allows() -> None:
    """Ten steps a second, a report a second (the node's pace), for half a minute; SIGTERM caught at
    27.5 s, the step under way ends (276) and the rank saves until its exit. Counted from a report
    before the catch (the history kept one every five seconds), the steps trained before it
    (16 here, up to five seconds of them) made a stopped rank look as if it trained on: its
    clean exit was a success."""
    reports = [(float(t), 10 * t) for t in range(1, 28)] + [(28.0, 276), (29.0, 276)]
    steps = reported(reports)
    assert 0 == steps.since(0, 27.5)
    assert steps.since(0, 27.5) < STEPS_AFTER_STOP  # type: ignore[operator]


def test_the_steps_after_a_moment_count_from_the_first_report_at_or_after_it() -> None:
    """A report read at the moment or later shows steps printed by then: only what came after it
    counts. A report exactly at the moment is one of those."""
    steps = reported([(10.0, 100), (11.0, 110), (12.0, 120), (13.0, 130)])
    assert (20, 20, 30) == (steps.since(0, 10.5), steps.since(0, 11.0), steps.since(0, 9.0))


def test_with_no_report_after_a_moment_nothing_says_the_rank_trained_after_it() -> None:
    """The catch came after the rank's last report (it stopped printing steps at once): not known,
    which the stop rule takes as stopped. A rank never reported: not known either."""
    steps = reported([(10.0, 100), (11.0, 110)])
    assert steps.since(0, 11.5) is None
    assert steps.since(1, 0.0) is None


def test_a_catch_before_a_ranks_first_report_counts_from_that_report_not_from_the_first_step_it_showed() -> None:
    """Its first report read steps 0 to 3 at once: they may all have been printed before the catch."""
    steps = AttemptSteps()
    steps.saw([RankStep(0, 3, "output", 1.0, first_step=0)])
    steps.saw([RankStep(0, 9, "output", 2.0)])
    assert (6, 6) == (steps.since(0, 0.5), steps.since(0, 1.0))


def test_every_report_of_the_last_minute_is_kept_so_a_recent_catch_is_measured_to_the_second() -> None:
    """Reports a second apart for five minutes: a catch in the last minute counts from the very next
    report; one four minutes back from a report at most five seconds after it."""
    steps = reported([(float(t), t) for t in range(300)])
    for back in range(1, int(STEP_HISTORY_FULL_S)):
        at = 299.0 - back + 0.5
        assert back - 1 == steps.since(0, at)
    counted = steps.since(0, 299.0 - 240)
    assert counted is not None and 240 - 6 <= counted <= 240


moments = st.lists(st.floats(0.05, 7.0), min_size=1, max_size=400)


@settings(max_examples=200, deadline=None)
@given(gaps=moments, rate=st.floats(0.1, 50.0), catch=st.floats(0.0, 1.0))
def test_the_steps_counted_after_a_moment_are_never_more_than_the_rank_trained_after_it(
    gaps: list[float], rate: float, catch: float
) -> None:
    """A rank training ``rate`` steps a second, reported at any pace, a moment anywhere in its run:
    the steps counted after it are at most the steps it trained after it (a false count there is a
    false success), and within the last minute exactly those up to the first report after it."""
    times = [sum(gaps[: i + 1]) for i in range(len(gaps))]
    reports = [(t, int(rate * t)) for t in times]
    steps = reported(reports)
    at = catch * times[-1]
    counted = steps.since(0, at)
    trained = reports[-1][1] - int(rate * at)
    if counted is None:
        assert at > times[-1] or not any(t >= at for t in times)
        return
    assert counted <= trained
    if times[-1] - at < STEP_HISTORY_FULL_S - 1:
        first_after = next(step for t, step in reports if t >= at)
        assert reports[-1][1] - first_after == counted
