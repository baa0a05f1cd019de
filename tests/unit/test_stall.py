"""Steps and stalls, pure: when a rank is stalled, and what the journal says of an attempt's steps."""

from __future__ import annotations

import pytest

from elastic.core.controller import Controller
from elastic.core.events import EventName
from elastic.core.failures import WorkerExit
from elastic.core.fold import fold
from elastic.core.messages import (
    AttemptLaunched, AttemptPlanned, RankStep, RunStarted, StepsSeen, WorkerExited, WorkersStopped,
)
from elastic.core.policy import RestartPolicy
from elastic.core.stall import STALL_K, ProgressPolicy, RankProgress, stall_reason

AUTO = ProgressPolicy(stall_floor_s=2.0)


def _stepping(times: list[float], progress: RankProgress | None = None) -> RankProgress:
    progress = progress or RankProgress()
    for step, at in enumerate(times):
        progress.saw(step, at, "output")
    return progress


def test_no_stall_is_called_before_two_steps() -> None:
    """Before its second step a rank has no window: only --startup-timeout may call it hung."""
    progress = _stepping([0.0])
    assert progress.window_s(AUTO) is None
    assert progress.stalled_for(1e6, AUTO) is None


def test_auto_window_is_the_floor_or_k_times_the_p95_step_time() -> None:
    """Steps of 0.1 s give K × 0.1 s when that is above the floor; the floor otherwise."""
    fast = _stepping([0.1 * i for i in range(20)])
    assert pytest.approx(2.0) == fast.window_s(ProgressPolicy(stall_floor_s=2.0))
    slow = _stepping([1.0 * i for i in range(20)])
    assert pytest.approx(STALL_K * 1.0) == slow.window_s(ProgressPolicy(stall_floor_s=2.0))
    assert 1800.0 == slow.window_s(ProgressPolicy())


def test_a_pause_of_ten_steps_is_within_the_auto_window_a_stall_beyond_it_is_not() -> None:
    """K is above 10: a save or evaluation 10× a step is no stall, whatever the floor."""
    policy = ProgressPolicy(stall_floor_s=0.001)
    progress = _stepping([1.0 * i for i in range(10)])
    assert progress.stalled_for(9.0 + 10.0, policy) is None
    assert pytest.approx(9.0 + STALL_K + 1.0 - 9.0) == progress.stalled_for(9.0 + STALL_K + 1.0, policy)


def test_a_fixed_timeout_replaces_the_auto_window_and_none_calls_no_stall() -> None:
    progress = _stepping([0.0, 1.0])
    assert 5.0 == progress.window_s(ProgressPolicy(stall_auto=False, stall_timeout_s=5.0))
    assert progress.stalled_for(1e6, ProgressPolicy(stall_auto=False)) is None


def test_output_without_a_higher_step_is_no_progress() -> None:
    """A repeated step or an evaluation bar counting from 1 again moves nothing."""
    progress = _stepping([0.0, 0.1, 0.2])
    assert not progress.saw(2, 5.0, "output")
    assert not progress.saw(1, 5.0, "output")
    assert (2, 0.2) == (progress.step, progress.step_at)


def test_heartbeat_steps_win_over_output() -> None:
    """Once a rank reports steps by heartbeat, the output's steps are ignored."""
    progress = _stepping([0.0, 0.1])
    assert progress.saw(7, 0.2, "heartbeat")
    assert not progress.saw(50, 0.3, "output")
    assert ("heartbeat", 7) == (progress.source, progress.step)


def test_a_checkpoint_written_since_the_last_step_holds_the_window_open() -> None:
    """The window counts from the latest write to the checkpoint directory when it is later."""
    progress = _stepping([0.0, 0.1, 0.2])
    assert progress.stalled_for(4.0, AUTO, saved_at=3.0) is None
    assert pytest.approx(5.3) == progress.stalled_for(5.5, AUTO, saved_at=3.0)


def test_stall_reason_names_the_step_and_the_flag() -> None:
    words = stall_reason(42.4, 120, 30.0, ProgressPolicy())
    assert words.startswith("stalled: no new step for 42 s (last step 120)")
    assert "--stall-timeout auto" in words


def _running() -> Controller:
    c = Controller(RestartPolicy.create(max_restarts=1), grace_s=30.0, failure_grace_s=2.0)
    for observation in (RunStarted(0.0), AttemptPlanned(0, 2, 0.1), AttemptLaunched(0, 2, 0.2)):
        c.handle(observation)
    return c


def _seen(at: float, *steps: tuple[int, int]) -> StepsSeen:
    return StepsSeen(0, "n0", tuple(RankStep(rank, step, "output", at) for rank, step in steps), at)


def _named(records: object, name: EventName) -> list[tuple[float, dict[str, object]]]:
    return [(r.at, dict(r.fields)) for r in records if r.event is name]  # type: ignore[attr-defined]


def test_first_step_is_journaled_once_and_step_reached_at_most_every_minute() -> None:
    c = _running()
    first = c.handle(_seen(1.0, (1, 3))).records
    assert [(1.0, {"rank": 1, "step": 3, "source": "output"})] == _named(first, EventName.FIRST_STEP_SEEN)
    assert [] == _named(c.handle(_seen(30.0, (0, 40), (1, 41))).records, EventName.FIRST_STEP_SEEN)
    assert [] == _named(c.handle(_seen(50.0, (1, 60))).records, EventName.STEP_REACHED)
    reached = c.handle(_seen(62.0, (0, 70))).records
    assert [(62.0, {"step": 70, "rank": 0})] == _named(reached, EventName.STEP_REACHED)
    assert [] == _named(c.handle(_seen(100.0, (0, 70))).records, EventName.STEP_REACHED)
    assert {0: 70, 1: 60} == dict(c.rank_steps)


def test_step_reached_is_journaled_when_the_drain_starts_and_when_the_attempt_ends() -> None:
    c = _running()
    c.handle(_seen(1.0, (0, 5)))
    c.handle(_seen(2.0, (0, 9)))
    failed = c.handle(WorkerExited(WorkerExit(0, 1, "n0", 1, 3.0))).records
    assert [(3.0, {"step": 9, "rank": 0})] == _named(failed, EventName.STEP_REACHED)
    events = [r.event for r in failed]
    assert events.index(EventName.STEP_REACHED) < events.index(EventName.PHASE_CHANGED)
    c.handle(_seen(3.5, (0, 10)))  # steps reported while draining
    ended = c.handle(WorkersStopped(0, 4.0, None)).records
    assert [(4.0, {"step": 10, "rank": 0})] == _named(ended, EventName.STEP_REACHED)


def test_the_fold_keeps_the_first_step_and_the_last_step_reached() -> None:
    journal = [
        {"event": "run_started", "time": "2026-12-03T12:00:00+00:00", "attempt": 0},
        {"event": "first_step_seen", "time": "2026-12-03T12:00:02+00:00", "attempt": 0,
         "rank": 1, "step": 3, "source": "output"},
        {"event": "step_reached", "time": "2026-12-03T12:01:02+00:00", "attempt": 0, "step": 70, "rank": 0},
        {"event": "step_reached", "time": "2026-12-03T12:01:05+00:00", "attempt": 0, "step": 75, "rank": 1},
    ]
    [attempt] = fold(journal).attempts.values()
    assert (2.0, 3, 75) == (attempt.first_step_s, attempt.first_step["step"], attempt.step_reached["step"])


def test_the_metrics_show_each_ranks_step() -> None:
    from elastic.core.machine import Phase
    from elastic.run.metrics import RunMetrics, render_metrics

    text = render_metrics(RunMetrics("r", Phase.RUNNING, 0, 2, 2, {}, {}, {}, None, 1.0, step_by_rank={1: 7, 0: 12}))
    assert 'elastic_step{run_id="r",rank="0"} 12' in text and 'elastic_step{run_id="r",rank="1"} 7' in text
