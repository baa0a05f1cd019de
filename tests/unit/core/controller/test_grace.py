"""A drain's grace matches its cause, and ranks killed when it ran out are journaled and said in words."""

from __future__ import annotations

import signal

import pytest

from elastic.core.controller.controller import Controller
from elastic.core.controller.settings import ControllerSettings
from elastic.core.controller.drain import DrainReason, drain_grace
from elastic.core.events import EventName
from elastic.core.journal.fold import fold
from elastic.core.failures import Disposition, GRACE_KILLS_LISTED, GraceKill, WorkerExit, describe_grace_kills
from elastic.core.messages import (
    AttemptLaunched, AttemptPlanned, RunStarted, StopRequested, StopWorkers, WorkerExited, WorkersStopped,
)
from elastic.core.policy.restarts import RestartPolicy


def _running(world: int = 2, max_restarts: int = 1) -> Controller:
    c = Controller(RestartPolicy.create(max_restarts=max_restarts),
                   ControllerSettings(grace_s=30.0, failure_grace_s=2.0))
    for observation in (RunStarted(0.0), AttemptPlanned(0, world, 0.1), AttemptLaunched(0, world, 0.2)):
        c.handle(observation)
    return c


def _exit(rank: int, returncode: int, at: float, kill: GraceKill | None = None) -> WorkerExited:
    return WorkerExited(WorkerExit(0, rank, "n0", returncode, at, killed_at_grace=kill))


@pytest.mark.parametrize(
    ("reason", "seconds", "option"),
    [
        (DrainReason.FAILURE, 2.0, "--failure-grace"),
        (DrainReason.STOP_REQUESTED, 30.0, "--grace-period"),
        (DrainReason.SCALE_UP, 30.0, "--grace-period"),
        (DrainReason.SUCCEEDED, 30.0, "--grace-period"),
    ],
)
def test_each_drain_reason_gets_its_grace(reason: DrainReason, seconds: float, option: str) -> None:
    """Only a failure's drain gets --failure-grace; the others let ranks save with --grace-period."""
    grace = drain_grace(reason, grace_period_s=30.0, failure_grace_s=2.0)
    assert (seconds, option) == (grace.seconds, grace.option)
    assert grace.why


def test_a_failure_drains_the_survivors_with_the_failure_grace_and_journals_why() -> None:
    """The StopWorkers after a failure carries --failure-grace; the drain's record says so."""
    c = _running()
    decision = c.handle(_exit(1, 3, 1.0))
    assert (StopWorkers(0, signal.SIGTERM, 2.0, collateral=True),) == decision.commands
    [drain] = [r for r in decision.records if r.event is EventName.PHASE_CHANGED]
    assert (2.0, "--failure-grace") == (drain.fields["grace_s"], drain.fields["grace_option"])
    assert "collateral" in str(drain.fields["grace_why"])


def test_a_stop_of_the_launcher_drains_with_the_grace_period() -> None:
    """SIGTERM to the launcher lets the ranks save: --grace-period."""
    c = _running()
    decision = c.handle(StopRequested(signal.SIGTERM, 1.0))
    assert (StopWorkers(0, signal.SIGTERM, 30.0),) == decision.commands
    [drain] = [r for r in decision.records if r.event is EventName.PHASE_CHANGED]
    assert "--grace-period" == drain.fields["grace_option"]


def test_ranks_killed_at_the_grace_are_journaled_with_the_drains_end_and_read_back() -> None:
    """The exits' grace kills go into workers_stopped; the fold says them in words."""
    c = _running(world=3, max_restarts=0)
    records = list(c.handle(_exit(2, 3, 1.0)).records)
    ignored = GraceKill(signal.SIGTERM, 2.0, Disposition.IGNORED)
    jax = GraceKill(signal.SIGTERM, 2.0, Disposition.CAUGHT, jax=True)
    records += c.handle(_exit(0, -signal.SIGKILL, 3.0, ignored)).records
    records += c.handle(_exit(1, -signal.SIGKILL, 3.0, jax)).records
    records += c.handle(WorkersStopped(0, 3.1)).records
    [stopped] = [r for r in records if r.event is EventName.WORKERS_STOPPED]
    assert 2 == stopped.fields["killed_at_grace_count"]
    assert [(0, "ignored", False), (1, "caught", True)] == [
        (k["rank"], k["disposition"], k["jax"]) for k in stopped.fields["killed_at_grace"]
    ]
    journal = [{"event": "run_started", "time": "2026-12-03T10:00:00+00:00", "run_id": "r", "attempt": 0}]
    journal += [
        {"event": r.event.value, "time": f"2026-12-03T10:00:0{int(r.at)}+00:00", "attempt": r.attempt, **r.fields}
        for r in (*records,)
    ]
    attempt = fold(journal).attempts[0]
    assert [
        "rank 0 ignored SIGTERM; killed after 2 s (--failure-grace)",
        "rank 1 ignored SIGTERM (JAX's preemption service catches it); killed after 2 s (--failure-grace)",
    ] == attempt.grace_kill_lines()


def test_grace_kills_past_the_first_few_are_counted_not_listed() -> None:
    """A thousand JAX survivors make one count, not a thousand records."""
    c = _running(world=40, max_restarts=0)
    c.handle(_exit(39, 3, 1.0))
    kill = GraceKill(signal.SIGTERM, 2.0, Disposition.CAUGHT, jax=True)
    for rank in range(39):
        c.handle(_exit(rank, -signal.SIGKILL, 3.0, kill))
    [stopped] = [r for r in c.handle(WorkersStopped(0, 3.1)).records if r.event is EventName.WORKERS_STOPPED]
    fields = stopped.fields
    assert (39, GRACE_KILLS_LISTED) == (fields["killed_at_grace_count"], len(fields["killed_at_grace"]))


@pytest.mark.parametrize(
    ("kill", "words"),
    [
        (GraceKill(signal.SIGTERM, 5.0, Disposition.IGNORED), "ignored SIGTERM"),
        (GraceKill(signal.SIGTERM, 5.0, Disposition.CAUGHT), "caught SIGTERM but did not exit"),
        (GraceKill(signal.SIGTERM, 5.0, Disposition.IGNORED, jax=True),
         "ignored SIGTERM (JAX's preemption service catches it)"),
        (GraceKill(signal.SIGINT, 5.0, Disposition.BLOCKED), "blocked SIGINT"),
        (GraceKill(signal.SIGINT, 5.0, Disposition.CAUGHT, jax=True), "caught SIGINT but did not exit"),
        (GraceKill(signal.SIGTERM, 5.0, Disposition.DEFAULT, state="D"),
         "did not exit on SIGTERM (in uninterruptible sleep, likely I/O)"),
        (GraceKill(signal.SIGTERM, 5.0, Disposition.DEFAULT, state="T"),
         "did not exit on SIGTERM (stopped, by SIGSTOP or a debugger)"),
        (GraceKill(signal.SIGTERM, 5.0, Disposition.UNKNOWN), "did not exit on SIGTERM"),
    ],
)
def test_how_a_rank_held_the_signal_in_words(kill: GraceKill, words: str) -> None:
    """One phrase per disposition; ranks that did the same share a line."""
    assert [f"rank 3 {words}; killed after 5 s"] == describe_grace_kills([(3, kill)])
    assert [f"ranks 1, 3 {words}; killed after 5 s"] == describe_grace_kills([(3, kill), (1, kill)])


def test_an_attempts_first_sign_of_life_is_journaled_once_never_before_its_launch() -> None:
    """The first SignOfLife of the current attempt is recorded, at no earlier time than the
    launch the controller saw; later ones and a past attempt's are not."""
    from elastic.core.messages import SignOfLife

    c = _running()
    first = c.handle(SignOfLife(0, 1, "n0", "output", 0.15)).records
    assert [(EventName.SIGN_OF_LIFE_SEEN, 0.2, {"rank": 1, "node": "n0", "source": "output"})] == [
        (r.event, r.at, dict(r.fields)) for r in first
    ]
    assert () == c.handle(SignOfLife(0, 0, "n0", "heartbeat", 0.3)).records
    assert () == c.handle(SignOfLife(7, 0, "n0", "output", 0.4)).records
