"""One attempt's record as the controller keeps it, and its training steps as journaled. Pure.

The record is the writer's: the controller's parts change the current attempt as
observations come in, and the journal's records say what they decided. Readers of a
finished attempt (the report, ``elastic status``, the timeline, the driver's result)
read the journal's fold, :class:`elastic.core.journal.folded.FoldedAttempt`, not this.

The record keeps its root cause as failures come in, and revises it when a node
found lost while draining explains the failure that began the drain
(:meth:`Attempt.node_loss_explains`, :meth:`Attempt.revise_cause`). Whether the attempt
was restarted is not its own to say: :attr:`elastic.core.controller.state.ControllerState.relaunches`
derives it from the drain, and the state seals it on the record when the next attempt opens.

``first_step_seen`` is journaled once per attempt, for the first rank to show a
step; ``step_reached`` (the highest step over the ranks, and who reached it)
when the attempt's drain starts, when it ends, and while it runs at most once
every :data:`STEP_REACHED_EVERY_S` when the step changed, so a driver that
dies loses at most that much of the record. Pure.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from elastic.core.controller.drain import DrainReason, Draining
from elastic.core.diagnosis.causes import Silence, is_symptom
from elastic.core.failures import Failure, FailureKind, GRACE_KILLS_LISTED, WorkerExit, root_cause
from elastic.core.messages import Outcome, RankStep
from elastic.core.policy.restarts import BudgetName
from elastic.core.rank_ends import Finished
from elastic.core.training.stragglers import StragglerWatch

__all__ = [
    "COLLATERAL_LISTED", "STEP_HISTORY", "STEP_HISTORY_EVERY_S", "STEP_HISTORY_FULL", "STEP_HISTORY_FULL_S",
    "STEP_REACHED_EVERY_S", "Attempt", "AttemptSteps", "failure_fields", "run_root_cause",
]

STEP_REACHED_EVERY_S = 60.0
# Step reports kept per rank: every one of the last STEP_HISTORY_FULL_S (a node reports every
# second while the steps change; at most STEP_HISTORY_FULL of them), and before those one at
# least STEP_HISTORY_EVERY_S apart, STEP_HISTORY of them: over five minutes, whatever the pace.
# Thinned reports can only undercount the steps after a moment (elastic.core.rank_ends): within the
# last minute, where a stop's catch is weighed against a few steps, nothing is thinned.
STEP_HISTORY = 64
STEP_HISTORY_EVERY_S = 5.0
STEP_HISTORY_FULL_S = 60.0
STEP_HISTORY_FULL = 128


class AttemptSteps:
    """The steps one attempt's ranks reported, and what of them is journaled."""

    def __init__(self) -> None:
        self.first: RankStep | None = None
        # The highest step read with the first (the node read several lines at once): the first's
        # ``at`` is when that one was written, not the first step itself.
        self.first_read_to: int | None = None
        self.best: RankStep | None = None  # the highest step over the ranks, first to reach it
        self._by_rank: dict[int, int] = {}
        # Each rank's steps as reported, (when, step), the latest last: what it trained after a
        # moment. Every report of the last minute (recent), thinned before it (older).
        self._recent: dict[int, deque[tuple[float, int]]] = {}
        self._older: dict[int, deque[tuple[float, int]]] = {}
        self._journaled: int | None = None
        self._journaled_at: float | None = None

    @property
    def by_rank(self) -> Mapping[int, int]:
        """Each rank's highest step: a copy taken at the call (one C-level dict
        copy), safe to read from any thread."""
        return MappingProxyType(self._by_rank.copy())

    def step_of(self, rank: int) -> int | None:
        """One rank's highest step (no copy of the others')."""
        return self._by_rank.get(rank)

    def since(self, rank: int, at: float) -> int | None:
        """The steps ``rank`` surely showed after time ``at``: its latest step less the lowest one
        reported at or after ``at`` (0 when that is the latest). A report read at ``at`` or later
        shows steps printed by then, so what came after it came after ``at``; a report from before
        ``at`` does not (the steps after it may have been trained before ``at``). None when no step
        of it was reported at or after ``at``: nothing says it trained after it."""
        recent = self._recent.get(rank)
        if not recent:
            return None
        older = self._older.get(rank)
        kept = recent if older is None else (*older, *recent)
        after = [step for seen_at, step in kept if seen_at >= at]
        if not after:
            return None
        return recent[-1][1] - min(after)

    def saw(self, steps: Sequence[RankStep]) -> RankStep | None:
        """Take a node's latest steps (at the cost of these, not of every rank's); returns the
        attempt's first step if these hold it: the first step its rank showed
        (:attr:`elastic.core.messages.RankStep.first_step`), with when it was read."""
        if not steps:
            return None
        for seen in steps:
            self._by_rank[seen.rank] = seen.step  # the node's word: it knows which source wins
            self._keep(seen.rank, seen.at, seen.step)
            if self.best is None or seen.step > self.best.step:
                self.best = seen
        if self.first is not None:
            return None
        first = min(steps, key=lambda s: (s.at, s.rank))
        self.first_read_to = first.step
        self.first = replace(first, step=_first_shown(first))
        self._journaled_at = self.first.at
        return self.first

    def first_taken_over(self, rank: int, step: int, *, at: float) -> None:
        """The attempt's first step (``rank``'s ``step``) was journaled by the driver this one took
        the attempt over from, ``at`` the takeover: no step reported here is its first."""
        self.first = RankStep(rank, step, "output", at)
        self._journaled_at = at

    def _keep(self, rank: int, at: float, step: int) -> None:
        """Keep one report of ``rank``: every one of the last minute, one every five seconds before."""
        recent = self._recent.get(rank)
        if recent is None:
            recent = self._recent[rank] = deque()
        recent.append((at, step))
        while len(recent) > STEP_HISTORY_FULL or recent[0][0] < at - STEP_HISTORY_FULL_S:
            aged = recent.popleft()
            older = self._older.get(rank)
            if older is None:
                older = self._older[rank] = deque(maxlen=STEP_HISTORY)
            if not older or aged[0] - older[-1][0] >= STEP_HISTORY_EVERY_S:
                older.append(aged)

    def reached_due(self, now: float, *, force: bool) -> RankStep | None:
        """The ``step_reached`` to journal now, if any: the step changed since the last one,
        and ``force`` (a drain starts, the attempt ends) or a minute has passed."""
        best = self.best
        if best is None or best.step == self._journaled:
            return None
        if not force and self._journaled_at is not None and now - self._journaled_at < STEP_REACHED_EVERY_S:
            return None
        self._journaled, self._journaled_at = best.step, now
        return best


def _first_shown(seen: RankStep) -> int:
    """The first step a rank's first report says it showed: the first of the lines its node
    read at once, not their highest (a report without it: its step)."""
    return seen.step if seen.first_step is None else seen.first_step


# Failures a healthy rank shows when a peer's machine vanishes mid-collective.
_PEER_FAILURE_KINDS = frozenset(
    {FailureKind.EXITED, FailureKind.CRASHED, FailureKind.KILLED, FailureKind.TERMINATED}
)

# Collateral failures of one attempt recorded one by one; the rest are counted per
# node and recorded once, when the drain ends (a 1,000-node group has 7,999).
COLLATERAL_LISTED = 16


@dataclass
class Attempt:
    """The current attempt as it goes: ranks seen, failures, root cause, exit-hang state."""

    number: int
    started_at: float
    launched_at: float | None = None
    drain_started_at: float | None = None
    ended_at: float | None = None
    world_size: int = 0
    succeeded_ranks: set[int] = field(default_factory=set)
    declared_done: set[int] = field(default_factory=set)  # ranks whose exit 0 came after heartbeat(done=True)
    exited_ranks: set[int] = field(default_factory=set)
    failures: list[Failure] = field(default_factory=list)
    resume_step: int | None = None
    checkpoint_step: int | None = None
    nodes: int = 0
    charged: BudgetName | None = None  # the budget this attempt's restart was charged to
    plan: dict[str, object] = field(default_factory=dict)  # as journaled in attempt_started
    generation: int = 0  # its world's generation (--spares): 0 when launched, +1 at each re-forming in place
    root_cause: Failure | None = None  # root_cause(failures), kept as failures come in
    restarted: bool = False  # its fate, sealed by the state when the next attempt opens
    collateral_listed: int = 0
    collateral_counted: dict[str, int] = field(default_factory=dict)  # node -> failures not listed
    # Ranks SIGKILLed when the drain's grace ran out: the first few as journaled, and how many.
    grace_kills: list[dict[str, object]] = field(default_factory=list)
    grace_kill_count: int = 0
    sign_of_life_at: float | None = None  # its first output or heartbeat, from any rank
    steps: AttemptSteps = field(default_factory=AttemptSteps)  # its training steps, as reported
    # Its root cause is a symptom: the ranks it likely waited for (elastic.core.diagnosis.causes).
    silence: Silence = field(default_factory=Silence)
    symptom_seen: bool = False  # a failure of it had a symptom's signature (its peers' are read too)
    stragglers: StragglerWatch = field(default_factory=StragglerWatch)  # its ranks' step times
    # Each rank's start-up phases, sent with its first step (elastic.core.training.startup), until journaled.
    startup: dict[int, tuple[tuple[str, float], ...]] = field(default_factory=dict)
    startup_journaled: bool = False

    # --exit-timeout: the first rank that exited 0 and when, and the deadline of the next
    # check; the ranks killed as hung at exit, those whose kill is not yet reported, those
    # judged to have finished (and why), and when the latest kill was decided.
    exit_timer_from: tuple[int, float] | None = None
    exit_check_at: float | None = None
    exit_hung: set[int] = field(default_factory=set)
    exit_hung_unheard: set[int] = field(default_factory=set)
    exit_hung_finished: dict[int, Finished] = field(default_factory=dict)
    exit_kill_at: float | None = None

    def add_failure(self, failure: Failure) -> None:
        """Append a failure and keep the root cause current without a scan."""
        self.failures.append(failure)
        self.symptom_seen = self.symptom_seen or is_symptom(failure)
        self.root_cause = root_cause((failure,) if self.root_cause is None else (self.root_cause, failure))

    def node_loss_explains(self, exit: WorkerExit, draining: Draining | None) -> bool:
        """Whether a node found lost while draining explains the failure that began the drain.

        A machine that vanishes is noticed late (Ray declares it dead only after
        its health checks fail), while its peers fail at once, when their
        collective breaks. Those peers' failures were the consequence.

        Never in a final drain (a stop, a backend fault): the revision would send a run
        the launcher was told to end to a relaunch, and after a backend fault the
        nodes reported lost are only ranks whose exits could no longer be heard.
        """
        return (
            exit.node_lost is not None
            and draining is not None
            and draining.reason is DrainReason.FAILURE
            and not draining.final
            and self.root_cause is not None
            and self.root_cause.kind in _PEER_FAILURE_KINDS
            and self.root_cause.node != exit.node
        )

    def revise_cause(self, lost: Failure) -> None:
        """Make ``lost`` the root cause: every failure so far becomes its consequence (collateral)."""
        self.failures = [
            f if f.kind is FailureKind.COLLATERAL else replace(f, kind=FailureKind.COLLATERAL)
            for f in self.failures
        ]
        self.root_cause = None
        self.add_failure(lost)

    def list_collateral(self, node: str) -> bool:
        """Whether the next collateral failure on ``node`` is listed; if not, it is counted."""
        if self.collateral_listed >= COLLATERAL_LISTED:
            self.collateral_counted[node] = self.collateral_counted.get(node, 0) + 1
            return False
        self.collateral_listed += 1
        return True

    def reads(self, exit: WorkerExit) -> bool:
        """Whether a collateral exit's words may be read for a cause found late: the ones it lists
        and the first ranks killed at the grace's end (a bounded few, whatever the world's size)."""
        if self.collateral_listed < COLLATERAL_LISTED:
            return True
        return exit.killed_at_grace is not None and self.grace_kill_count <= GRACE_KILLS_LISTED

    def note_grace_kill(self, exit: WorkerExit) -> None:
        """A rank that outlived the drain's grace; journaled with the drain's end."""
        assert exit.killed_at_grace is not None
        self.grace_kill_count += 1
        if len(self.grace_kills) < GRACE_KILLS_LISTED:
            self.grace_kills.append(exit.killed_at_grace.fields(exit.rank, exit.node))

    @property
    def collateral(self) -> int:
        """Every collateral failure of the attempt: listed (revised ones too) and counted."""
        listed = sum(1 for f in self.failures if f.kind is FailureKind.COLLATERAL)
        return listed + sum(self.collateral_counted.values())

    @property
    def alive(self) -> int:
        """Ranks that started and have not exited."""
        return max(0, self.world_size - len(self.exited_ranks))

    def waiting_after_exit_0(self) -> tuple[int, int | None, tuple[int, ...]] | None:
        """The ``--exit-timeout`` wait under way: the rank whose exit 0 began it, its last step
        seen (None: none), and the ranks still running; None when no wait is under way."""
        if self.exit_timer_from is None:
            return None
        peer = self.exit_timer_from[0]
        running = tuple(r for r in range(self.world_size) if r not in self.exited_ranks)
        return (peer, self.steps.step_of(peer), running) if running else None


def run_root_cause(attempts: Sequence[Attempt], outcome: Outcome) -> Failure | None:
    """The failure that ended the run: none for a success.

    A run that *failed* names the last failure there was, even from an attempt
    before the last: one that never launched (too few nodes came back after a
    node was lost) failed because of what ended the attempt before it. A run
    *stopped* from outside (a stop signal, a preemption notice) names only its last
    attempt's own failure: earlier ones were recovered from, and did not end it.
    """
    if outcome is Outcome.SUCCEEDED or not attempts:
        return None
    if outcome is Outcome.STOPPED:
        return attempts[-1].root_cause
    for attempt in reversed(attempts):
        if attempt.root_cause is not None:
            return attempt.root_cause
    return None


def failure_fields(failure: Failure, *, tail: bool = True) -> dict[str, object]:
    """A failure as journaled: enough for the fold to give it back whole
    (``log_tail`` and ``traceback``: journal only)."""
    fields: dict[str, object] = {
        "kind": failure.kind.value,
        "rank": failure.rank,
        "node": failure.node,
        "exit_code": failure.exit_code,
        "signal": failure.signal_name,
        "message": failure.message,
        "signal_number": failure.signal,
    }
    if tail and failure.log_tail:
        fields["log_tail"] = list(failure.log_tail)
    if tail and failure.traceback:
        fields["traceback"] = failure.traceback
    if failure.silent_s is not None:
        fields["silent_s"] = round(failure.silent_s, 3)
    if failure.diagnosis is not None:
        fields["diagnosis"] = failure.diagnosis.fields()
    if failure.step is not None:
        fields["step"] = failure.step
    return fields
