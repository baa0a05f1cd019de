"""Events injected into a run from outside (a failure schedule's log), read and placed on its timeline (pure).

``elastic report --events FILE`` marks them. The file holds one JSON object a line, as a
replayer writes it when it injects an event (``benchmarks/goodput/runner.py`` does):

    {"t": 1765101234.56, "kind": "sigkill", "target": "rank 1", "cause": "GPU fell off the bus"}

``t`` is when it was injected: Unix seconds, or an ISO 8601 time with its zone; ``kind`` says
what it was; ``target`` (whom) and ``cause`` (what it stands for) are optional; other fields
are ignored. Each event is placed in the attempt that had begun when it came, beside what
the journal shows next: the first failure elastic recorded in that attempt from then on (not a
collateral one, when there is another) or its preemption notice, whichever came first, and the
first training step of a later attempt (the recovery as elastic saw it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from elastic.core.failures import FailureKind
from elastic.core.journal.timeline import Timeline

__all__ = ["STAMP_SLACK_S", "InjectedEvent", "InjectedLogError", "InjectedMark", "injected_lines", "place_injected", "read_injected"]

# A log may stamp an event just after the act (the kill sent, then the clock read), and elastic
# may record the failure first: failures from this long before the event are taken as following it.
STAMP_SLACK_S = 0.25


class InjectedLogError(ValueError):
    """A line of the events file that cannot be read: names the file and the line."""


@dataclass(frozen=True)
class InjectedEvent:
    """One line of the events file: when (Unix seconds), what, whom, standing for what."""

    t: float
    kind: str
    target: str = ""
    cause: str = ""
    line: int = 0


@dataclass(frozen=True)
class InjectedMark:
    """An injected event on the run's timeline, and what the journal shows after it."""

    event: InjectedEvent
    at_s: float  # seconds since the run's start (negative: before it)
    attempt: int | None  # the attempt that had begun when it came; None: before the first
    where: str  # ``in attempt 2``, ``between attempts 2 and 3``, ``before the run's first attempt``
    seen: str | None = None  # the first failure journaled in that attempt from then on, in words
    seen_after_s: float | None = None  # how long after the event that failure was recorded
    next_step_attempt: int | None = None  # the first later attempt that showed a training step
    next_step_after_s: float | None = None  # how long after the event its first step came

    def seen_text(self) -> str | None:
        """``rank 1 on vm killed (SIGKILL) 0.02 s later``: the failure elastic recorded after it."""
        if self.seen is None or self.seen_after_s is None:
            return None
        return f"{self.seen} {abs(self.seen_after_s):.2f} s {'later' if self.seen_after_s >= 0 else 'earlier'}"

    def recovery_text(self) -> str | None:
        """``attempt 1's first step 4.10 s later``: the training that followed it."""
        if self.next_step_attempt is None or self.next_step_after_s is None:
            return None
        return f"attempt {self.next_step_attempt}'s first step {self.next_step_after_s:.2f} s later"

    def describe(self) -> str:
        """``+12.30 s sigkill rank 1 (faulty GPU): in attempt 0; elastic saw rank 1 ...; attempt 1's first step ...``."""
        event = self.event
        what = " ".join(part for part in (event.kind, event.target) if part)
        if event.cause:
            what += f" ({event.cause})"
        parts = [f"{self.at_s:+.2f} s {what}: {self.where}"]
        if (seen := self.seen_text()) is not None:
            parts.append(f"elastic saw {seen}")
        if (recovery := self.recovery_text()) is not None:
            parts.append(recovery)
        return "; ".join(parts)


def read_injected(text: str, *, source: str) -> tuple[InjectedEvent, ...]:
    """The events of an events file's ``text`` (``source``: its name, for errors), in file order.

    Raises :class:`InjectedLogError` naming ``source`` and the line for a line that is not a
    JSON object with a time ``t`` and a ``kind``; blank lines are skipped."""
    events = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
        except ValueError:
            raise InjectedLogError(f"{source}:{number}: not a JSON line") from None
        if not isinstance(entry, dict):
            raise InjectedLogError(f"{source}:{number}: not a JSON object")
        t = _seconds(entry.get("t"))
        if t is None:
            raise InjectedLogError(f"{source}:{number}: no time: \"t\" is Unix seconds or an ISO 8601 time with its zone")
        kind = entry.get("kind")
        if not isinstance(kind, str) or not kind:
            raise InjectedLogError(f"{source}:{number}: no \"kind\" (a string: sigkill, preemption, ...)")
        events.append(InjectedEvent(t, kind, _text(entry.get("target")), _text(entry.get("cause")), number))
    return tuple(events)


def _seconds(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            return None
        return None if when.tzinfo is None else when.timestamp()
    return None


def _text(value: object) -> str:
    return "" if value is None else str(value)


def place_injected(timeline: Timeline, events: Sequence[InjectedEvent]) -> tuple[InjectedMark, ...]:
    """Each event on ``timeline``: its time from the run's start, its attempt, what followed it."""
    origin = timeline.started_at.timestamp()
    marks = []
    for event in sorted(events, key=lambda e: e.t):
        at_s = event.t - origin
        begun = [view for view in timeline.attempts if view.start_s <= at_s]
        if not begun:
            marks.append(InjectedMark(event, at_s, None, "before the run's first attempt"))
            continue
        view = begun[-1]
        last = view is timeline.attempts[-1]
        if at_s <= (timeline.duration_s if last else view.end_s):
            where = f"in attempt {view.number}"
        elif last:
            where = f"after the run's last record (attempt {view.number})"
        else:
            where = f"between attempts {view.number} and {view.number + 1}"
        after = sorted((f for f in view.attempt.failures if f.at_s >= at_s - STAMP_SLACK_S), key=lambda f: f.at_s)
        failures = [f for f in after if f.kind is not FailureKind.COLLATERAL] or after
        later = [a.attempt for a in timeline.attempts
                 if a.number > view.number and a.attempt.first_step_s is not None and a.attempt.first_step_s >= at_s]
        seen, seen_after_s = (failures[0].describe().partition(": ")[2], failures[0].at_s - at_s) if failures else (None, None)
        notice = view.attempt.notice or {}
        notice_s = _since(timeline, notice.get("time"))
        if notice_s is not None and notice_s >= at_s - STAMP_SLACK_S and (seen_after_s is None or notice_s - at_s < seen_after_s):
            seen, seen_after_s = f"a preemption notice ({notice.get('source')})", notice_s - at_s
        marks.append(InjectedMark(
            event, at_s, view.number, where, seen=seen, seen_after_s=seen_after_s,
            next_step_attempt=later[0].number if later else None,
            next_step_after_s=later[0].first_step_s - at_s if later and later[0].first_step_s is not None else None,
        ))
    return tuple(marks)


def _since(timeline: Timeline, when: object) -> float | None:
    """Seconds from the run's start to a record's ISO ``time``; None when it has none."""
    if not isinstance(when, str):
        return None
    try:
        return (datetime.fromisoformat(when) - timeline.started_at).total_seconds()
    except (TypeError, ValueError):  # not a time, or one without its zone
        return None


def injected_lines(marks: Sequence[InjectedMark], source: str) -> list[str]:
    """What ``elastic report --events`` prints: a heading line, then one line an event."""
    if not marks:
        return [f"injected events ({source}): none"]
    return [f"injected events ({source}), from the run's start:", *(f"  {mark.describe()}" for mark in marks)]
