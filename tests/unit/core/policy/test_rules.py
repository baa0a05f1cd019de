"""--on-exit rules: parsing with errors that name the bad part, and first-match-wins."""

from __future__ import annotations

import signal

import pytest

from elastic.core.failures import Failure, FailureKind
from elastic.core.policy.restarts import BudgetName, RestartPolicy
from elastic.core.policy.rules import RuleAction, match_rule, parse_exit_rule


def failure(kind: FailureKind, exit_code: int | None = None, signum: int | None = None) -> Failure:
    return Failure(kind=kind, attempt=0, rank=0, node="n0", observed_at=0.0, exit_code=exit_code, signal=signum)


@pytest.mark.parametrize(
    ("spec", "fields"),
    [
        ("2=fail", (RuleAction.FAIL, 2, 2, None)),
        ("3-9=restart-free", (RuleAction.RESTART_FREE, 3, 9, None)),
        ("SIGKILL=restart", (RuleAction.RESTART, None, None, signal.SIGKILL)),
        ("segv=fail", (RuleAction.FAIL, None, None, signal.SIGSEGV)),
    ],
)
def test_rules_parse_codes_ranges_and_signal_names(spec: str, fields: tuple[object, ...]) -> None:
    """Each spelling of the issue's examples parses to its match and action."""
    rule = parse_exit_rule(spec)
    assert fields == (rule.action, rule.first, rule.last, rule.signal)


@pytest.mark.parametrize(
    ("spec", "names"),
    [
        ("2", "MATCH=ACTION"), ("2=retry", "'retry'"), ("SIGNOPE=fail", "'SIGNOPE'"),
        ("9-3=fail", "low to high"), ("x7=fail", "'x7'"), ("0=fail", "1-255"), ("=fail", "MATCH=ACTION"),
    ],
)
def test_bad_rules_name_the_bad_part(spec: str, names: str) -> None:
    """A bad spec is rejected with a message quoting the part that is wrong."""
    with pytest.raises(ValueError, match=names):
        parse_exit_rule(spec)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("137=fail", r"exit code 137 in '137=fail' is read as SIGKILL \(128\+9\) .* use SIGKILL=fail"),
        ("143=restart-free", r"read as SIGTERM .* use SIGTERM=restart-free"),
        ("130-140=restart", r"exit codes 130-140 .* are read as signals SIGINT-SIGUSR2"),
        ("256=fail", "1-255"),
    ],
)
def test_rules_that_can_never_match_are_rejected(spec: str, message: str) -> None:
    """A code a shell's 128+N makes a signal never matches an exit code: the message says what to write."""
    with pytest.raises(ValueError, match=message):
        parse_exit_rule(spec)


@pytest.mark.parametrize("spec", ["128=fail", "193=fail", "1-255=restart", "100-140=fail"])
def test_rules_with_a_code_that_stays_an_exit_code_are_kept(spec: str) -> None:
    """128, codes past the signals, and ranges that reach beyond them can match: accepted."""
    assert spec == parse_exit_rule(spec).spec


def test_first_matching_rule_wins() -> None:
    """Rules are tried in order; the first that matches decides."""
    rules = [parse_exit_rule("2=fail"), parse_exit_rule("1-5=restart-free")]
    assert "2=fail" == match_rule(rules, failure(FailureKind.EXITED, exit_code=2)).spec  # type: ignore[union-attr]
    assert "1-5=restart-free" == match_rule(rules, failure(FailureKind.EXITED, exit_code=3)).spec  # type: ignore[union-attr]
    assert match_rule(rules, failure(FailureKind.EXITED, exit_code=7)) is None


def test_rules_never_match_launch_failures_or_lost_nodes() -> None:
    """A rule on 127 does not turn a command that cannot run into a restart."""
    rules = [parse_exit_rule("127=restart")]
    assert match_rule(rules, failure(FailureKind.LAUNCH_FAILED, exit_code=127)) is None


@pytest.mark.parametrize(
    ("spec", "cause", "restart", "charged"),
    [
        ("2=fail", failure(FailureKind.EXITED, exit_code=2), False, 0),
        ("75=restart-free", failure(FailureKind.EXITED, exit_code=75), True, 0),
        ("SIGTERM=restart", failure(FailureKind.TERMINATED, signum=signal.SIGTERM), True, 1),
    ],
)
def test_rules_override_the_default_table(spec: str, cause: Failure, restart: bool, charged: int) -> None:
    """fail ends the run, restart-free restarts without charge, restart charges --max-restarts."""
    policy = RestartPolicy.create(max_restarts=5, rules=[parse_exit_rule(spec)])
    decision, after = policy.decide(cause, now=1.0)
    assert (restart, charged) == (decision.restart, len(after.budget(BudgetName.FAILURES).charges))
