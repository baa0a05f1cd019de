"""The one fold of a journal: goodput, progress, root cause, budgets and the streak, from hand-made journals."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from elastic.core.failures import FailureKind
from elastic.core.journal.fold import JOURNAL_VERSION, FoldError, fold, made_progress, productive
from elastic.core.journal.recovery import prior_run
from elastic.core.journal.timeline import build_timeline

from journal_events import T0, ev, phase


def attempt(number: int, start: float, drained: float, resume: int | None, reached: int | None,
            *, stopped_after: float = 2.0, relaunch: bool = True) -> list[dict[str, Any]]:
    """An attempt launched at ``start``, drained at ``drained``, its ranks gone ``stopped_after`` later."""
    end = drained + stopped_after
    return [
        ev(start, "attempt_started", number, world_size=2, nodes=["n0"], nproc_per_node=[2], resume_step=resume),
        phase(start, number, "pending", "launching"),
        phase(start, number, "launching", "running"),
        phase(drained, number, "running", "draining"),
        ev(end, "workers_stopped", number, checkpoint_step=reached),
        *([phase(end, number, "draining", "pending", "relaunch")] if relaunch else []),
    ]


def test_an_attempt_made_progress_when_it_left_a_newer_checkpoint() -> None:
    """Attempts that left a newer checkpoint made progress; one that did not, did not (as the
    live fold reads the records as written)."""
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        *attempt(0, 0.0, 40.0, None, 10, stopped_after=0.0),
        *attempt(1, 50.0, 60.0, 10, 10, stopped_after=0.0),
    ]
    run = fold(events)
    assert [True, False] == run.productive_flags(run.closed(100.0))


def test_progress_has_one_rule_and_productive_one_extension_of_it() -> None:
    """A newer checkpoint than the resumed one; a run without checkpoints credits its successful end."""
    assert (True, True, False, False) == (
        made_progress(None, 1), made_progress(1, 2), made_progress(2, 2), made_progress(None, None)
    )
    assert productive(tracks_checkpoints=False, resume_step=None, checkpoint_step=None, ended_run_in_success=True)
    assert not productive(tracks_checkpoints=True, resume_step=2, checkpoint_step=2, ended_run_in_success=True)


def test_a_revised_root_cause_is_the_lost_node_as_the_controller_decided() -> None:
    """root_cause_revised: the peer's failure that came first was its consequence; its charge is refunded."""
    events = [
        ev(0, "run_started"),
        *attempt(0, 0.0, 5.0, None, None, relaunch=False)[:3],
        ev(5, "worker_failed", 0, kind="exited", rank=0, node="n0", exit_code=1, signal=None, message=None),
        ev(5, "restart_scheduled", 0, budget="failures", remaining=0),
        phase(5, 0, "running", "draining"),
        ev(9, "worker_failed", 0, kind="node-lost", rank=2, node="n1", exit_code=None, signal=None,
           message="node died"),
        ev(9, "root_cause_revised", 0, refunded="failures"),
        ev(9, "restart_scheduled", 0, budget="preemptions", remaining=None),
    ]
    run = fold(events)
    cause = run.attempts[0].root_cause
    assert cause is not None and FailureKind.NODE_LOST is cause.kind
    assert [FailureKind.COLLATERAL, FailureKind.NODE_LOST] == list(run.attempts[0].failure_kinds())
    assert (0, 1) == (len(run.charges["failures"]), len(run.charges["preemptions"]))
    view = build_timeline(events).attempts[0].attempt
    assert view.root_cause is not None and FailureKind.NODE_LOST is view.root_cause.kind


def test_a_failure_kind_this_version_does_not_know_reads_as_an_exit_in_every_reader() -> None:
    """The fold carries the core's kinds: one a newer journal wrote reads as ``exited`` in the
    fold, the status and report.json alike, and is still a root cause."""
    from elastic.views.report import build_report
    from elastic.views.status import describe_journal

    events = [
        ev(0, "run_started"),
        *attempt(0, 0.0, 5.0, None, None, relaunch=False)[:3],
        ev(5, "worker_failed", 0, kind="gpu-melted", rank=1, node="n0", exit_code=3, signal=None, message=None),
        phase(5, 0, "running", "draining"),
        ev(6, "workers_stopped", 0),
    ]
    run = fold(events)
    cause = run.attempts[0].root_cause
    assert cause is not None and FailureKind.EXITED is cause.kind
    assert any("rank 1 on n0 exited (exit code 3)" in line for line in describe_journal(events))
    row = build_report(run, command=["x"], ended_s=6.0)["attempts"][0]
    assert "exited" == row["root_cause"]["kind"] == row["failures"][0]["kind"]


def test_recovery_reads_the_streak_the_interrupted_attempt_and_the_last_world() -> None:
    """The streak as the controller journaled it; the attempt without workers_stopped was cut short."""
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION, pid=7),
        *attempt(0, 1.0, 3.0, None, None),
        ev(5.0, "workers_stopped", 0, checkpoint_step=None, made_progress=False, no_progress_streak=1),
        ev(6.0, "attempt_started", 1, world_size=4, nodes=["a", "b"], nproc_per_node=[2, 2], resume_step=3),
        phase(6.0, 1, "pending", "launching"),
    ]
    prior = prior_run(events)
    assert (2, 1, (1, 3)) == (prior.next_attempt, prior.no_progress_streak, prior.interrupted)
    assert prior.last_world is not None and (("a", "b"), 4) == (prior.last_world.node_ids, prior.last_world.world_size)
    stopped = prior_run([*events, ev(7.0, "workers_stopped", 1, checkpoint_step=3, no_progress_streak=2)])
    assert (None, 2) == (stopped.interrupted, stopped.no_progress_streak)
    assert not prior.interrupted_by_notice
    # its saves are those since it began: when the attempt before it ended (its wait for nodes is its own)
    assert (T0 + timedelta(seconds=5.0)).timestamp() == prior.interrupted_began_at
    noticed = prior_run([*events, ev(6.5, "preemption_noticed", 1, source="signal SIGUSR1", then="requeue")])
    assert ((1, 3), True) == (noticed.interrupted, noticed.interrupted_by_notice)


def test_a_journal_of_a_newer_format_is_refused_by_name() -> None:
    """A version this elastic does not know is an error that says so, not a misreading."""
    with pytest.raises(FoldError, match="newer than this elastic reads"):
        fold([ev(0, "run_started", journal_version=JOURNAL_VERSION + 1)])


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (ev(1.0, "phase_changed", 0) | {"attempt": None}, "has attempt None, not a whole number"),
        (ev(1.0, "attempt_started", 0, world_size=2, nodes="n0", nproc_per_node=[2]), "plan of the wrong shape"),
        (ev(1.0, "run_finished", 0, outcome="failed", root_cause={"kind": "exited", "attempt": "x"}),
         "field of the wrong type or value"),
    ],
    ids=["attempt-null", "nodes-not-a-list", "root-cause-attempt-not-a-number"],
)
def test_an_event_with_a_field_of_the_wrong_type_is_a_fold_error_naming_its_index(
    bad: dict[str, Any], says: str
) -> None:
    """A field the fold cannot read is a FoldError with the event's index (for its line), never a
    TypeError or ValueError escaping to the reader."""
    with pytest.raises(FoldError, match=says) as raised:
        fold([ev(0, "run_started"), bad], strict_times=False)
    assert 1 == raised.value.index


def test_a_newer_format_names_the_first_event() -> None:
    """The version is on the first record: the error points at it (index 0)."""
    with pytest.raises(FoldError) as raised:
        fold([ev(0, "run_started", journal_version=JOURNAL_VERSION + 1)])
    assert 0 == raised.value.index


def test_an_attempt_adopted_by_a_later_driver_is_one_attempt_across_both_drivers() -> None:
    """Attempt 0 launched at 1 and ran; its driver's last record at 20, a new driver at 30
    adopted it at 31 with its ranks running; they exited 0 at 50. One attempt: launched at 1,
    running from 1 to 50 (its ranks ran through the outage), and it succeeded."""
    events = [
        ev(0, "run_started", journal_version=JOURNAL_VERSION),
        ev(0, "attempt_started", 0, world_size=2, nodes=["n0"], nproc_per_node=[2]),
        phase(0, 0, "pending", "launching", "launch"),
        phase(1, 0, "launching", "running", "launched"),
        ev(20, "step_reached", 0, rank=0, step=19, seen_s_ago=0.0),
        ev(30, "run_started", 0, journal_version=JOURNAL_VERSION),
        ev(30, "run_resumed", 0),
        phase(31, 0, "pending", "running", "adopt"),
        ev(31, "attempt_adopted", 0, generation=2, world_size=2, nodes=1, exits_kept=0),
        ev(50, "worker_exited", 0, rank=0, node="n0", exit_code=0),
        ev(50, "worker_exited", 0, rank=1, node="n0", exit_code=0),
        phase(50, 0, "running", "draining", "drain"),
        ev(51, "workers_stopped", 0, checkpoint_step=None),
        phase(51, 0, "draining", "done", "finish"),
        ev(51, "run_finished", 0, outcome="succeeded", exit_status=0, reason="-", root_cause=None),
    ]
    run = fold(events)
    [attempt] = run.closed()
    assert attempt.adopted is not None and 2 == attempt.adopted["generation"]
    assert 1.0 == pytest.approx(attempt.launched_s)  # its launch, not the adoption
    running = [(s.start_s, s.end_s) for s in attempt.spans if s.phase == "running"]
    assert [(1.0, 50.0)] == [pytest.approx(span) for span in running]
    assert not [s for s in attempt.spans if s.phase == "pending" and s.start_s > 1.0]
    assert attempt.ended_in_success and not attempt.driver_died
    assert "succeeded" == run.outcome
