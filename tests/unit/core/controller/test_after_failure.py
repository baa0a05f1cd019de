"""The pure pieces the controller applies: the decision after a failure and the no-progress streak."""

from __future__ import annotations

from elastic.core.controller.after_failure import decide_after
from elastic.core.policy.crash_loop import NoProgressStreak, taken_over
from elastic.core.controller.drain import DrainReason
from elastic.core.events import EventName
from elastic.core.failures import FailureKind, WorkerExit, to_failure
from elastic.core.controller.machine import Phase
from elastic.core.messages import Outcome, Resumed
from elastic.core.policy.restarts import Backoff, BudgetName, RestartPolicy


def crashed(at: float) -> WorkerExit:
    return WorkerExit(attempt=0, rank=0, node="n0", returncode=1, observed_at=at)


def test_a_restart_is_charged_and_leads_back_to_pending() -> None:
    cause = to_failure(crashed(1.0), FailureKind.EXITED)
    after = decide_after(RestartPolicy.create(max_restarts=1), cause, 1.0)
    assert (after.restart, after.charged, after.event) == (True, BudgetName.FAILURES, EventName.RESTART_SCHEDULED)
    assert after.fields["remaining"] == 0
    drain = after.draining()
    assert (drain.reason, drain.next_phase, drain.outcome, drain.detail) == (
        DrainReason.FAILURE, Phase.PENDING, None, cause.describe()
    )


def test_an_exhausted_budget_ends_the_run_and_redirects_a_drain_under_way() -> None:
    cause = to_failure(crashed(1.0), FailureKind.EXITED)
    after = decide_after(RestartPolicy.create(max_restarts=0), cause, 1.0)
    assert (after.restart, after.charged, after.event) == (False, None, EventName.BUDGET_EXHAUSTED)
    under_way = decide_after(RestartPolicy.create(max_restarts=1), cause, 1.0).draining()
    redirected = after.redirect(under_way)
    assert (redirected.next_phase, redirected.outcome) == (Phase.DONE, Outcome.FAILED)
    assert redirected.detail.startswith(cause.describe() + "; ")


def test_the_streak_restarts_on_progress_and_sets_the_backoff_level() -> None:
    backoff = Backoff(initial_s=1.0, max_s=60.0)
    streak = NoProgressStreak().ended(False).ended(False).ended(False)
    assert streak.count == 3
    assert streak.backoff(backoff)[1] == 2
    assert streak.ended(True) == NoProgressStreak(0)
    assert NoProgressStreak(1).backoff(backoff) == (0.0, 0)
    assert streak.crash_loop(tracks_progress=True, max_no_progress=3) is not None
    assert streak.crash_loop(tracks_progress=False, max_no_progress=3) is None


def test_a_takeover_counts_the_dead_drivers_attempt() -> None:
    streak, progressed = taken_over(Resumed(2, interrupted=4, interrupted_resume_step=10, checkpoint_step=10), True)
    assert (streak.count, progressed) == (3, False)
    assert taken_over(Resumed(2), True) == (NoProgressStreak(2), None)
