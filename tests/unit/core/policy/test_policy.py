"""Budgets over a window and the restart decision, on plain numbers as time."""

from __future__ import annotations

import random

import pytest

from elastic.core.failures import Failure, FailureKind
from elastic.core.policy.restarts import Backoff, Budget, BudgetName, RestartPolicy


def failure(kind: FailureKind) -> Failure:
    return Failure(kind=kind, attempt=0, rank=0, node="n0", observed_at=0.0, exit_code=1)


@pytest.mark.parametrize(
    ("limit", "window_s", "charges", "now", "expected"),
    [
        (0, None, (), 10.0, 0),
        (3, None, (1.0, 2.0), 10.0, 1),
        (3, None, (1.0, 2.0, 3.0), 1e9, 0),
        (2, 60.0, (1.0, 2.0), 30.0, 0),
        (2, 60.0, (1.0, 2.0), 61.5, 1),
        (2, 60.0, (1.0, 2.0), 62.5, 2),
        (None, None, (1.0,) * 100, 5.0, None),
    ],
)
def test_budget_counts_charges_inside_the_window(
    limit: int | None, window_s: float | None, charges: tuple[float, ...], now: float, expected: int | None
) -> None:
    """Charges older than the window stop counting (restart intensity)."""
    budget = Budget(BudgetName.FAILURES, limit, window_s, charges)
    assert expected == budget.remaining(now)


@pytest.mark.parametrize(
    ("kind", "restart", "budget"),
    [
        (FailureKind.EXITED, True, BudgetName.FAILURES),
        (FailureKind.CRASHED, True, BudgetName.FAILURES),
        (FailureKind.KILLED, True, BudgetName.FAILURES),
        (FailureKind.TERMINATED, True, BudgetName.PREEMPTIONS),
        (FailureKind.PREEMPTED, True, BudgetName.PREEMPTIONS),
        (FailureKind.LAUNCH_FAILED, False, None),
    ],
)
def test_decide_charges_the_budget_of_the_kind(kind: FailureKind, restart: bool, budget: BudgetName | None) -> None:
    """Failures and preemptions draw on separate budgets; launch failures never restart."""
    policy = RestartPolicy.create(max_restarts=1)
    decision, after = policy.decide(failure(kind), now=5.0)
    assert (restart, budget) == (decision.restart, decision.budget)
    if budget is not None:
        assert 1 == len(after.budget(budget).charges)


def test_max_restarts_zero_refuses_the_first_failure() -> None:
    """torchrun's default: no restarts unless asked for."""
    decision, _ = RestartPolicy.create(max_restarts=0).decide(failure(FailureKind.EXITED), now=1.0)
    assert not decision.restart
    assert "failures budget exhausted (0 restarts in the run)" == decision.reason


def test_preemptions_do_not_consume_max_restarts() -> None:
    """An outside SIGTERM is restarted even with --max-restarts 0."""
    policy = RestartPolicy.create(max_restarts=0)
    for now in range(5):
        decision, policy = policy.decide(failure(FailureKind.TERMINATED), now=float(now))
        assert decision.restart
    assert 0 == len(policy.failures.charges)


def test_preemptions_are_rate_limited_not_counted() -> None:
    """Ten preemptions a minute restart; the eleventh within the minute ends the run."""
    policy = RestartPolicy.create(max_restarts=0)
    for now in range(10):
        decision, policy = policy.decide(failure(FailureKind.TERMINATED), now=float(now))
        assert decision.restart
    refused, _ = policy.decide(failure(FailureKind.TERMINATED), now=10.0)
    later, _ = policy.decide(failure(FailureKind.TERMINATED), now=70.5)
    assert (False, True) == (refused.restart, later.restart)
    assert "preemptions budget exhausted (10 restarts per 60s)" == refused.reason


@pytest.mark.parametrize("failures_in_a_row", [1, 2, 3, 4, 5, 8])
def test_backoff_grows_exponentially_with_bounded_jitter(failures_in_a_row: int) -> None:
    """Delay n is INITIAL*2^(n-1) plus up to INITIAL/2 of jitter, never above MAX."""
    backoff = Backoff(initial_s=1.0, max_s=10.0, rng=random.random)
    base = min(10.0, 2.0 ** (failures_in_a_row - 1))
    for _ in range(20):
        delay = backoff.delay_s(failures_in_a_row)
        assert base <= delay <= min(10.0, base + 0.5)


@pytest.mark.parametrize(
    ("draw", "failures_in_a_row", "expected"),
    [
        (0.0, 1, 2.0),  # INITIAL, no jitter
        (0.5, 1, 2.5),  # plus half of the INITIAL/2 jitter
        (0.0, 3, 8.0),  # INITIAL*2^2
        (0.999, 3, 8.999),
        (0.5, 4, 10.0),  # 16 capped at MAX, jitter included
        (0.5, 5000, 10.0),  # no overflow, however long the streak
    ],
)
def test_backoff_is_a_function_of_the_streak_and_the_injected_draw(
    draw: float, failures_in_a_row: int, expected: float
) -> None:
    """With the random draw fixed, the delay is exact: INITIAL*2^(n-1) + draw*INITIAL/2, capped."""
    assert expected == pytest.approx(Backoff(2.0, 10.0, rng=lambda: draw).delay_s(failures_in_a_row))


def test_backoff_with_a_seeded_generator_repeats_its_delays() -> None:
    """Two backoffs over generators seeded alike wait alike, and the jitter varies between calls."""
    first, second = (Backoff(1.0, 60.0, rng=random.Random(7).random) for _ in range(2))
    delays = [first.delay_s(n) for n in (1, 1, 2, 3)]
    assert delays == [second.delay_s(n) for n in (1, 1, 2, 3)]
    assert delays[0] != delays[1]


def test_no_backoff_before_the_first_restart_without_progress() -> None:
    """Zero failures in a row means restart at once."""
    assert 0.0 == Backoff(1.0, 10.0).delay_s(0)
