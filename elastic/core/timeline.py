"""A run's timeline from its journal: phases per attempt, failures, goodput (pure).

:mod:`elastic.run.timeline_drawing` draws it; ``elastic report`` writes the drawing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from elastic.core.failures import FailureKind, node_label

__all__ = [
    "AttemptView",
    "CollateralCount",
    "FailureMark",
    "Span",
    "Timeline",
    "TimelineError",
    "build_timeline",
    "made_progress",
    "short_node",
]

# Phases in the order a run goes through them; "backoff" is the wait inside pending.
_REACHED = ("pending", "launching", "running")
_NEVER_ROOT_CAUSE = frozenset(
    k.value for k in (FailureKind.COLLATERAL, FailureKind.TEARDOWN_NOISE, FailureKind.TRANSIENT_RPC)
)


class TimelineError(Exception):
    """A journal that holds no run or an event without a readable time."""


@dataclass(frozen=True)
class Span:
    """One phase from ``start_s`` to ``end_s``, seconds since the run started."""

    phase: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class FailureMark:
    """A ``worker_failed`` event, at seconds since the run started."""

    attempt: int
    kind: str
    rank: int | None
    node: str | None
    exit_code: int | None
    signal: str | None
    message: str | None
    at_s: float

    @property
    def how(self) -> str:
        """The signal's name, or the exit code."""
        if self.signal:
            return self.signal
        return "" if self.exit_code is None else f"exit code {self.exit_code}"

    def describe(self) -> str:
        where = f" on {short_node(self.node)}" if self.node else ""
        how = f" ({self.how})" if self.how else ""
        return f"attempt {self.attempt}: rank {self.rank}{where} {self.kind}{how}"


@dataclass(frozen=True)
class CollateralCount:
    """A ``collateral_counted`` event's count for one node: ranks not journaled one by one."""

    attempt: int
    node: str
    count: int
    at_s: float

    def describe(self) -> str:
        ranks = "rank" if self.count == 1 else "ranks"
        return f"attempt {self.attempt}: {self.count} more {ranks} on {short_node(self.node)} collateral"


@dataclass(frozen=True)
class AttemptView:
    """One attempt: its waits and phases, nodes, failures and checkpoints."""

    number: int
    spans: tuple[Span, ...]
    nodes: tuple[str, ...] = ()
    nproc_per_node: tuple[int, ...] = ()
    world_size: int | None = None
    failures: tuple[FailureMark, ...] = ()
    collateral_counted: tuple[CollateralCount, ...] = ()
    resume_step: int | None = None
    checkpoint_step: int | None = None
    made_progress: bool = False

    @property
    def start_s(self) -> float:
        return self.spans[0].start_s if self.spans else 0.0

    @property
    def end_s(self) -> float:
        return self.spans[-1].end_s if self.spans else 0.0

    @property
    def running_s(self) -> float:
        return sum(s.end_s - s.start_s for s in self.spans if s.phase == "running")

    @property
    def phase_reached(self) -> str:
        reached = [_REACHED.index(s.phase) for s in self.spans if s.phase in _REACHED]
        return _REACHED[max(reached)] if reached else "pending"

    @property
    def root_cause(self) -> FailureMark | None:
        """The earliest failure that is not a consequence of another (ties: lowest rank)."""
        causes = [f for f in self.failures if f.kind not in _NEVER_ROOT_CAUSE]
        return min(causes, key=lambda f: (f.at_s, f.rank or 0), default=None)


@dataclass(frozen=True)
class Timeline:
    """What ``elastic report`` draws; times are seconds since ``started_at``."""

    run_id: str
    started_at: datetime
    duration_s: float
    attempts: tuple[AttemptView, ...]
    lanes: tuple[str, ...]
    outcome: str | None = None
    exit_status: int | None = None
    reason: str | None = None
    root_cause: FailureMark | None = None
    tracks_checkpoints: bool = False
    truncated_tail: bool = False
    resumed_at_s: tuple[float, ...] = ()

    @property
    def productive_s(self) -> float:
        return sum(a.running_s for a in self.attempts if a.made_progress)

    @property
    def goodput(self) -> float:
        """Running time of attempts that made progress, over the run's wall time."""
        return self.productive_s / self.duration_s if self.duration_s > 0 else 0.0

    def lanes_of(self, attempt: AttemptView) -> tuple[str, ...]:
        """The nodes an attempt's bars go on: its own, else its predecessor's, else all."""
        if attempt.nodes:
            return attempt.nodes
        earlier = [a.nodes for a in self.attempts if a.number < attempt.number and a.nodes]
        return earlier[-1] if earlier else self.lanes


# -- building the model -----------------------------------------------------------------


@dataclass
class _Draft:
    number: int
    spans: list[Span] = field(default_factory=list)
    failures: list[FailureMark] = field(default_factory=list)
    collateral_counted: list[CollateralCount] = field(default_factory=list)
    started: Mapping[str, Any] = field(default_factory=dict)
    checkpoint_step: int | None = None


def _time(event: Mapping[str, Any], index: int) -> datetime:
    try:
        return datetime.fromisoformat(str(event["time"]))
    except (KeyError, ValueError):
        raise TimelineError(f"event {index + 1} ({event.get('event')}) has no readable time") from None


def _optional_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _failure(event: Mapping[str, Any], at_s: float) -> FailureMark:
    return FailureMark(
        attempt=int(event.get("attempt", 0)),
        kind=str(event.get("kind", "?")),
        rank=_optional_int(event.get("rank")),
        node=None if event.get("node") is None else str(event["node"]),
        exit_code=_optional_int(event.get("exit_code")),
        signal=None if event.get("signal") is None else str(event["signal"]),
        message=None if event.get("message") is None else str(event["message"]),
        at_s=at_s,
    )


def _split_backoff(span: Span, backoff: tuple[float, float] | None) -> list[Span]:
    """A pending span cut around the backoff wait that began inside it."""
    if span.phase != "pending" or backoff is None:
        return [span]
    begin = min(max(backoff[0], span.start_s), span.end_s)
    end = min(begin + backoff[1], span.end_s)
    parts = [
        Span("pending", span.start_s, begin),
        Span("backoff", begin, end),
        Span("pending", end, span.end_s),
    ]
    return [p for p in parts if p.end_s > p.start_s]


def build_timeline(events: Sequence[Mapping[str, Any]], *, truncated_tail: bool = False) -> Timeline:
    """The timeline of a run from its journal events, in journal order."""
    if not events:
        raise TimelineError("the journal holds no events")
    origin = _time(events[0], 0)
    drafts: dict[int, _Draft] = {}
    finished: Mapping[str, Any] = {}
    resumed: list[float] = []
    phase, since, current = "pending", 0.0, 0
    backoff: tuple[float, float] | None = None
    now = 0.0

    def close(at_s: float, attempt: int) -> None:
        nonlocal backoff
        if phase != "done" and at_s > since:
            draft = drafts.setdefault(attempt, _Draft(attempt))
            draft.spans.extend(_split_backoff(Span(phase, since, at_s), backoff))
            backoff = None

    for index, event in enumerate(events):
        at_s = (_time(event, index) - origin).total_seconds()
        name = event.get("event")
        attempt = int(event.get("attempt", current))
        if name == "run_resumed":  # the old driver died somewhere after its last event
            close(now, current)
            phase, since = "pending", at_s
            resumed.append(at_s)
        current = max(current, attempt)
        draft = drafts.setdefault(attempt, _Draft(attempt))
        if name == "phase_changed":
            close(at_s, attempt)
            phase, since = str(event.get("dest")), at_s
        elif name == "backoff_started":
            backoff = (at_s, float(event.get("delay_s") or 0.0))
        elif name == "attempt_started":
            draft.started = event
        elif name == "worker_failed":
            draft.failures.append(_failure(event, at_s))
        elif name == "collateral_counted":
            by_node = event.get("by_node")
            for node, count in (by_node.items() if isinstance(by_node, Mapping) else ()):
                if _optional_int(count):
                    draft.collateral_counted.append(CollateralCount(attempt, str(node), count, at_s))
        elif name == "workers_stopped":
            draft.checkpoint_step = _optional_int(event.get("checkpoint_step"))
        elif name == "run_finished":
            finished = event
        now = at_s
    close(now, current)

    ordered = [d for _, d in sorted(drafts.items()) if d.spans or d.started or d.failures]
    tracks = any(
        d.checkpoint_step is not None or d.started.get("resume_step") is not None for d in ordered
    )
    outcome = None if not finished else str(finished.get("outcome"))
    attempts = tuple(_attempt(d, tracks, outcome == "succeeded" and d is ordered[-1]) for d in ordered)
    lanes: list[str] = []
    for node in [n for a in attempts for n in a.nodes] + [
        f.node for a in attempts for f in a.failures if f.node
    ] + [c.node for a in attempts for c in a.collateral_counted]:
        if node not in lanes:
            lanes.append(node)
    cause = finished.get("root_cause")
    return Timeline(
        run_id=str(events[0].get("run_id", "?")),
        started_at=origin,
        duration_s=now,
        attempts=attempts,
        lanes=tuple(lanes),
        outcome=outcome,
        exit_status=_optional_int(finished.get("exit_status")),
        reason=None if finished.get("reason") is None else str(finished["reason"]),
        root_cause=_failure(cause, -1.0) if isinstance(cause, Mapping) else None,
        tracks_checkpoints=tracks,
        truncated_tail=truncated_tail,
        resumed_at_s=tuple(resumed),
    )


def made_progress(
    *,
    run_tracks_checkpoints: bool,
    resume_step: int | None,
    checkpoint_step: int | None,
    ended_run_in_success: bool,
) -> bool:
    """Goodput's rule: a newer checkpoint than the attempt resumed from, or, in a run
    that records no checkpoints, being the attempt that ended the run successfully."""
    if run_tracks_checkpoints:
        return checkpoint_step is not None and (resume_step is None or checkpoint_step > resume_step)
    return ended_run_in_success


def _attempt(draft: _Draft, tracks: bool, succeeded_last: bool) -> AttemptView:
    started = draft.started
    resume_step = _optional_int(started.get("resume_step"))
    checkpoint = draft.checkpoint_step
    progress = made_progress(
        run_tracks_checkpoints=tracks,
        resume_step=resume_step,
        checkpoint_step=checkpoint,
        ended_run_in_success=succeeded_last,
    )
    return AttemptView(
        number=draft.number,
        spans=tuple(draft.spans),
        nodes=tuple(str(n) for n in started.get("nodes") or ()),
        nproc_per_node=tuple(int(n) for n in started.get("nproc_per_node") or ()),
        world_size=_optional_int(started.get("world_size")),
        failures=tuple(draft.failures),
        collateral_counted=tuple(draft.collateral_counted),
        resume_step=resume_step,
        checkpoint_step=checkpoint,
        made_progress=progress,
    )


def short_node(node: str) -> str:
    """A lane's label: the node's label, a host name without its domain; at most 18 characters."""
    node = node_label(node)
    if not node.replace(".", "").isdigit():  # an IP address stays whole
        node = node.split(".", 1)[0] or node
    return node if len(node) <= 18 else node[:17] + "…"
