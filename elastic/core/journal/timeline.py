"""A run's timeline from its journal: phases per attempt, failures, goodput (pure).

A projection of :class:`elastic.core.journal.fold.RunFold`, the one reading of a journal;
:mod:`elastic.views.timeline_html` draws it; ``elastic report`` writes the drawing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from elastic.core.journal.fold import (
    CollateralCount, FailureMark, FoldedAttempt, FoldError, Span, failure_from, fold,
)
from elastic.core.journal.ledger import CAUSES, Ledger, run_ledger
from elastic.core.labels import short_node
from elastic.core.training.stragglers import straggler_text

__all__ = [
    "AttemptView",
    "CollateralCount",
    "FailureMark",
    "Span",
    "StragglerMark",
    "Timeline",
    "TimelineError",
    "build_timeline",
    "short_node",
]

TimelineError = FoldError  # a journal that holds no run or an event without a readable time


@dataclass(frozen=True)
class StragglerMark:
    """A straggler on its node's lane: when it was found, the rank, the ratio, what followed."""

    at_s: float
    rank: int
    node: str
    ratio: float
    action: str
    text: str


@dataclass(frozen=True)
class AttemptView:
    """One attempt as the timeline lays it out: the folded attempt it holds (the one shape of an
    attempt for readers, :class:`elastic.core.journal.folded.FoldedAttempt`), what only the run
    knows of it (productive or not, its seconds by cause), and its bars and marks on the lanes."""

    attempt: FoldedAttempt
    made_progress: bool = False  # productive, by :func:`elastic.core.journal.folded.productive`
    ledger: tuple[tuple[str, float], ...] = ()  # its seconds by cause (elastic.core.journal.ledger), in CAUSES order

    @property
    def number(self) -> int:
        return self.attempt.number

    @property
    def spans(self) -> tuple[Span, ...]:
        """Its waits and phases, as its bars are drawn."""
        return tuple(self.attempt.spans)

    @property
    def nodes(self) -> tuple[str, ...]:
        """The lanes its bars go on: the nodes of its plan."""
        return tuple(str(n) for n in self.attempt.started.get("nodes") or ())

    @property
    def nproc_per_node(self) -> tuple[int, ...]:
        return tuple(int(n) for n in self.attempt.started.get("nproc_per_node") or ())

    @property
    def world_size(self) -> int | None:
        """Its plan's world, shown blank when it has none."""
        return _optional_int(self.attempt.started.get("world_size"))

    @property
    def stragglers(self) -> tuple[StragglerMark, ...]:
        return tuple(
            StragglerMark(
                at_s=float(s.get("at_s") or 0.0), rank=_optional_int(s.get("rank")) or 0,
                node=str(s.get("node")), ratio=float(s.get("ratio") or 0.0),
                action=str(s.get("action")), text=straggler_text(s),
            )
            for s in self.attempt.stragglers
        )

    @property
    def end_notes(self) -> tuple[str, ...]:
        """What its end meant, in words: ranks killed as hung at exit and whether they had finished,
        and a warning when it was restarted from a checkpoint holding the last step it reached."""
        warning = self.attempt.rerun_warning
        return (*self.attempt.exit_judged_lines(), *([f"warning: {warning}"] if warning else []))

    @property
    def start_s(self) -> float:
        return self.attempt.spans[0].start_s if self.attempt.spans else 0.0

    @property
    def end_s(self) -> float:
        return self.attempt.spans[-1].end_s if self.attempt.spans else 0.0

    @property
    def ran_s(self) -> float:
        """The time its ranks ran: from its launch to the last rank reaped."""
        return max(0.0, self.end_s - self.start_s - self.attempt.waited_s)


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
    ledger: tuple[tuple[str, float], ...] = ()  # the run's seconds by cause; they add up to duration_s
    excluded_nodes: tuple[Mapping[str, Any], ...] = ()  # nodes left out of later attempts: node, reason, attempt
    # the ledger's productive training over the run's wall time (RunLedger.productive_share)
    productive_share: float | None = None

    def lanes_of(self, attempt: AttemptView) -> tuple[str, ...]:
        """The nodes an attempt's bars go on: its own, else its predecessor's, else all."""
        if attempt.nodes:
            return attempt.nodes
        earlier = [a.nodes for a in self.attempts if a.number < attempt.number and a.nodes]
        return earlier[-1] if earlier else self.lanes


# -- building the model -----------------------------------------------------------------


def build_timeline(events: Sequence[Mapping[str, Any]], *, truncated_tail: bool = False) -> Timeline:
    """The timeline of a run from its journal events, in journal order."""
    if not events:
        raise TimelineError("the journal holds no events")
    run = fold(events)
    assert run.origin is not None
    attempts = run.closed()
    flags = run.productive_flags(attempts)
    ledger = run_ledger(run)
    views = tuple(
        AttemptView(a, ok, _causes(ledger.of(a.number))) for a, ok in zip(attempts, flags, strict=True)
    )
    lanes: list[str] = []
    for node in [n for a in views for n in a.nodes] + [
        f.node for a in attempts for f in a.failures if f.node
    ] + [c.node for a in attempts for c in a.collateral_counted] + [s.node for a in views for s in a.stragglers]:
        if node not in lanes:
            lanes.append(node)
    finished: Mapping[str, Any] = run.finished or {}
    cause = finished.get("root_cause")
    return Timeline(
        run_id=run.run_id,
        started_at=run.origin,
        duration_s=run.now_s,
        attempts=views,
        lanes=tuple(lanes),
        outcome=run.outcome,
        exit_status=_optional_int(finished.get("exit_status")),
        reason=None if finished.get("reason") is None else str(finished["reason"]),
        root_cause=failure_from(cause) if isinstance(cause, Mapping) else None,
        tracks_checkpoints=run.tracks_checkpoints(attempts),
        truncated_tail=truncated_tail,
        resumed_at_s=tuple(run.resumed_at_s),
        ledger=_causes(ledger.run),
        excluded_nodes=tuple(run.excluded_nodes),
        productive_share=ledger.productive_share,
    )


def _causes(ledger: Ledger | None) -> tuple[tuple[str, float], ...]:
    return () if ledger is None else tuple((c, ledger.seconds.get(c, 0.0)) for c in CAUSES)


def _optional_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
