"""What the journal's fold holds and the rules it shares with the controller (pure).

:mod:`elastic.core.journal.fold` folds a journal into these values. :class:`FoldedAttempt` is
the one shape of an attempt for readers (the report, ``elastic status``, the timeline, the
metrics, recovery, the driver's result); the controller's own, as it writes, is
:class:`elastic.core.controller.attempts.Attempt`. Progress, goodput and the
root cause (:func:`elastic.core.failures.root_cause`) are defined once, and the
controller, the timeline, the report and the metrics all call them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from elastic.core.diagnosis.signatures import Diagnosis, diagnosis_from
from elastic.core.failures import Failure, FailureKind, describe_grace_kills, grace_kill_from, root_cause
from elastic.core.labels import short_node, signal_number

__all__ = [
    "DRIVER_DIED",
    "CollateralCount",
    "DriverDeath",
    "FailureMark",
    "FoldedAttempt",
    "Span",
    "failure_from",
    "failure_kind",
    "failure_mark",
    "goodput",
    "made_progress",
    "optional_int",
    "phase_seconds",
    "productive",
    "split_backoff",
]

_COLLATERAL = FailureKind.COLLATERAL

# The reason of the workers_stopped record the driver that takes a run over journals for the
# attempt the dead driver was running.
DRIVER_DIED = "its driver died"


# -- the rules ---------------------------------------------------------------------------


def made_progress(resume_step: int | None, checkpoint_step: int | None) -> bool:
    """An attempt made progress when a newer complete checkpoint exists than the one it resumed from."""
    return checkpoint_step is not None and (resume_step is None or checkpoint_step > resume_step)


def productive(
    *,
    tracks_checkpoints: bool,
    resume_step: int | None,
    checkpoint_step: int | None,
    ended_run_in_success: bool,
) -> bool:
    """Whether an attempt's running time counts toward goodput: it made progress or, in a run
    that records no checkpoints, it is the attempt that ended the run successfully."""
    if tracks_checkpoints:
        return made_progress(resume_step, checkpoint_step)
    return ended_run_in_success


def goodput(productive_s: float, wall_s: float) -> float:
    """Productive seconds over the run's wall time (0..1; 0 for no wall time)."""
    return min(1.0, productive_s / wall_s) if wall_s > 0 else 0.0


# -- what the fold holds -------------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    """One phase from ``start_s`` to ``end_s``, seconds since the run started."""

    phase: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class FailureMark:
    """A ``worker_failed`` record, at seconds since the run started."""

    attempt: int
    kind: FailureKind  # a kind this version does not know (a newer journal's) reads as an exit
    rank: int | None
    node: str | None
    exit_code: int | None
    signal: str | None
    message: str | None
    at_s: float
    signal_number: int | None = None
    log_tail: tuple[str, ...] = ()
    traceback: str | None = None
    silent_s: float | None = None  # a hang's silence before detection (None: not hung, or an older journal)
    diagnosis: Diagnosis | None = None  # its signature (elastic.core.diagnosis.signatures), if one matched
    step: int | None = None  # the rank's last training step seen when it failed

    @property
    def observed_at(self) -> float:
        return self.at_s

    def to_failure(self) -> Failure:
        """The core's value (times: seconds since the run started)."""
        return Failure(
            kind=self.kind, attempt=self.attempt, rank=self.rank or 0, node=self.node or "?",
            observed_at=self.at_s, exit_code=self.exit_code, signal=self.signal_number,
            message=self.message, log_tail=self.log_tail, traceback=self.traceback,
            silent_s=self.silent_s, diagnosis=self.diagnosis, step=self.step,
        )

    @property
    def how(self) -> str:
        """The signal's name, or the exit code."""
        if self.signal:
            return self.signal
        return "" if self.exit_code is None else f"exit code {self.exit_code}"

    def describe(self) -> str:
        where = f" on {short_node(self.node)}" if self.node else ""
        how = f" ({self.how})" if self.how else ""
        signature = f" [{self.diagnosis.signature}]" if self.diagnosis else ""
        return f"attempt {self.attempt}: rank {self.rank}{where} {self.kind.value}{how}{signature}"


@dataclass(frozen=True)
class CollateralCount:
    """A ``collateral_counted`` record's count for one node: ranks not journaled one by one."""

    attempt: int
    node: str
    count: int
    at_s: float

    def describe(self) -> str:
        ranks = "rank" if self.count == 1 else "ranks"
        return f"attempt {self.attempt}: {self.count} more {ranks} on {short_node(self.node)} collateral"


@dataclass(frozen=True)
class DriverDeath:
    """How far the attempt a driver died in had trained, on the best evidence left: the highest
    step its journal placed (or the dead driver's ``state.json`` had, journaled at the takeover)
    and the checkpoint found then. A lower bound: its ranks may have trained on, unseen, until
    the driver died."""

    step: int | None  # the highest step known; None: no step was seen
    steps: int | None  # steps trained, from the step it resumed from (or 0) to that one
    source: str | None  # "steps" (its journal, state.json) or "checkpoint" (found at the takeover)

    def describe(self) -> str:
        """``its driver died after 15 steps at least (to step 15)``."""
        if self.step is None or self.steps is None:
            return f"{DRIVER_DIED} (no step seen)"
        through = " checkpointed" if self.source == "checkpoint" else ""
        return f"{DRIVER_DIED} after {self.steps} step{'s' if self.steps != 1 else ''} at least (to{through} step {self.step})"


@dataclass
class FoldedAttempt:
    """One attempt as its records tell it: what every reader of an attempt reads."""

    number: int
    spans: list[Span] = field(default_factory=list)
    failures: list[FailureMark] = field(default_factory=list)
    collateral_counted: list[CollateralCount] = field(default_factory=list)
    started: Mapping[str, Any] = field(default_factory=dict)  # its attempt_started record
    checkpoint_step: int | None = None
    stopped: bool = False  # its workers_stopped record was journaled
    restarted: bool = False  # the run relaunched after it
    reformed_as: int | None = None  # --spares: the attempt its world was re-formed in place as
    superseded: int = 0  # failures before this index were revised into consequences
    exited_0: set[int] = field(default_factory=set)
    # Its first rank to end its work: (rank, at_s, how many failures were journaled before it).
    first_exit_0: tuple[int, float, int] | None = None
    # Ranks that crashed on their way out, their work done, taken as finished: rank -> why (worker_exited's).
    finished_in_teardown: dict[int, str] = field(default_factory=dict)
    exit_timer: Mapping[str, Any] | None = None
    notice: Mapping[str, Any] | None = None  # its preemption_noticed record, if one came
    exit_timer_s: float | None = None  # when its exit timer started (for the goodput ledger)
    # The last step placed after that from a rank still running (for the ledger: training, not a wait).
    stepped_after_exit_0_s: float | None = None
    exit_spared: Mapping[str, Any] | None = None  # its latest exit_hang_spared record: ranks left working
    step_marks: list[tuple[float, int]] = field(default_factory=list)  # (at_s, step): first_step_seen, step_reached
    steps_placed_when_seen: bool = False  # its step_reached records say when their step was seen (seen_s_ago)
    begun_s: float = 0.0  # when the run turned to it (its start, or the relaunch before it)
    launched_s: float | None = None  # it entered running
    drain_started_s: float | None = None
    drain_reason: str | None = None  # why its drain began, as journaled
    ended_at_drain: frozenset[int] = frozenset()  # ranks that had exited 0 or failed when it began
    ended_s: float | None = None  # its ranks were all gone (workers_stopped)
    reached: str = "pending"  # the furthest of pending, launching, running it entered
    drain_grace: Mapping[str, Any] | None = None  # grace_s, grace_option, grace_why of its drain
    killed_at_grace: list[Mapping[str, Any]] = field(default_factory=list)  # the first few, journaled
    killed_at_grace_count: int = 0
    sign_of_life_s: float | None = None  # its first output or heartbeat, any rank
    sign_of_life: Mapping[str, Any] | None = None  # that sign_of_life_seen record (rank, node, source)
    first_step_s: float | None = None  # its first training step, any rank
    first_step: Mapping[str, Any] | None = None  # that first_step_seen record (rank, step, source)
    step_reached: Mapping[str, Any] | None = None  # its latest step_reached record (step, rank)
    startup_profiled: Mapping[str, Any] | None = None  # its start-up by phase (elastic.core.journal.ledger)
    ranks_started: Mapping[str, Any] | None = None  # its ranks_started record (warm, cold): --prewarm only
    pids: dict[int, int] = field(default_factory=dict)  # each rank's pid on its node (rank_pids)
    stragglers: list[Mapping[str, Any]] = field(default_factory=list)  # its straggler_seen records
    # Ranks killed as hung at exit, by rank: their exit_hung_killed records' judgement (finished, the
    # evidence and why, where the stack was).
    exit_judged: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    rerun_warning: str | None = None  # its workers_stopped record's: restarted after what looks like the end
    driver_died: bool = False  # its driver died while it ran (journaled by the driver that took over)
    adopted: Mapping[str, Any] | None = None  # its attempt_adopted record: a later driver took it over running

    @property
    def driver_death(self) -> DriverDeath | None:
        """How far it had trained when its driver died (a lower bound); None when it did not."""
        if not self.driver_died:
            return None
        seen = max((step for _, step in self.step_marks), default=None)
        saved = self.checkpoint_step
        base = self.resume_step or 0
        if saved is not None and saved > base and (seen is None or saved > seen):
            return DriverDeath(saved, saved - base, "checkpoint")
        if seen is None:
            return DriverDeath(None, None, None)
        return DriverDeath(seen, max(0, seen - base), "steps")

    @property
    def ended_in_success(self) -> bool:
        """Every rank exited 0 before any drain began (the success drain's own start) and none
        failed: its work is done, whether or not a driver lived to record the run's end."""
        ranks = set(range(self.world_size))
        return bool(ranks) and ranks <= self.exited_0 and ranks <= self.ended_at_drain and not self.failures

    @property
    def straggler_restart(self) -> bool:
        """It was drained to run the next attempt without a straggler's node."""
        return any(s.get("action") == "restart" for s in self.stragglers)

    @property
    def phase_reached(self) -> str:
        return self.reached

    @property
    def world_size(self) -> int:
        return optional_int(self.started.get("world_size")) or 0

    def effective_failures(self) -> list[FailureMark]:
        """Its failures as the controller ended up holding them: revised ones are collateral."""
        return [
            replace(f, kind=_COLLATERAL) if i < self.superseded else f
            for i, f in enumerate(self.failures)
        ]

    @property
    def collateral(self) -> int:
        """Every collateral failure of the attempt: listed and counted."""
        return sum(1 for k in self.failure_kinds() if k is _COLLATERAL)

    @property
    def resume_step(self) -> int | None:
        return optional_int(self.started.get("resume_step"))

    @property
    def root_cause(self) -> FailureMark | None:
        """The controller's rule over the attempt's failures, after any revision."""
        return root_cause(self.failures[self.superseded:])

    def failure_kinds(self) -> Iterable[FailureKind]:
        """Each failure's kind as the controller ended up counting it (revised ones: collateral)."""
        for index, failure in enumerate(self.failures):
            yield _COLLATERAL if index < self.superseded else failure.kind
        for count in self.collateral_counted:
            yield from [_COLLATERAL] * count.count

    def grace_kill_lines(self) -> list[str]:
        """``rank 0 ignored SIGTERM; killed after 5 s (--failure-grace)``: ranks SIGKILLed
        when the drain's grace ran out, in words (the first few; then how many more)."""
        option = (self.drain_grace or {}).get("grace_option")
        kills = [(optional_int(k.get("rank")) or 0, grace_kill_from(k)) for k in self.killed_at_grace]
        lines = describe_grace_kills(kills, None if option is None else str(option))
        more = self.killed_at_grace_count - len(self.killed_at_grace)
        if more > 0:
            lines.append(f"and {more} more rank{'s' if more != 1 else ''} killed when the grace ran out")
        return lines

    def exit_judged_by_rank(self) -> list[tuple[int, Mapping[str, Any]]]:
        """Its ranks killed as hung at exit and their judgement, in rank order."""
        ranks = [(int(rank), judged) for rank, judged in self.exit_judged.items() if rank.isdigit()]
        return sorted(ranks, key=lambda rank_judged: rank_judged[0])

    def exit_judged_lines(self) -> list[str]:
        """Each rank killed as hung at exit, and whether it was judged finished and why, in words:
        ``rank 1 hung at exit, judged finished: its main thread was at interpreter exit (...)``."""
        lines = []
        for rank, judged in self.exit_judged_by_rank():
            if judged.get("finished"):
                lines.append(f"rank {rank} hung at exit, judged finished: {judged.get('why')}")
                continue
            why = f"its output ends in {judged['error']}" if judged.get("error") else None
            if why is None and judged.get("frame"):
                why = f"its main thread {judged['frame']}"
            lines.append(f"rank {rank} hung at exit, no evidence it had finished{f' ({why})' if why else ''}")
        return lines

    def failed_after_exit_0(self) -> tuple[int, float] | None:
        """The rank that had exited 0 while its peers still ran when the root cause came, and how long
        before it (a peer gone early: the root cause's collective had no one to talk to); None when
        none had, or the root cause is a hang at exit (which says so itself)."""
        cause, first = self.root_cause, self.first_exit_0
        if cause is None or first is None or cause.kind is FailureKind.EXIT_HUNG:
            return None
        rank, at_s, failures_before = first
        if rank == cause.rank or cause in self.failures[:failures_before]:
            return None
        return rank, cause.at_s - at_s

    def running_after_exit_0(self) -> tuple[list[int], int, float] | None:
        """Ranks still running when the drain began after a peer's exit 0 (a stop, a notice):
        those ranks, the peer, and the seconds from its exit 0 to the drain. None otherwise."""
        if self.exit_timer is None or self.exit_timer_s is None or self.drain_started_s is None:
            return None
        ranks = [r for r in range(self.world_size) if r not in self.ended_at_drain]
        peer = optional_int(self.exit_timer.get("rank"))
        if not ranks or peer is None:
            return None
        return ranks, peer, max(0.0, self.drain_started_s - self.exit_timer_s)

    @property
    def backoff_s(self) -> float:
        """Its wait before its launch that the restart policy chose (``--backoff``)."""
        return phase_seconds(self.spans, "backoff")

    @property
    def waited_s(self) -> float:
        """Its time before its launch: the backoff, and pending (nodes, ports, the checkpoint scan)."""
        return phase_seconds(self.spans, "pending", "backoff")

    def sign_of_life_after(self, previous: FoldedAttempt) -> float | None:
        """Seconds from ``previous``'s root cause to this attempt's first sign of life, less the
        backoff between: what a restart costs until the ranks do anything (their start-up
        included), the wait the policy chose shown apart."""
        cause = previous.root_cause
        if cause is None or self.sign_of_life_s is None:
            return None
        return max(0.0, self.sign_of_life_s - cause.at_s - self.backoff_s)

    def running_s(self, open_span: Span | None = None) -> float:
        spans = [*self.spans, *([open_span] if open_span else [])]
        return sum(s.end_s - s.start_s for s in spans if s.phase == "running")


# -- reading records ------------------------------------------------------------------


def optional_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _optional_float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def failure_mark(event: Mapping[str, Any], at_s: float) -> FailureMark:
    return FailureMark(
        attempt=int(event.get("attempt", 0)),
        kind=failure_kind(event.get("kind")),
        rank=optional_int(event.get("rank")),
        node=None if event.get("node") is None else str(event["node"]),
        exit_code=optional_int(event.get("exit_code")),
        signal=None if event.get("signal") is None else str(event["signal"]),
        message=None if event.get("message") is None else str(event["message"]),
        at_s=at_s,
        signal_number=optional_int(event.get("signal_number")) or _number_of(event.get("signal")),
        log_tail=tuple(str(line) for line in event.get("log_tail") or ()),
        traceback=None if event.get("traceback") is None else str(event["traceback"]),
        silent_s=_optional_float(event.get("silent_s")),
        diagnosis=diagnosis_from(event.get("diagnosis")),
        step=optional_int(event.get("step")),
    )


def failure_kind(value: Any) -> FailureKind:
    """A journaled kind; one this version does not know (a newer journal's), or none, reads as an exit."""
    try:
        return FailureKind(value)
    except ValueError:
        return FailureKind.EXITED


def failure_from(event: Mapping[str, Any]) -> FailureMark:
    """A failure record that is not placed in time (the ``root_cause`` of ``run_finished``)."""
    return failure_mark(event, -1.0)


def phase_seconds(spans: Iterable[Span], *phases: str) -> float:
    """Seconds of ``spans`` in any of ``phases``."""
    return sum((s.end_s - s.start_s for s in spans if s.phase in phases), 0.0)


def split_backoff(span: Span, backoff: tuple[float, float] | None) -> list[Span]:
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




def _number_of(name: Any) -> int | None:
    """A signal's number from its name (version-1 records journal only the name)."""
    return signal_number(str(name)) if name else None
