"""The pure pieces the controller applies: the decision after a failure and the no-progress streak."""

from __future__ import annotations

import pytest

from elastic.core.controller.controller import Controller
from elastic.core.controller.settings import ControllerSettings
from elastic.core.policy.crash_loop import NoProgressStreak, taken_over
from elastic.core.controller.drain import DrainReason
from elastic.core.events import EventName
from elastic.core.failures import FailureKind, WorkerExit, to_failure
from elastic.core.controller.machine import Phase
from elastic.core.messages import AttemptLaunched, AttemptPlanned, Outcome, Resumed, RunStarted, WorkerExited
from elastic.core.policy.restarts import Backoff, RestartPolicy


def crashed(at: float) -> WorkerExit:
    return WorkerExit(attempt=0, rank=0, node="n0", returncode=1, observed_at=at)


def running(policy: RestartPolicy) -> Controller:
    c = Controller(policy, ControllerSettings(grace_s=5.0))
    for observation in (RunStarted(0.0), AttemptPlanned(0, 2, 0.1, nodes=2), AttemptLaunched(0, 2, 0.2)):
        c.handle(observation)
    return c


def test_a_restart_is_charged_and_leads_back_to_pending() -> None:
    cause = to_failure(crashed(1.0), FailureKind.EXITED)
    c = running(RestartPolicy.create(max_restarts=1))
    records = c.handle(WorkerExited(crashed(1.0))).records
    [after] = [r for r in records if r.event is EventName.RESTART_SCHEDULED]
    assert (after.fields["budget"], after.fields["remaining"]) == ("failures", 0)
    assert 1 == len(c.policy.failures.charges)
    drain = c.draining
    assert drain is not None
    assert (drain.reason, drain.next_phase, drain.outcome, drain.detail) == (
        DrainReason.FAILURE, Phase.PENDING, None, cause.describe()
    )


def test_an_exhausted_budget_ends_the_run_and_redirects_a_drain_under_way() -> None:
    cause = to_failure(crashed(1.0), FailureKind.EXITED)
    c = running(RestartPolicy.create(max_restarts=0))
    events = [r.event for r in c.handle(WorkerExited(crashed(1.0))).records]
    assert EventName.BUDGET_EXHAUSTED in events and EventName.RESTART_SCHEDULED not in events
    assert c.draining is not None and (c.draining.next_phase, c.draining.outcome) == (Phase.DONE, Outcome.FAILED)
    assert c.draining.detail.startswith(cause.describe() + "; ")
    # A drain under way toward a restart, redirected: its root cause revised to a lost node,
    # whose budget (--max-preemptions 0) refuses the restart.
    c = running(RestartPolicy.create(max_restarts=1, max_preemptions=0))
    c.handle(WorkerExited(crashed(1.0)))
    lost_exit = WorkerExit(attempt=0, rank=1, node="n1", returncode=None, observed_at=1.5, node_lost="gone")
    c.handle(WorkerExited(lost_exit))
    redirected = c.draining
    assert redirected is not None and (redirected.next_phase, redirected.outcome) == (Phase.DONE, Outcome.FAILED)
    assert redirected.detail.startswith(to_failure(lost_exit, FailureKind.NODE_LOST).describe() + "; ")


def test_the_streak_restarts_on_progress_and_sets_the_backoff_level() -> None:
    backoff = Backoff(initial_s=1.0, max_s=60.0)
    streak = NoProgressStreak().ended(False).ended(False).ended(False)
    assert streak.count == 3
    assert streak.backoff(backoff)[1] == 2
    assert streak.ended(True) == NoProgressStreak(0)
    assert NoProgressStreak(1).backoff(backoff) == (0.0, 0)
    assert streak.crash_loop(tracks_progress=True, max_no_progress=3) is not None
    assert streak.crash_loop(tracks_progress=False, max_no_progress=3) is None


FAILED_ON_ITS_OWN = to_failure(crashed(1.0), FailureKind.EXITED)


def test_a_takeover_counts_the_dead_drivers_attempt_when_it_failed_on_its_own() -> None:
    failed = Resumed(2, interrupted=4, interrupted_resume_step=10, checkpoint_step=10, last_cause=FAILED_ON_ITS_OWN)
    assert (3, False) == (lambda s, p: (s.count, p))(*taken_over(failed, True))
    assert taken_over(Resumed(2), True) == (NoProgressStreak(2), None)


@pytest.mark.parametrize(("noticed", "failed", "checkpoint", "expected"), [
    (False, True, 10, (3, False)),  # a failure of its own, nothing newer: the streak goes on
    (False, True, 12, (0, True)),  # a newer checkpoint: progress ends the streak
    (False, False, 10, (2, False)),  # training well when its driver died: the death ended it
    (False, False, 12, (0, True)),
    (True, False, 10, (2, False)),  # ending for a notice, nothing newer: no sign of a crash loop either way
    (True, True, 10, (2, False)),  # a rank's end in the notice's drain is the notice's
    (True, False, 12, (0, True)),  # ending for a notice after a newer checkpoint: progress still ends it
], ids=["failed", "failed-progressed", "driver-died", "driver-died-progressed", "notice", "notice-failed",
        "notice-progressed"])
def test_a_takeover_counts_the_dead_drivers_attempt_by_its_failure_its_notice_and_its_progress(
    noticed: bool, failed: bool, checkpoint: int, expected: tuple[int, bool]
) -> None:
    """The dead driver's interrupted attempt (resumed at 10, streak 2) read beside the evidence:
    only an attempt that failed on its own, with no notice and no newer checkpoint, extends the
    streak; three deaths of a driver in a row are no crash loop of the program's."""
    resumed = Resumed(2, interrupted=4, interrupted_resume_step=10, checkpoint_step=checkpoint,
                      interrupted_by_notice=noticed, last_cause=FAILED_ON_ITS_OWN if failed else None)
    streak, progressed = taken_over(resumed, True)
    assert expected == (streak.count, progressed)
