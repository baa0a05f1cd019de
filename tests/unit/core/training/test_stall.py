"""Steps and stalls, pure: when a rank is stalled, and what the journal says of an attempt's steps."""

from __future__ import annotations

import pytest

from elastic.core.controller.controller import Controller
from elastic.core.controller.settings import ControllerSettings
from elastic.core.events import EventName
from elastic.core.failures import WorkerExit
from elastic.core.journal.fold import fold
from elastic.core.messages import (
    AttemptLaunched, AttemptPlanned, RankStep, RunStarted, SignOfLife, StepsSeen, WorkerExited, WorkersStopped,
)
from elastic.core.policy.restarts import RestartPolicy
from elastic.core.training.output_steps import Reading, StepReader
from elastic.core.training.stall import STALL_K, TRAINER, ProgressPolicy, RankProgress, stall_reason

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
    """A repeated step, or a lower one, moves nothing."""
    progress = _stepping([0.0, 0.1, 0.2])
    assert not progress.saw(2, 5.0, "output")
    assert not progress.saw(1, 5.0, "output")
    assert (2, 0.2) == (progress.step, progress.step_at)


TRAIN, EVAL = "bar/1000", "bar/200"


def _bar(progress: RankProgress, counter: str, numbers: range | list[int], start: float, every_s: float) -> float:
    """Each number read in a look of its own, ``every_s`` apart from ``start``; the time after the last."""
    at = start
    for number in numbers:
        progress.read([Reading(counter, number)], at)
        at += every_s
    return at


def test_an_evaluation_bar_is_a_sign_of_life_not_the_training_step() -> None:
    """An evaluation over 200 batches at training step 5: the step stays 5 and steps 6... count;
    the evaluation's advance holds the window open, as the training steps do."""
    progress = RankProgress()
    at = _bar(progress, TRAIN, range(0, 6), 0.0, 0.1)
    at = _bar(progress, EVAL, range(0, 201), at, 0.1)  # 20 s of evaluation, 10 times the floor
    assert (5, TRAIN) == (progress.step, progress.training)
    assert progress.stalled_for(at, AUTO) is None
    assert progress.read([Reading(TRAIN, 6)], at)
    assert (6, at) == (progress.step, progress.step_at)


def test_the_training_counter_is_the_first_counter_read() -> None:
    """An evaluation before the first training step (the Trainer's ``eval_on_start``) draws its
    bar after the training bar's empty 0: the training bar stays the training counter."""
    progress = RankProgress()
    assert not progress.read([Reading(TRAIN, 0, empty=True)], 0.0)
    at = _bar(progress, EVAL, range(0, 201), 0.1, 0.01)
    assert (None, TRAIN) == (progress.step, progress.training)
    _bar(progress, TRAIN, range(1, 4), at, 0.1)
    assert 3 == progress.step


# What a resumed Hugging Face Trainer (transformers 5.25, TRL's SFT script, resumed from
# checkpoint-20 of 80 steps) wrote, as the node reads it: a redraw is whole once the next \r
# comes, so a look between tqdm's writes reads the fresh bar's 0 alone.
RESUMED_BAR_LOOKS = [
    "\r  0%|          | 0/80 [00:00<?, ?it/s]\r",
    " 26%|██▋       | 21/80 [00:00<00:00, 194.30it/s]\r                                                \r"
    "{'loss': '2.95', 'grad_norm': '0.6447', 'learning_rate': '1.4e-05', 'entropy': '2.941', "
    "'mean_token_accuracy': '0.06875', 'num_tokens': '520', 'epoch': '0.7812'}",
    "\r 31%|███▏      | 25/80 [00:00<00:00, 194.30it/s]\r",
]


def test_a_resumed_trainers_fresh_bar_is_the_training_counter_but_not_a_step() -> None:
    """The Trainer resumed from step 20 draws a new training bar at 0 (no step done), then, after
    its first step, at the resumed count: the attempt's first step is 21, never 0 (before: the 0
    was the attempt's first step and its step_reached until the next report)."""
    progress, reader = RankProgress(), StepReader()
    steps = []
    for at, line in enumerate(RESUMED_BAR_LOOKS):
        progress.read(reader.read(line), float(at))
        steps.append(progress.step)
    assert [None, 21, 25] == steps
    assert progress.training is not None and progress.training.endswith("/80")
    assert 2 == progress.steps_seen


def test_within_one_look_only_the_training_counter_gives_the_step() -> None:
    progress = RankProgress()
    assert progress.read([Reading(TRAIN, 4), Reading(EVAL, 150), Reading(TRAIN, 5), Reading(EVAL, 190)], 1.0)
    assert 5 == progress.step


def test_without_an_advancing_counter_the_rank_stalls() -> None:
    """A bar redrawn at the same number (a retry loop) is no sign of life; the window runs
    from the last advance of any counter."""
    progress = RankProgress()
    at = _bar(progress, TRAIN, range(0, 6), 0.0, 0.1)
    at = _bar(progress, EVAL, range(0, 11), at, 0.1)
    last_advance = at - 0.1
    _bar(progress, EVAL, [10] * 40, at, 0.1)
    _bar(progress, "NCCL-ish counter", [3] * 40, at, 0.1)
    assert progress.stalled_for(last_advance + 2.0, AUTO) is None
    assert pytest.approx(last_advance + 2.5 - 0.5) == progress.stalled_for(last_advance + 2.5, AUTO)


def test_a_counter_that_falls_back_counts_again_from_there() -> None:
    """A second evaluation pass (the same bar from 0 again) is a sign of life as it climbs."""
    progress = RankProgress()
    at = _bar(progress, TRAIN, range(0, 6), 0.0, 0.1)
    at = _bar(progress, EVAL, range(0, 201), at, 0.01)
    at = _bar(progress, TRAIN, range(6, 9), at, 0.1)
    at = _bar(progress, EVAL, range(0, 201), at, 0.1)  # 20 s
    assert progress.stalled_for(at, AUTO) is None
    assert 8 == progress.step


def test_a_training_counter_falling_back_is_no_step_but_climbing_again_is_life() -> None:
    """A plain ``step N`` counter read again from 1 (an evaluation loop printing its own steps)
    is not the training step, until it passes the highest training step."""
    plain = "plain step report"
    progress = RankProgress()
    at = _bar(progress, plain, range(1, 121), 0.0, 0.1)
    at = _bar(progress, plain, range(1, 51), at, 0.1)  # 5 s, above the floor
    assert (120, pytest.approx(11.9)) == (progress.step, progress.step_at)
    assert progress.stalled_for(at, AUTO) is None
    assert progress.read([Reading(plain, 121)], at)


def test_counters_other_than_the_training_one_are_bounded() -> None:
    """Bars of ever new totals: the least recently read are forgotten (and count again)."""
    progress = RankProgress()
    progress.read([Reading(TRAIN, 0), Reading("bar/1", 1), Reading("bar/1", 2)], 1.0)
    for total in range(2, 1000):
        progress.read([Reading(f"bar/{total}", 1)], 2.0)  # a first reading: no sign of life
    progress.read([Reading("bar/1", 3)], 3.0)  # forgotten: a first reading again
    assert 1.0 == progress.alive_at
    progress.read([Reading("bar/1", 4)], 4.0)
    assert 4.0 == progress.alive_at


def test_lines_read_at_once_give_the_highest_as_the_step_and_the_first_as_the_first_step() -> None:
    """``step 0`` to ``step 3`` in one read (a burst, one write): the rank is at step 3, and the
    first step it showed is 0, not 3 (before: the first step was the last of the read)."""
    progress, reader = RankProgress(), StepReader()
    readings = [r for n in range(4) for r in reader.read(f"step {n} loss 2.31")]
    assert progress.read(readings, 1.0)
    assert (3, 0, 1) == (progress.step, progress.first_step, progress.steps_seen)
    assert progress.read(reader.read("step 4 loss 2.31"), 1.1)
    assert (4, 0) == (progress.step, progress.first_step)


def test_the_first_step_is_the_first_training_step_shown_of_whichever_source() -> None:
    """An evaluation bar and an empty training bar read before it are no first step; a first step
    by heartbeat is that step, and the output's steps after it do not change it."""
    progress = RankProgress()
    assert progress.read([Reading(TRAIN, 0, empty=True), Reading(TRAIN, 21), Reading(TRAIN, 25)], 1.0)
    assert (25, 21) == (progress.step, progress.first_step)
    by_heartbeat = RankProgress()
    assert by_heartbeat.saw(5, 1.0, "heartbeat")
    assert not by_heartbeat.read([Reading(TRAIN, 2), Reading(TRAIN, 9)], 1.1)
    assert (5, 5) == (by_heartbeat.step, by_heartbeat.first_step)


def test_a_resumed_trainers_first_step_is_its_first_drawn_after_the_fresh_bar() -> None:
    progress, reader = RankProgress(), StepReader()
    for at, line in enumerate(RESUMED_BAR_LOOKS):
        progress.read(reader.read(line), float(at))
    assert (25, 21) == (progress.step, progress.first_step)


def test_heartbeat_steps_win_over_output() -> None:
    """Once a rank reports steps by heartbeat, the output's steps are ignored; its counters
    advancing are still signs of life."""
    progress = _stepping([0.0, 0.1])
    assert progress.saw(7, 0.2, "heartbeat")
    assert not progress.saw(50, 0.3, "output")
    assert not progress.read([Reading("bar/9", 1), Reading("bar/9", 2)], 0.4)
    assert ("heartbeat", 7, 0.4) == (progress.source, progress.step, progress.alive_at)


def test_the_trainers_record_counts_only_until_the_output_or_a_heartbeat_shows_a_step() -> None:
    """Steps from the Hugging Face Trainer's trainer_state.json and log lines are the least exact:
    the output's steps take over from them for good, and the heartbeat's from both."""
    progress = RankProgress()
    assert progress.saw(50, 1.0, TRAINER) and progress.saw(60, 2.0, TRAINER)
    assert not progress.saw(55, 3.0, TRAINER)
    assert progress.saw(61, 4.0, "output")
    assert not progress.saw(100, 5.0, TRAINER)
    assert ("output", 61, 1) == (progress.source, progress.step, progress.steps_seen)
    assert progress.saw(62, 6.0, "heartbeat") and not progress.saw(200, 7.0, TRAINER)
    assert ("heartbeat", 62) == (progress.source, progress.step)


def test_a_rank_whose_steps_come_from_the_trainers_record_is_never_called_stalled() -> None:
    """They come a save or logging_steps apart and are the job's pace: no stall window from them."""
    progress = RankProgress()
    for step, at in ((50, 0.0), (100, 1.0), (150, 2.0)):
        progress.saw(step, at, TRAINER)
    assert progress.window_s(AUTO) is None and progress.stalled_for(10_000.0, AUTO) is None
    assert progress.window_s(ProgressPolicy(stall_auto=False, stall_timeout_s=5.0)) is None


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
    c = Controller(RestartPolicy.create(max_restarts=1), ControllerSettings(grace_s=30.0, failure_grace_s=2.0))
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
    assert [(1.0, {"rank": 1, "step": 3, "source": "output", "seen_s_ago": 0.0})] == _named(first, EventName.FIRST_STEP_SEEN)
    assert [] == _named(c.handle(_seen(30.0, (0, 40), (1, 41))).records, EventName.FIRST_STEP_SEEN)
    assert [] == _named(c.handle(_seen(50.0, (1, 60))).records, EventName.STEP_REACHED)
    reached = c.handle(_seen(62.0, (0, 70))).records
    assert [(62.0, {"step": 70, "rank": 0, "seen_s_ago": 0.0})] == _named(reached, EventName.STEP_REACHED)
    assert [] == _named(c.handle(_seen(100.0, (0, 70))).records, EventName.STEP_REACHED)
    assert {0: 70, 1: 60} == dict(c.rank_steps)


def test_a_first_step_seen_before_the_journals_clock_says_how_long_before() -> None:
    """The node saw the first step at 1.0 s, but the controller had already dated a record 1.4 s (a
    sign of life handled first): ``first_step_seen`` is dated 1.4 s and says it was seen 0.4 s
    before, and the fold places the attempt's first step at 1.0 s (before: 1.4 s, the ledger's
    start-up 0.4 s too long)."""
    c = _running()
    c.handle(SignOfLife(0, 0, "n0", "output", 1.4))
    first = c.handle(StepsSeen(0, "n0", (RankStep(1, 3, "output", 1.0),), 1.4)).records
    assert [(1.4, {"rank": 1, "step": 3, "source": "output", "seen_s_ago": 0.4})] == _named(
        first, EventName.FIRST_STEP_SEEN)


def test_the_first_step_journaled_is_the_first_its_rank_showed_not_the_highest_read_with_it() -> None:
    """A node read step 0 to step 3 at once: ``first_step_seen`` says step 0 (before: 3); the live
    step, what the status line and state.json show, is 3."""
    c = _running()
    first = c.handle(StepsSeen(0, "n0", (RankStep(1, 3, "output", 1.0, first_step=0),), 1.0)).records
    assert [(1.0, {"rank": 1, "step": 0, "source": "output", "seen_s_ago": 0.0, "read_to_step": 3})] == _named(
        first, EventName.FIRST_STEP_SEEN)
    assert 3 == c.live_step
    c.handle(StepsSeen(0, "n0", (RankStep(1, 9, "output", 2.0),), 2.0))
    assert (9, {1: 9}) == (c.live_step, dict(c.rank_steps))


def test_the_steps_a_rank_trained_since_before_its_first_step_count_from_its_first_report() -> None:
    """Steps 0 to 3 read at once may all have been printed before the moment: not counted."""
    from elastic.core.controller.attempts import AttemptSteps

    steps = AttemptSteps()
    steps.saw([RankStep(0, 3, "output", 1.0, first_step=0)])
    steps.saw([RankStep(0, 9, "output", 2.0)])
    assert (6, 0) == (steps.since(0, 0.5), steps.since(0, 1.5))


def test_a_ranks_steps_since_a_moment_are_known_minutes_back_at_a_report_a_second() -> None:
    """Reports a second apart (the node's pace) keep over five minutes of a rank's steps, as
    reports five seconds apart did: a stop caught four minutes ago is still measured."""
    from elastic.core.controller.attempts import STEP_HISTORY, STEP_HISTORY_EVERY_S, AttemptSteps

    steps = AttemptSteps()
    for second in range(400):
        steps.saw([RankStep(0, second, "output", float(second))])
    assert STEP_HISTORY * STEP_HISTORY_EVERY_S >= 300
    assert steps.since(0, 399.5) is None  # no report since
    assert 399 - 150 == steps.since(0, 150.0)
    assert steps.since(0, 399.0 - 240) is not None


def test_step_reached_is_journaled_when_the_drain_starts_and_when_the_attempt_ends_with_when_it_was_seen() -> None:
    c = _running()
    c.handle(_seen(1.0, (0, 5)))
    c.handle(_seen(2.0, (0, 9)))
    failed = c.handle(WorkerExited(WorkerExit(0, 1, "n0", 1, 3.0))).records
    assert [(3.0, {"step": 9, "rank": 0, "seen_s_ago": 1.0})] == _named(failed, EventName.STEP_REACHED)
    events = [r.event for r in failed]
    assert events.index(EventName.STEP_REACHED) < events.index(EventName.PHASE_CHANGED)
    c.handle(_seen(3.5, (0, 10)))  # steps reported while draining
    ended = c.handle(WorkersStopped(0, 4.0, None)).records
    assert [(4.0, {"step": 10, "rank": 0, "seen_s_ago": 0.5})] == _named(ended, EventName.STEP_REACHED)


def test_the_drains_record_lists_the_checkpoint_saves_the_driver_found() -> None:
    c = _running()
    c.handle(_seen(1.0, (0, 5)))
    c.handle(WorkerExited(WorkerExit(0, 1, "n0", 1, 3.0)))
    ended = c.handle(WorkersStopped(0, 4.0, 5, ((2.5, 2.0),))).records
    [(_, fields)] = _named(ended, EventName.WORKERS_STOPPED)
    assert [[2.5, 2.0]] == fields["checkpoint_saves_s_ago"]


def test_the_takeovers_record_of_a_dead_drivers_attempt_lists_the_saves_found_then() -> None:
    from elastic.core.messages import Resumed

    c = Controller(RestartPolicy.create(max_restarts=1), ControllerSettings(grace_s=30.0, failure_grace_s=2.0))
    records = c.handle(RunStarted(0.0, Resumed(0, interrupted=3, saves_s_ago=((9.0, 8.0),)))).records
    [(_, fields)] = _named(records, EventName.WORKERS_STOPPED)
    assert [[9.0, 8.0]] == fields["checkpoint_saves_s_ago"]


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
    from elastic.core.controller.machine import Phase
    from elastic.run.records.metrics import RunMetrics, render_metrics

    text = render_metrics(RunMetrics("r", Phase.RUNNING, 0, 2, 2, {}, {}, {}, None, 1.0, step_by_rank={1: 7, 0: 12}))
    assert 'elastic_step{run_id="r",rank="0"} 12' in text and 'elastic_step{run_id="r",rank="1"} 7' in text
