"""User rules on top of the failure table: ``--on-exit 2=fail``; first match wins (pure)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from elastic.core.failures import Failure, FailureKind, decode_returncode
from elastic.core.labels import signal_name, signal_number

__all__ = ["ExitRule", "RuleAction", "match_rule", "parse_exit_rule"]

_MAX_EXIT_CODE = 255
# Rules speak about what a rank did; these kinds are never a rank's own doing.
_NOT_RULED = frozenset(
    {FailureKind.LAUNCH_FAILED, FailureKind.NODE_LOST, FailureKind.HUNG, FailureKind.EXIT_HUNG,
     FailureKind.COLLATERAL}
)


class RuleAction(enum.Enum):
    RESTART = "restart"  # restart, charged to --max-restarts
    RESTART_FREE = "restart-free"  # restart, charged to no budget
    FAIL = "fail"  # end the run now


@dataclass(frozen=True)
class ExitRule:
    """Exit codes ``first..last`` or one signal, and what to do when a rank ends so."""

    action: RuleAction
    first: int | None = None
    last: int | None = None
    signal: int | None = None
    spec: str = ""

    def matches(self, failure: Failure) -> bool:
        if failure.kind in _NOT_RULED:
            return False
        if self.signal is not None:
            return failure.signal == self.signal
        code = failure.exit_code
        return code is not None and self.first is not None and self.last is not None and (
            self.first <= code <= self.last
        )


def parse_exit_rule(spec: str) -> ExitRule:
    """``CODE=ACTION``, ``FIRST-LAST=ACTION`` or ``SIGNAME=ACTION``.

    Raises ``ValueError`` naming the part of the spec that is wrong.
    """
    match, sep, action_text = spec.partition("=")
    actions = ", ".join(a.value for a in RuleAction)
    if not sep or not match:
        raise ValueError(f"must be MATCH=ACTION like 2=fail, got {spec!r}")
    try:
        action = RuleAction(action_text)
    except ValueError:
        raise ValueError(f"action {action_text!r} in {spec!r} must be one of {actions}") from None
    if match[0].isalpha():
        signum = signal_number(match)
        if signum is None:
            raise ValueError(f"{match!r} in {spec!r} is not a signal name like SIGKILL")
        return ExitRule(action, signal=signum, spec=spec)
    low, dash, high = match.partition("-")
    try:
        first = int(low)
        last = int(high) if dash else first
    except ValueError:
        raise ValueError(
            f"{match!r} in {spec!r} must be an exit code, a range like 3-9, or a signal name"
        ) from None
    if not 1 <= first <= last <= _MAX_EXIT_CODE:
        raise ValueError(f"exit codes in {spec!r} must be within 1-{_MAX_EXIT_CODE}, low to high")
    _reject_signal_codes(first, last, spec, action)
    return ExitRule(action, first=first, last=last, spec=spec)


def _reject_signal_codes(first: int, last: int, spec: str, action: RuleAction) -> None:
    """A rule no exit code can ever match: every code of it reads as a signal (128+N).

    A rank that exits 137 is classified as killed by SIGKILL, so ``137=fail``
    would never fire; the user meant ``SIGKILL=fail``. A range with at least
    one code that stays an exit code (``1-255``) is kept.
    """
    signals = [decode_returncode(code)[1] for code in range(first, last + 1)]
    if any(signum is None for signum in signals):
        return
    names = [signal_name(signum) for signum in signals if signum is not None]
    if first == last:
        instead = (
            f": use {names[0]}={action.value}" if signal_number(names[0]) is not None else ""
        )
        raise ValueError(
            f"exit code {first} in {spec!r} is read as {names[0]} (128+{first - 128}) and never "
            f"matches an exit code{instead}"
        )
    raise ValueError(
        f"exit codes {first}-{last} in {spec!r} are read as signals {names[0]}-{names[-1]} "
        f"(128+N) and never match an exit code: name the signals, e.g. {names[0]}={action.value}"
    )


def match_rule(rules: Sequence[ExitRule], failure: Failure) -> ExitRule | None:
    """The first rule that matches ``failure``, or ``None`` (the default table applies)."""
    return next((rule for rule in rules if rule.matches(failure)), None)
