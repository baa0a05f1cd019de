"""The goodput ledger, from hand-made journals: each cause where it belongs, and the causes adding up
to the run's wall time."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from elastic.core.events import EventName
from elastic.core.journal.fold import JOURNAL_VERSION, fold
from elastic.core.journal.ledger import BADPUT_CAUSES, CAUSES, run_ledger, stated_silence_s, typical_step_s

from journal_events import T0, ev, phase


def started(t: float, attempt: int, resume: int | None = None) -> list[dict[str, Any]]:
    return [
        ev(t, "attempt_started", attempt, world_size=2, nodes=["n0"], nproc_per_node=[2], resume_step=resume),
        phase(t, attempt, "pending", "launching", "launch"),
    ]


def first_step(t: float, attempt: int, step: int) -> dict[str, Any]:
    return ev(t, EventName.FIRST_STEP_SEEN.value, attempt, rank=0, step=step, source="output")


def step_reached(t: float, attempt: int, step: int) -> dict[str, Any]:
    return ev(t, EventName.STEP_REACHED.value, attempt, rank=0, step=step)


def failed(t: float, attempt: int, kind: str = "exited", message: str | None = None, **fields: Any) -> dict[str, Any]:
    return ev(t, "worker_failed", attempt, kind=kind, rank=0, node="n0", exit_code=1, signal=None,
              message=message, **fields)


def drained(t: float, attempt: int, stopped: float, checkpoint: int | None, *, relaunch: bool) -> list[dict[str, Any]]:
    return [
        phase(t, attempt, "running", "draining", "drain"),
        ev(stopped, "workers_stopped", attempt, checkpoint_step=checkpoint),
        phase(stopped, attempt, "draining", "pending" if relaunch else "done",
              "relaunch" if relaunch else "finish"),
    ]


def restarted_run() -> list[dict[str, Any]]:
    """Attempt 0: launched at 1, running at 2, first step (1) at 12, step 100 at 112, fails at 112
    (checkpoint 80); drained by 114. Backoff of 3 s from 114, nodes until 118. Attempt 1 resumes from
    80: running at 119, first step (81) at 129, step 200 at 248 (1 s a step), succeeds, drained at 249."""
    return [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(1, 0),
        phase(2, 0, "launching", "running", "launched"),
        ev(4, "sign_of_life_seen", 0, rank=0, node="n0", source="output"),
        first_step(12, 0, 1),
        step_reached(72, 0, 61),
        failed(112, 0),
        step_reached(112, 0, 100),
        *drained(112, 0, 114, 80, relaunch=True),
        ev(114, "backoff_started", 0, delay_s=3.0, level=1),
        *started(118, 1, resume=80),
        phase(119, 1, "launching", "running", "launched"),
        first_step(129, 1, 81),
        step_reached(189, 1, 141),
        ev(248, "worker_exited", 1, rank=0, node="n0", exit_code=0),
        step_reached(248, 1, 200),
        *drained(248, 1, 249, 200, relaunch=False),
        ev(249, "run_finished", 1, outcome="succeeded", exit_status=0, reason="-", root_cause=None),
    ]


def test_every_cause_of_a_restarted_run_is_where_it_happened() -> None:
    ledger = run_ledger(fold(restarted_run()), until_s=250.0)
    first, second = ledger.of(0), ledger.of(1)
    assert first is not None and second is not None
    a0 = first.seconds
    assert a0["waiting_for_nodes"] == pytest.approx(1.0)  # run start to the attempt's plan
    assert a0["launch"] == pytest.approx(1.0)
    assert a0["startup"] == pytest.approx(10.0)  # running to the first step
    # Nothing before it to redo; step 1 at 12 to step 100 at 112 is 1.01 s a step, the run's
    # typical step 1 s (attempt 1's pace): 1 % of it was slow.
    assert a0["productive"] + a0["slow_steps"] == pytest.approx(100.0)
    assert a0["slow_steps"] == pytest.approx(1.0)
    assert a0["redone"] == 0.0 and a0["detection"] == pytest.approx(0.0)
    assert a0["drain"] == pytest.approx(2.0)
    a1 = second.seconds
    assert a1["backoff"] == pytest.approx(3.0)
    assert a1["waiting_for_nodes"] == pytest.approx(1.0)  # after the backoff, until planned
    assert a1["launch"] == pytest.approx(1.0)
    assert a1["startup"] == pytest.approx(10.0)
    # resumed from 80; attempt 0 had reached 100: 20 steps again at attempt 1's 1 s a step
    assert a1["redone"] == pytest.approx(20.0)
    assert a1["productive"] == pytest.approx(119.0 - 20.0)
    assert a1["drain"] == pytest.approx(1.0)
    assert ledger.run.seconds["other"] == pytest.approx(1.0)  # the last record to the report
    assert ledger.run.total_s == pytest.approx(250.0)
    assert ledger.has_steps


def test_the_run_ledger_is_the_sum_of_its_attempts_plus_the_launcher() -> None:
    ledger = run_ledger(fold(restarted_run()), until_s=250.0)
    for cause in CAUSES:
        attempts = sum(row.seconds[cause] for _, row in ledger.attempts)
        extra = 250.0 - 249.0 if cause == "other" else 0.0
        assert ledger.run.seconds[cause] == pytest.approx(attempts + extra)
    assert set(BADPUT_CAUSES) == set(CAUSES) - {"productive"}
    assert ledger.run.to_dict().keys() == set(CAUSES)


def _hung_at_80(**hang: Any) -> list[dict[str, Any]]:
    return [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(0, 0, "launching", "running", "launched"),
        first_step(10, 0, 1),
        failed(80, 0, kind="hung", **hang),
        step_reached(80, 0, 41),
        *drained(80, 0, 85, None, relaunch=False),
        ev(85, "run_finished", 0, outcome="failed", exit_status=1, reason="-", root_cause=None),
    ]


def test_a_hang_is_detected_from_the_silence_its_record_carries() -> None:
    """The rank trained from 10 to 50, then was silent; called hung at 80 after 30 s (the record's
    ``silent_s``): detection 30 s, whatever the message's words say."""
    hang = {"message": "no heartbeat for 12.0s (--heartbeat-timeout 30s)", "silent_s": 30.0}
    seconds = run_ledger(fold(_hung_at_80(**hang))).run.seconds
    assert seconds["detection"] == pytest.approx(30.0)
    assert seconds["productive"] == pytest.approx(40.0)
    assert sum(seconds.values()) == pytest.approx(85.0)


def test_a_startup_hang_carries_its_silence_since_the_start() -> None:
    """No first output within --startup-timeout: the watch measured the silence from the rank's start,
    which reaches back to the attempt's running start (clamped there)."""
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(1, 0, "launching", "running", "launched"),
        failed(301, 0, kind="hung", message="no first output within --startup-timeout 300s", silent_s=300.4),
        *drained(301, 0, 302, None, relaunch=False),
    ]
    seconds = run_ledger(fold(events)).run.seconds
    assert seconds["detection"] == pytest.approx(300.0)


def test_an_older_journal_s_hang_is_detected_from_the_silence_its_message_states() -> None:
    """A journal written before ``silent_s``: the rank trained from 10 to 50, then was silent; called
    hung at 80 after 30 s, as its message says: detection 30 s."""
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(0, 0, "launching", "running", "launched"),
        first_step(10, 0, 1),
        failed(80, 0, kind="hung", message="no heartbeat for 30.0s (--heartbeat-timeout 30s)"),
        step_reached(80, 0, 41),
        *drained(80, 0, 85, None, relaunch=False),
        ev(85, "run_finished", 0, outcome="failed", exit_status=1, reason="-", root_cause=None),
    ]
    seconds = run_ledger(fold(events)).run.seconds
    assert seconds["detection"] == pytest.approx(30.0)
    assert seconds["startup"] == pytest.approx(10.0)
    assert seconds["productive"] == pytest.approx(40.0)
    assert seconds["drain"] == pytest.approx(5.0)
    assert sum(seconds.values()) == pytest.approx(85.0)


def test_a_hang_before_any_output_is_detection_from_the_start() -> None:
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(1, 0, "launching", "running", "launched"),
        failed(301, 0, kind="hung", message="no first output within --startup-timeout 300s"),
        *drained(301, 0, 302, None, relaunch=False),
    ]
    seconds = run_ledger(fold(events)).run.seconds
    assert seconds["detection"] == pytest.approx(300.0)
    assert seconds["running_no_steps"] == 0.0 and seconds["productive"] == 0.0


def test_an_exit_hang_is_detected_from_the_exit_timer() -> None:
    """Rank 0 finished at 50; rank 1 was still running at 80 and killed: 30 s of detection."""
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(0, 0, "launching", "running", "launched"),
        first_step(5, 0, 1),
        step_reached(50, 0, 46),
        ev(50, "worker_exited", 0, rank=0, node="n0", exit_code=0),
        ev(50, "exit_timer_started", 0, rank=0, exit_timeout_s=30.0, still_running=1),
        failed(80, 0, kind="exit-hung", message="still running 30 s after rank 0 exited 0"),
        *drained(80, 0, 81, None, relaunch=False),
    ]
    seconds = run_ledger(fold(events)).run.seconds
    assert seconds["detection"] == pytest.approx(30.0)
    assert seconds["productive"] == pytest.approx(45.0)


def test_a_rank_left_working_after_a_peers_exit_0_is_detected_from_its_last_sign_of_life() -> None:
    """Rank 0 finished at 50; rank 1 was spared at 80 (still working) and killed at 110, silent for the
    30 s timeout: its work ended at 80, so detection is 30 s, not the 60 s since the exit 0."""
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(0, 0, "launching", "running", "launched"),
        first_step(5, 0, 1),
        step_reached(50, 0, 46),
        ev(50, "worker_exited", 0, rank=0, node="n0", exit_code=0),
        ev(50, "exit_timer_started", 0, rank=0, exit_timeout_s=30.0, still_running=1),
        ev(80, "exit_hang_spared", 0, ranks=[1], reason="rank 1 still working 30 s after rank 0 exited 0"),
        failed(110, 0, kind="exit-hung", message="still running 60 s after rank 0 exited 0 and silent for 30 s"),
        *drained(110, 0, 111, None, relaunch=False),
    ]
    seconds = run_ledger(fold(events)).run.seconds
    assert seconds["detection"] == pytest.approx(30.0)


def test_a_stop_while_a_rank_runs_after_a_peers_exit_0_detects_nothing() -> None:
    """Rank 0 finished at 50; the launcher was stopped at 60 and rank 1 ended as collateral: it was
    never found hung, so none of its time is detection."""
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(0, 0, "launching", "running", "launched"),
        first_step(5, 0, 1),
        step_reached(50, 0, 46),
        ev(50, "worker_exited", 0, rank=0, node="n0", exit_code=0),
        ev(50, "exit_timer_started", 0, rank=0, exit_timeout_s=30.0, still_running=1),
        phase(60, 0, "running", "draining", "drain"),
        failed(61, 0, kind="collateral", message="ended by the drain"),
        ev(61, "workers_stopped", 0, checkpoint_step=None),
        phase(61, 0, "draining", "done", "finish"),
    ]
    seconds = run_ledger(fold(events)).run.seconds
    assert seconds["detection"] == pytest.approx(0.0)
    assert (10.0, 45.0) == pytest.approx((seconds["exit_wait"], seconds["productive"]))  # not training


def test_a_rank_that_trains_on_after_a_peers_exit_0_is_training_until_its_last_step() -> None:
    """Rank 0 exited 0 at 50; rank 1 showed step 70 at 70 (it trained on), then nothing until the
    stop at 80: 65 s of training, 10 s waiting for it to exit. A step of the exited rank's, journaled
    late, is no training after its exit."""
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(0, 0, "launching", "running", "launched"),
        first_step(5, 0, 1),
        ev(50, "worker_exited", 0, rank=0, node="n0", exit_code=0),
        ev(50, "exit_timer_started", 0, rank=0, exit_timeout_s=300.0, still_running=1),
        ev(70, EventName.STEP_REACHED.value, 0, rank=1, step=70),
        ev(75, EventName.STEP_REACHED.value, 0, rank=0, step=46),
        phase(80, 0, "running", "draining", "drain"),
        ev(81, "workers_stopped", 0, checkpoint_step=None),
        phase(81, 0, "draining", "done", "finish"),
    ]
    seconds = run_ledger(fold(events)).run.seconds
    assert (65.0, 10.0) == pytest.approx((seconds["productive"], seconds["exit_wait"]))


def test_a_run_without_steps_says_so_instead_of_calling_it_productive() -> None:
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(1, 0, "launching", "running", "launched"),
        ev(2, "sign_of_life_seen", 0, rank=0, node="n0", source="output"),
        *drained(41, 0, 42, None, relaunch=False),
        ev(42, "run_finished", 0, outcome="succeeded", exit_status=0, reason="-", root_cause=None),
    ]
    ledger = run_ledger(fold(events))
    assert not ledger.has_steps
    assert ledger.run.seconds["running_no_steps"] == pytest.approx(40.0)
    assert ledger.run.seconds["productive"] == 0.0 and ledger.run.seconds["startup"] == 0.0
    assert "running (no step information)" in ledger.run.describe()


def test_an_attempt_that_never_reached_a_step_spent_its_running_time_starting_up() -> None:
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(0, 0, "launching", "running", "launched"),
        first_step(5, 0, 1),
        failed(20, 0),
        step_reached(20, 0, 16),
        *drained(20, 0, 21, None, relaunch=True),
        *started(21, 1),
        phase(22, 1, "launching", "running", "launched"),
        failed(30, 1),  # died while importing
        *drained(30, 1, 31, None, relaunch=False),
    ]
    second = run_ledger(fold(events)).of(1)
    assert second is not None
    assert second.seconds["startup"] == pytest.approx(8.0)
    assert second.seconds["running_no_steps"] == 0.0


def test_an_attempt_that_printed_output_but_no_step_was_running_after_its_first_output() -> None:
    """Attempt 1 shows no step (a trainer with tqdm off) but prints from 25 s on: start-up until
    then, running with no step information after it, never start-up to a step it never showed."""
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(0, 0, "launching", "running", "launched"),
        first_step(5, 0, 1),
        failed(20, 0),
        step_reached(20, 0, 16),
        *drained(20, 0, 21, None, relaunch=True),
        *started(21, 1),
        phase(22, 1, "launching", "running", "launched"),
        ev(25, "sign_of_life_seen", 1, rank=0, node="n0", source="output"),
        ev(40, "worker_exited", 1, rank=0, node="n0", exit_code=0),
        *drained(40, 1, 41, None, relaunch=False),
    ]
    second = run_ledger(fold(events)).of(1)
    assert second is not None
    assert second.seconds["startup"] == pytest.approx(3.0)
    assert second.seconds["running_no_steps"] == pytest.approx(15.0)
    assert second.seconds["productive"] == 0.0


def test_without_a_checkpoint_the_redone_steps_start_where_the_attempt_started_counting() -> None:
    """No --checkpoint-dir: attempt 1 trains from step 1 again; attempt 0 had reached 20."""
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(0, 0, "launching", "running", "launched"),
        first_step(1, 0, 1),
        failed(20, 0),
        step_reached(20, 0, 20),
        *drained(20, 0, 20, None, relaunch=True),
        *started(20, 1),
        phase(20, 1, "launching", "running", "launched"),
        first_step(22, 1, 1),
        step_reached(22 + 2 * 29, 1, 30),  # 2 s a step
        *drained(80, 1, 80, None, relaunch=False),
    ]
    second = run_ledger(fold(events)).of(1)
    assert second is not None
    assert second.seconds["redone"] == pytest.approx(20 * 2.0)
    assert second.seconds["productive"] == pytest.approx(58.0 - 40.0)


def test_an_attempt_that_fails_before_the_old_high_water_mark_redid_all_it_trained() -> None:
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(0, 0, "launching", "running", "launched"),
        first_step(1, 0, 1),
        failed(100, 0),
        step_reached(100, 0, 100),
        *drained(100, 0, 100, 50, relaunch=True),
        *started(100, 1, resume=50),
        phase(100, 1, "launching", "running", "launched"),
        first_step(101, 1, 51),
        failed(121, 1),
        step_reached(121, 1, 71),
        *drained(121, 1, 121, 70, relaunch=False),
    ]
    second = run_ledger(fold(events)).of(1)
    assert second is not None
    assert second.seconds["redone"] == pytest.approx(20.0)
    assert second.seconds["productive"] == pytest.approx(0.0)


def test_a_failure_long_after_the_steps_stopped_coming_is_detection_from_the_last_step() -> None:
    """A rank hung with no hang watch on; its peer's collective timed out 30 s later and it exited:
    the silence is detection, as a hang's is, not training. Steps came every second until 20."""
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(0, 0, "launching", "running", "launched"),
        first_step(1, 0, 1),
        *(step_reached(t, 0, t) for t in range(2, 21)),
        failed(51, 0),
        *drained(51, 0, 52, 10, relaunch=False),
    ]
    seconds = run_ledger(fold(events)).run.seconds
    assert seconds["productive"] == pytest.approx(20.0)  # the first step to the last, and one step's pace
    assert seconds["detection"] == pytest.approx(30.0)


def test_a_failure_within_the_steps_pace_ends_training_where_it_came() -> None:
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(0, 0, "launching", "running", "launched"),
        first_step(1, 0, 1),
        *(step_reached(t, 0, t) for t in range(2, 21)),
        failed(20.5, 0),
        *drained(20.5, 0, 21, 10, relaunch=False),
    ]
    seconds = run_ledger(fold(events)).run.seconds
    assert seconds["productive"] == pytest.approx(19.5)
    assert seconds["detection"] == pytest.approx(0.0)


def test_a_live_run_is_counted_up_to_now() -> None:
    """The last attempt is still running: its open span runs to ``until_s``, all of it training."""
    events = restarted_run()[:-7]  # attempt 1 running, last record its step 141 at 189
    ledger = run_ledger(fold(events), until_s=200.0)
    assert ledger.run.total_s == pytest.approx(200.0)
    second = ledger.of(1)
    assert second is not None
    assert second.seconds["productive"] + second.seconds["redone"] == pytest.approx(200.0 - 129.0)


def test_a_dead_drivers_downtime_is_the_launchers_remainder() -> None:
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(0, 0, "launching", "running", "launched"),
        ev(10, "sign_of_life_seen", 0, rank=0, node="n0", source="output"),
        ev(60, "run_resumed", 0),  # the driver died after 10 s
        *started(61, 1),
        phase(61, 1, "launching", "running", "launched"),
        *drained(70, 1, 70, None, relaunch=False),
    ]
    ledger = run_ledger(fold(events))
    assert ledger.run.seconds["other"] == pytest.approx(50.0)
    assert ledger.run.total_s == pytest.approx(70.0)


def test_a_record_dated_before_the_one_before_it_starts_no_phase_before_the_last_ended() -> None:
    """A journal written before the controller kept one clock: rank 0's exit, seen during the
    launch, was dated before ``running``. The fold reads it at ``running``'s time: the phases do
    not overlap and the causes add up to the run's 0.100 s (they came to 0.134 s)."""
    events = [
        ev(0.0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0.005, 0),
        phase(0.080, 0, "launching", "running", "launched"),
        failed(0.034, 0),
        ev(0.034, "budget_exhausted", 0, budget="failures"),
        phase(0.034, 0, "running", "draining", "drain"),
        ev(0.100, "workers_stopped", 0, checkpoint_step=None),
        phase(0.100, 0, "draining", "done", "finish"),
        ev(0.100, "run_finished", 0, outcome="failed", exit_status=1, reason="-", root_cause=None),
    ]
    run = fold(events)
    [attempt] = run.closed()
    assert ["pending", "launching", "draining"] == [s.phase for s in attempt.spans]
    assert [0.0, 0.005, 0.005, 0.080, 0.080, 0.100] == pytest.approx(
        [t for s in attempt.spans for t in (s.start_s, s.end_s)]
    )
    ledger = run_ledger(run)
    assert ledger.run.total_s == pytest.approx(0.100)
    assert ledger.run.seconds["launch"] == pytest.approx(0.075)
    assert ledger.run.seconds["drain"] == pytest.approx(0.020)
    assert attempt.failures[0].at_s == pytest.approx(0.080)


def test_the_silence_a_hang_record_states() -> None:
    assert stated_silence_s("no heartbeat for 42.5s (--heartbeat-timeout 30s)") == 42.5
    assert stated_silence_s("no new step for 1800 s (--stall-floor 1800s)") == 1800.0
    stalled = "stalled: no new step for 42 s (last step 120); --stall-timeout auto allows 30 s"
    assert stated_silence_s(stalled) == 42.0
    assert stated_silence_s("exited") is None
    assert stated_silence_s(None) is None


def test_the_page_draws_a_stacked_bar_for_the_run_and_each_attempt() -> None:
    from elastic.core.journal.timeline import build_timeline
    from elastic.views.timeline_html import LEDGER_COLORS, render_html

    timeline = build_timeline(restarted_run())
    page = render_html(timeline)

    assert 1 == page.count('data-ledger="run"')
    assert ["0", "1"] == re.findall(r'data-ledger-attempt="(\d+)"', page)
    run_bar = page.split('data-ledger="run"', 1)[1].split("</div></div>", 1)[0]
    shown = re.findall(r'data-cause="([a-z_]+)" style="flex-grow:([0-9.]+)', run_bar)
    assert dict(timeline.ledger) == pytest.approx({c: float(s) for c, s in shown} | {
        c: 0.0 for c, s in timeline.ledger if s == 0})
    assert set(LEDGER_COLORS) == set(CAUSES)
    assert len(set(LEDGER_COLORS.values())) == len(CAUSES)
    assert sum(s for _, s in timeline.ledger) == pytest.approx(timeline.duration_s)


def test_a_backoff_journaled_before_the_relaunch_is_the_next_attempts() -> None:
    """The controller journals ``backoff_started`` (for the next attempt) in the step that ends the
    drain, before the relaunch's phase change: the wait is still the next attempt's backoff, and
    that attempt begins at the relaunch."""
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(1, 0, "launching", "running", "launched"),
        failed(10, 0),
        phase(10, 0, "running", "draining", "drain"),
        ev(11, "workers_stopped", 0, checkpoint_step=None),
        ev(11, "backoff_started", 1, delay_s=4.0, level=1),
        phase(11, 0, "draining", "pending", "relaunch"),
        *started(16, 1),
        phase(17, 1, "launching", "running", "launched"),
        *drained(20, 1, 21, None, relaunch=False),
    ]
    run = fold(events)
    second = run_ledger(run).of(1)
    assert second is not None
    assert second.seconds["backoff"] == pytest.approx(4.0)
    assert second.seconds["waiting_for_nodes"] == pytest.approx(1.0)
    assert run.attempts[1].begun_s == pytest.approx(11.0)
    assert [s.phase for s in run.closed()[1].spans][:2] == ["backoff", "pending"]


@pytest.mark.parametrize(
    ("first_seen", "resume", "startup_s"),
    [
        (4, None, 7.0),  # steps 1-3 ran before step 4 was read: dated back at 1 s a step
        (14, 10, 7.0),  # resumed from 10: steps 11-13 ran before
        (501, None, 10.0),  # the script resumed on its own: 500 steps do not fit, nothing dated back
    ],
)
def test_steps_before_the_first_one_read_are_dated_back(first_seen: int, resume: int | None, startup_s: float) -> None:
    """Output is read in batches: the first step journaled may be a later one than the first trained."""
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0, resume=resume),
        phase(2, 0, "launching", "running", "launched"),
        first_step(12, 0, first_seen),
        step_reached(52, 0, first_seen + 40),
        *drained(52, 0, 53, None, relaunch=False),
    ]
    seconds = run_ledger(fold(events)).run.seconds
    assert seconds["startup"] == pytest.approx(startup_s)
    assert seconds["productive"] == pytest.approx(50.0 - startup_s)


def test_steps_dated_back_are_redone_ones_when_an_earlier_attempt_had_reached_them() -> None:
    """No checkpoint: attempt 1 starts over from step 1, first read at step 4; attempt 0 had reached
    20. Steps 1-3 are dated back (2 s a step) and counted among the 20 redone ones."""
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(0, 0, "launching", "running", "launched"),
        first_step(1, 0, 1),
        failed(20, 0),
        step_reached(20, 0, 20),
        *drained(20, 0, 20, None, relaunch=True),
        *started(20, 1),
        phase(20, 1, "launching", "running", "launched"),
        first_step(28, 1, 4),
        step_reached(28 + 2 * 26, 1, 30),
        *drained(80, 1, 80, None, relaunch=False),
    ]
    second = run_ledger(fold(events)).of(1)
    assert second is not None
    assert second.seconds["startup"] == pytest.approx(2.0)
    assert second.seconds["redone"] == pytest.approx(40.0)
    assert second.seconds["productive"] == pytest.approx(18.0)


def test_a_hang_s_silence_goes_from_the_exit_to_the_journal_and_back() -> None:
    """``WorkerExit.silent_s`` rides on the failure, is journaled as ``silent_s`` on ``worker_failed``,
    and the fold reads it back; an exit that was not a hang journals none."""
    from elastic.core.controller.attempts import failure_fields
    from elastic.core.failures import FailureKind, WorkerExit, to_failure
    from elastic.core.journal.folded import failure_mark

    hung = WorkerExit(attempt=0, rank=1, node="n0", returncode=-9, observed_at=5.0,
                      hung="no heartbeat for 31.2s (--heartbeat-timeout 30s)", silent_s=31.2345)
    fields = failure_fields(to_failure(hung, FailureKind.HUNG))
    assert 31.235 == fields["silent_s"]
    mark = failure_mark({"event": "worker_failed", "attempt": 0, **fields}, 5.0)
    assert 31.235 == mark.silent_s
    assert 31.235 == mark.to_failure().silent_s

    exited = WorkerExit(attempt=0, rank=1, node="n0", returncode=1, observed_at=5.0)
    assert "silent_s" not in failure_fields(to_failure(exited, FailureKind.EXITED))
    old = {"event": "worker_failed", "kind": "hung", "message": "no heartbeat for 31.2s"}
    assert failure_mark(old, 5.0).silent_s is None


def _driver_died_at_60(**seen: Any) -> list[dict[str, Any]]:
    """Attempt 0 runs from 1, first step (1) at 11, step 5 journaled at 20; its driver dies after
    that, unseen; a new driver starts at 60 and journals attempt 0 stopped with ``seen``."""
    return [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(1, 0, "launching", "running", "launched"),
        first_step(11, 0, 1),
        step_reached(20, 0, 5),
        ev(60, "run_started", journal_version=JOURNAL_VERSION),
        ev(60, "run_resumed", 1),
        ev(60, "workers_stopped", 0, checkpoint_step=None, made_progress=False, no_progress_streak=1,
           reason="its driver died", **seen),
        *started(60, 1),
        phase(61, 1, "launching", "running", "launched"),
        first_step(71, 1, 1),
        step_reached(101, 1, 31),
        *drained(101, 1, 101, None, relaunch=False),
    ]


def test_a_dead_drivers_attempt_ran_until_its_last_record_not_until_the_next_driver_started() -> None:
    """Without a later sign, its running ends at its last record: trained after its first step,
    and the time to the takeover unknown (the launcher's remainder), not training nor start-up."""
    ledger = run_ledger(fold(_driver_died_at_60()))
    first = ledger.of(0)
    assert first is not None
    trained = first.seconds["productive"] + first.seconds["slow_steps"]  # 2.25 s a step: slower than attempt 1
    assert (10.0, 9.0) == pytest.approx((first.seconds["startup"], trained))
    assert ledger.run.seconds["other"] == pytest.approx(40.0)
    assert ledger.run.total_s == pytest.approx(101.0)


def test_a_dead_drivers_attempt_trained_until_the_step_its_ranks_were_last_seen_at() -> None:
    """The takeover's evidence (step 15 at 25 s, dated by its write) carries its running on:
    training to 25 s, step 1's own second included (1 s a step from 10), the next attempt redoing
    those 15 steps, only the time after it unknown."""
    seen_at = (T0 + timedelta(seconds=25)).isoformat()
    ledger = run_ledger(fold(_driver_died_at_60(last_step=15, last_step_at=seen_at)))
    first, second = ledger.of(0), ledger.of(1)
    assert first is not None and second is not None
    trained = first.seconds["productive"] + first.seconds["slow_steps"]
    assert (9.0, 15.0) == pytest.approx((first.seconds["startup"], trained))
    assert ledger.run.seconds["other"] == pytest.approx(35.0)
    assert second.seconds["redone"] == pytest.approx(15.0)  # 1 s a step, steps 1..15 again
    assert ledger.run.total_s == pytest.approx(101.0)


def test_a_dead_drivers_evidence_never_reaches_past_the_takeover() -> None:
    seen_at = (T0 + timedelta(seconds=90)).isoformat()  # a clock ahead, a log touched late
    ledger = run_ledger(fold(_driver_died_at_60(last_step=15, last_step_at=seen_at)))
    first = ledger.of(0)
    # Step 15 at 60 (the takeover), 1 at 11: 3.5 s a step, and step 1's own 3.5 s were training too.
    assert first is not None and first.seconds["productive"] + first.seconds["slow_steps"] == pytest.approx(52.5)
    assert ledger.run.total_s == pytest.approx(101.0)


# Journals whose step records say when their step was seen (``seen_s_ago``: a drain's record is
# written later) and whose drains list the checkpoint saves (``checkpoint_saves_s_ago``).


def seen(t: float, attempt: int, step: int, ago: float = 0.0) -> dict[str, Any]:
    return ev(t, EventName.STEP_REACHED.value, attempt, rank=0, step=step, seen_s_ago=ago)


def _one_attempt(
    *middle: dict[str, Any], end: float, failure: bool, saves: list[list[float]] | None = None
) -> list[dict[str, Any]]:
    """Running from 0, the first step (1) seen at 1; ``middle``; then a failure or every rank's exit 0
    at ``end``, drained 1 s later; ``saves``: (began, committed) since the run started."""
    ending = failed(end, 0) if failure else ev(end, "worker_exited", 0, rank=0, node="n0", exit_code=0)
    listed = [[end + 1 - began, end + 1 - committed] for began, committed in saves or []]
    return [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(0, 0, "launching", "running", "launched"),
        first_step(1, 0, 1),
        *middle,
        ending,
        phase(end, 0, "running", "draining", "drain"),
        ev(end + 1, "workers_stopped", 0, checkpoint_step=None, **({"checkpoint_saves_s_ago": listed} if saves else {})),
        phase(end + 1, 0, "draining", "done", "finish"),
    ]


def test_a_checkpoint_save_between_steps_is_checkpoint_time_not_productive_training() -> None:
    """Steps of 1 s from 0, a save of 5 s from 30.5: step 56 was seen at 61."""
    events = _one_attempt(seen(61, 0, 56), end=61, failure=False, saves=[[30.5, 35.5]])
    seconds = run_ledger(fold(events)).run.seconds
    assert seconds["checkpoint"] == pytest.approx(5.0)
    assert seconds["startup"] == pytest.approx(0.0)  # the first step's own second was training
    assert seconds["productive"] == pytest.approx(56.0)
    assert seconds["exit_wait"] == pytest.approx(0.0)


def test_a_save_outside_the_attempts_training_is_not_its_checkpoint_time() -> None:
    """Steps of 1 s from 0 to step 61; one save before the run, one after the last step."""
    events = _one_attempt(seen(61, 0, 61), end=61, failure=False, saves=[[-10.0, -5.0], [61.0, 61.5]])
    seconds = run_ledger(fold(events)).run.seconds
    assert seconds["checkpoint"] == pytest.approx(0.0)
    assert seconds["productive"] == pytest.approx(61.0)


def test_a_drains_step_record_places_its_step_when_it_was_seen_and_what_follows_is_detection() -> None:
    """Step 30 was seen at 30; the failure came at 40: the 10 s after the last step kept nothing."""
    run = fold(_one_attempt(seen(40, 0, 30, ago=10.0), end=40, failure=True))
    assert run.closed()[0].step_marks[-1] == (pytest.approx(30.0), 30)
    seconds = run_ledger(run).run.seconds
    assert seconds["productive"] == pytest.approx(30.0)
    assert seconds["detection"] == pytest.approx(10.0)


def test_a_first_step_record_dated_after_its_step_places_the_step_when_it_was_seen() -> None:
    """Steps of 1 s from 0.5 s: step 1 seen at 1.5 s but journaled at 1.9 s (the controller's clock
    was there already): start-up ends at 0.5 s, not at 0.9 s, and training has those 0.4 s."""
    late_first = ev(1.9, EventName.FIRST_STEP_SEEN.value, 0, rank=0, step=1, source="output", seen_s_ago=0.4)
    events = [e for e in _one_attempt(seen(61.5, 0, 61), end=61.5, failure=False)
              if e["event"] != EventName.FIRST_STEP_SEEN.value]
    events.insert(next(i for i, e in enumerate(events) if e["event"] == EventName.STEP_REACHED.value), late_first)
    run = fold(events)
    assert run.closed()[0].first_step_s == pytest.approx(1.5)
    seconds = run_ledger(run).run.seconds
    assert seconds["startup"] == pytest.approx(0.5)
    assert seconds["productive"] == pytest.approx(61.0)


def test_after_a_successful_attempts_last_step_the_ranks_were_on_their_way_out() -> None:
    """The last step at 50, every rank's exit 0 at 53 (a last checkpoint, the process group's end)."""
    seconds = run_ledger(fold(_one_attempt(seen(53, 0, 50, ago=3.0), end=53, failure=False))).run.seconds
    assert seconds["productive"] == pytest.approx(50.0)
    assert seconds["exit_wait"] == pytest.approx(3.0)


def test_steps_trained_again_are_redone_at_the_attempts_pace_without_its_saves() -> None:
    """Attempt 0 reached 30, checkpointed 20; attempt 1 resumed from 20, showed step 21 at 45 and
    step 50 at 105 (2 s a step, and a save of 2 s at 80)."""
    events = [
        *_one_attempt(seen(40, 0, 30, ago=10.0), end=40, failure=True)[:-3],
        *drained(40, 0, 41, 20, relaunch=True),
        *started(41, 1, resume=20),
        phase(41, 1, "launching", "running", "launched"),
        first_step(45, 1, 21),
        seen(105, 1, 50),
        ev(105, "worker_exited", 1, rank=0, node="n0", exit_code=0),
        phase(105, 1, "running", "draining", "drain"),
        ev(106, "workers_stopped", 1, checkpoint_step=50, checkpoint_saves_s_ago=[[26.0, 24.0]]),
        phase(106, 1, "draining", "done", "finish"),
    ]
    second = run_ledger(fold(events)).of(1)
    assert second is not None
    assert second.seconds["startup"] == pytest.approx(2.0)  # step 21, seen at 45, began at 43
    assert second.seconds["checkpoint"] == pytest.approx(2.0)
    assert second.seconds["redone"] == pytest.approx(20.0)  # 21 to 30 again
    # 31 to 50, at twice the run's typical step (attempt 0's 1 s, the lower of two equal halves)
    assert second.seconds["productive"] + second.seconds["slow_steps"] == pytest.approx(40.0)
    assert second.seconds["slow_steps"] == pytest.approx(20.0)


def test_a_step_seen_before_the_mark_before_it_is_placed_no_earlier_than_that_mark() -> None:
    run = fold(_one_attempt(seen(20, 0, 10), seen(21, 0, 11, ago=30.0), end=22, failure=True))
    assert [at for at, _ in run.closed()[0].step_marks] == pytest.approx([1.0, 20.0, 20.0])


def test_the_launchers_own_start_up_before_its_first_record_is_the_runs_and_the_launchers() -> None:
    """Its process started 1.5 s before ``run_started`` (imports, the backend): the run's wall time
    begins there, as the scheduler that started it counts it, and those seconds are ``other``."""
    events = restarted_run()
    events[0] = {**events[0], "process_started_s_ago": 1.5}
    run = fold(events)
    assert run.closed()[0].spans[0].start_s == pytest.approx(1.5)
    ledger = run_ledger(run, until_s=251.5)
    assert ledger.run.seconds["other"] == pytest.approx(1.5 + 1.0)
    assert ledger.run.seconds["productive"] + ledger.run.seconds["slow_steps"] == pytest.approx(100.0 + 99.0)
    assert ledger.wall_s == pytest.approx(251.5)


def test_a_dead_drivers_saves_listed_at_the_takeover_are_its_attempts_and_a_save_listed_twice_counts_once() -> None:
    """The driver died while its attempt trained (step 15 seen at 25 s; a save of 4 s from 20, listed by
    no drain); the driver that took over at 60 listed it, and the same save again at its drain at 101."""
    events = _driver_died_at_60(last_step=15, last_step_at=(T0 + timedelta(seconds=25)).isoformat())
    for i, event in enumerate(events):
        if event["event"] == "workers_stopped":
            at = 60 if event["attempt"] == 0 else 101
            events[i] = {**event, "checkpoint_saves_s_ago": [[at - 20.0, at - 24.0]]}
    run = fold(events)
    assert run.checkpoint_saves == [pytest.approx((20.0, 24.0))]
    first = run_ledger(run).of(0)
    assert first is not None
    # Steps 1 to 15 from 11 to 25 less the save: 10/14 s a step, step 1's own time included.
    assert (4.0, 10.0 + 10.0 / 14) == pytest.approx((first.seconds["checkpoint"], first.seconds["productive"]))


def test_the_causes_as_reported_add_up_to_the_total_as_reported() -> None:
    """Rounded one by one, a dozen causes can miss their rounded total by a few millionths: the largest takes it."""
    from elastic.core.journal.ledger import CAUSES, Ledger

    seconds = dict.fromkeys(CAUSES, 0.0000004)  # each rounds down to 0.0
    seconds["productive"] = 1.8952694
    ledger = Ledger(seconds)
    parts = ledger.to_dict()
    assert round(ledger.total_s, 6) == round(sum(parts.values()), 6)
    assert round(ledger.total_s, 6) == parts["productive"]


def test_an_attempt_slower_than_the_runs_typical_step_has_the_difference_as_slow_steps() -> None:
    """Attempt 0 trains 1 s a step (steps 1 to 121 from 12 to 132), fails, checkpointed 120;
    attempt 1 resumes from 120 at 2 s a step (step 121 at 149 to 151 at 209): the run's typical
    step is 1 s (120 of its 150 steps), so half of attempt 1's new training was slow."""
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(1, 0),
        phase(2, 0, "launching", "running", "launched"),
        first_step(12, 0, 1),
        step_reached(72, 0, 61),
        failed(132, 0),
        step_reached(132, 0, 121),
        *drained(132, 0, 134, 120, relaunch=True),
        *started(138, 1, resume=120),
        phase(139, 1, "launching", "running", "launched"),
        first_step(149, 1, 121),
        ev(209, "worker_exited", 1, rank=0, node="n0", exit_code=0),
        step_reached(209, 1, 151),
        *drained(209, 1, 210, 151, relaunch=False),
    ]
    ledger = run_ledger(fold(events), until_s=210.0)
    first, second = ledger.of(0), ledger.of(1)
    assert first is not None and second is not None
    assert first.seconds["slow_steps"] == 0.0 and first.seconds["productive"] == pytest.approx(120.0)
    assert second.seconds["redone"] == pytest.approx(2.0)  # step 121 again, at its own 2 s
    assert second.seconds["slow_steps"] == pytest.approx(29.0)
    assert second.seconds["productive"] == pytest.approx(29.0)  # 29 new steps at the typical 1 s
    assert ledger.run.total_s == pytest.approx(210.0)


def test_a_pause_inside_an_attempt_is_slow_steps_and_a_save_is_no_part_of_a_pace() -> None:
    """1 s a step from step 1 at 1, but steps 122 to 181 took 90 s (the machine paused 30 s), and
    a save of 6 s fell between step 181 at 211 and step 241 at 277."""
    events = _one_attempt(seen(61, 0, 61), seen(121, 0, 121), seen(211, 0, 181), seen(277, 0, 241),
                          end=277, failure=False, saves=[[230.0, 236.0]])
    seconds = run_ledger(fold(events)).run.seconds
    assert seconds["checkpoint"] == pytest.approx(6.0)
    assert seconds["slow_steps"] == pytest.approx(30.0)
    assert seconds["productive"] == pytest.approx(240.0)
    assert sum(seconds.values()) == pytest.approx(278.0)


def test_steps_read_in_one_batch_set_no_pace() -> None:
    """Steps 1 to 41 read at once at 1 s, then 1 s a step to 61: the typical step is 1 s, not 0."""
    run = fold(_one_attempt(seen(1, 0, 41), seen(21, 0, 61), end=21, failure=False))
    assert typical_step_s(run.closed(), run.checkpoint_saves) == pytest.approx(1.0)


def test_a_first_step_read_with_later_ones_is_placed_by_the_last_of_them() -> None:
    """Steps of 1 s from 0: the node read steps 1 to 3 at once, dated by step 3's write at 3 s;
    the record says step 1 (the first the rank showed) and read_to_step 3. Start-up ends at 0, not
    at 2 (step 1 placed at step 3's time), and training has those 2 s."""
    first = ev(3, EventName.FIRST_STEP_SEEN.value, 0, rank=0, step=1, source="output", seen_s_ago=0.0, read_to_step=3)
    events = [e for e in _one_attempt(seen(61, 0, 61), end=61, failure=False)
              if e["event"] != EventName.FIRST_STEP_SEEN.value]
    events.insert(next(i for i, e in enumerate(events) if e["event"] == EventName.STEP_REACHED.value), first)
    run = fold(events)
    assert run.closed()[0].step_marks[0] == (pytest.approx(3.0), 3)
    assert run.closed()[0].first_step is not None and 1 == run.closed()[0].first_step["step"]
    seconds = run_ledger(run).run.seconds
    assert seconds["startup"] == pytest.approx(0.0)
    assert seconds["productive"] == pytest.approx(61.0)


def test_an_adopted_attempt_trained_through_its_drivers_outage() -> None:
    """Steps of 1 s from 1: step 19 seen at 20, the driver dead after it, a new one adopting the
    running ranks at 31; step 49 seen at 50, every rank's exit 0 there. Nothing was lost: the
    outage is training, not the launcher's remainder."""
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *started(0, 0),
        phase(1, 0, "launching", "running", "launched"),
        first_step(2, 0, 1),
        seen(20, 0, 19),
        ev(30, "run_started", 0, journal_version=JOURNAL_VERSION),
        ev(30, "run_resumed", 0),
        phase(31, 0, "pending", "running", "adopt"),
        ev(31, "attempt_adopted", 0, generation=2, world_size=2, nodes=1, exits_kept=0),
        seen(50, 0, 49),
        ev(50, "worker_exited", 0, rank=0, node="n0", exit_code=0),
        *drained(50, 0, 51, 49, relaunch=False),
    ]
    seconds = run_ledger(fold(events), until_s=51.0).run.seconds
    assert seconds["productive"] == pytest.approx(49.0)
    assert seconds["other"] == pytest.approx(0.0)
    assert seconds["startup"] == pytest.approx(0.0)
