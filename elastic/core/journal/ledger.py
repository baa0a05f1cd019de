"""The goodput ledger: where a run's wall time went, in seconds by cause, per attempt and for the run. Pure.

Built from the journal's fold (:mod:`elastic.core.journal.fold`): the phases of every attempt
(pending, backoff, launching, running, draining) and the training steps the journal
placed in time (``first_step_seen``, ``step_reached``, read from the ranks' output or
heartbeats, so no code in the training script is needed). Each second of the run goes
to exactly one cause, so the causes add up to the run's wall time:

- ``waiting_for_nodes``: pending before an attempt, outside the backoff (acquiring
  nodes, ports, the checkpoint scan);
- ``backoff``: the wait the restart policy chose;
- ``launch``: the attempt planned until its ranks all run;
- ``startup``: the ranks running until the attempt's first training step (imports,
  initialisation, compilation, the checkpoint load). The first step the journal placed
  may be a later one (output is read in batches): the steps before it, from the
  resumed checkpoint's step, are dated back at the attempt's own step rate. An
  attempt that never showed a step, in a run where other attempts did, was starting up
  until its first sign of life (output or a heartbeat) and ran with no step
  information after it (``running_no_steps``): output with no step in it is not
  start-up;
- ``productive``: training from the first step to where it stopped progressing, less
  the redone steps and the checkpoint saves. Where the step records say when their step was
  seen (``seen_s_ago``: a drain's record is written later), training ends at the last step
  seen, and the first step's own time is training too; after the last step, until progress
  stopped, is ``exit_wait`` when the attempt ended well (a last save, the ranks' way out)
  and ``detection`` when it failed (a step cut short);
- ``checkpoint``: checkpoint saves while the attempt trained, as the drains' records list them
  (``checkpoint_saves_s_ago``: those :func:`elastic.worker.atomic_checkpoint` committed, which
  leaves when each began and was committed); a script that saves its own way has them in
  ``productive``;
- ``slow_steps``: training beyond the run's typical step time: an attempt whose own pace
  (seconds per step between its first and last placed steps, its saves left out) is slower
  than the median of the step intervals the journal placed over the run (:func:`typical_step_s`)
  has that share of its new training here; a pause of the machine, a straggler slowing every
  rank, a smaller world after a node was lost. The goodput truth of a benchmark prices steps
  the same way (unique steps × the median step);
- ``redone``: steps the attempt trained again, from the checkpoint step it resumed
  from up to the highest step an earlier attempt had reached, at its own step rate (its
  saves left out);
- ``detection``: from the last sign of progress to the drain: for a hang, the silence
  its record carries (``silent_s``, measured by the node's watch; in journals written
  before that field, the silence its message states, ``no heartbeat for 42.0s``); for an
  exit-hang, from the exit timer's start; for an exit, almost nothing, unless it came later than
  the attempt's last placed step plus the longest gap between two of its placed steps (a peer's
  collective timing out after a hang no watch caught): then from there;
- ``exit_wait``: after a rank's exit 0 (the ``--exit-timeout`` timer's start), or the
  last step a rank still running was placed at after it, until progress stopped: the
  ranks still running showed no step, the launcher was waiting for them to exit (a peer that left early, a rank hung
  silently at exit until a stop, work after training). A rank found hung at exit
  turns the rest into ``detection``;
- ``drain``: the drain's start until every rank was reaped;
- ``running_no_steps``: running time of a run that showed no step at all (no step
  output, no ``heartbeat(step=...)``), and of an attempt that showed none after its
  first sign of life: what it was doing is not known;
- ``other``: what is left: the launcher's own moments between records (its start: from its
  process's start, when ``run_started`` says it, the report, a dead driver's downtime before a
  resume).

The ``startup`` of an attempt stays one cause; :func:`startup_breakdown` says where it went,
by phase (spawn, imports, distributed init, cache load, restore, first step: the median over
the attempt's ranks, and its slowest rank), from its ``startup_profiled`` record, as its
nodes measured it on their own clocks (:mod:`elastic.core.training.startup`).

The run's ``productive`` over its wall time is its one productive figure: the summary's,
``elastic status``'s, the report's and the ``elastic_goodput_ratio`` metric's. An attempt's
``progress`` in ``report.json`` (:func:`elastic.core.journal.folded.productive`: it left a
newer checkpoint) is another question, about whole attempts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from elastic.core.failures import FailureKind
from elastic.core.journal.fold import RunFold
from elastic.core.journal.folded import FailureMark, FoldedAttempt, Span, goodput
from elastic.core.training.startup import PHASES, StartupBreakdown

__all__ = [
    "BADPUT_CAUSES",
    "CAUSES",
    "CAUSE_WORDS",
    "Ledger",
    "RunLedger",
    "attempt_ledger",
    "run_ledger",
    "startup_breakdown",
    "stated_silence_s",
    "typical_step_s",
]

CAUSES = (
    "productive",
    "slow_steps",
    "redone",
    "checkpoint",
    "startup",
    "running_no_steps",
    "launch",
    "detection",
    "exit_wait",
    "drain",
    "backoff",
    "waiting_for_nodes",
    "other",
)
BADPUT_CAUSES = tuple(c for c in CAUSES if c != "productive")

CAUSE_WORDS = {
    "productive": "productive training",
    "slow_steps": "slow steps",
    "redone": "redone steps",
    "checkpoint": "checkpoint saves",
    "startup": "start-up to the first step",
    "running_no_steps": "running (no step information)",
    "launch": "launch",
    "detection": "detection",
    "exit_wait": "waiting for ranks to exit",
    "drain": "drain",
    "backoff": "backoff",
    "waiting_for_nodes": "waiting for nodes",
    "other": "other (launcher)",
}

_PHASE_CAUSES = {"pending": "waiting_for_nodes", "backoff": "backoff", "launching": "launch", "draining": "drain"}

# "no heartbeat for 42.0s (--heartbeat-timeout 30s)", "no new step for 1800 s"
_SILENT_FOR = re.compile(r"\bfor ([0-9]+(?:\.[0-9]+)?) ?s\b")
# "no first output within --startup-timeout 300s": silent since the ranks began running
_SILENT_SINCE_START = re.compile(r"within --startup-timeout")


@dataclass(frozen=True)
class Ledger:
    """Seconds by cause (every cause of :data:`CAUSES`, zeros included)."""

    seconds: Mapping[str, float]

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())

    @property
    def badput_s(self) -> float:
        return sum(v for c, v in self.seconds.items() if c != "productive")

    def to_dict(self, digits: int = 6) -> dict[str, float]:
        """Each cause's seconds to ``digits``, adding up to the total to ``digits``: what rounding
        each part left over (a few units of the last digit, with a dozen causes) goes to the largest."""
        rounded = {cause: round(self.seconds.get(cause, 0.0), digits) for cause in CAUSES}
        left_over = round(round(self.total_s, digits) - sum(rounded.values()), digits)
        if left_over:
            largest = max(rounded, key=lambda cause: rounded[cause])
            rounded[largest] = round(rounded[largest] + left_over, digits)
        return rounded

    def largest(self, count: int = 4) -> list[tuple[str, float]]:
        """The causes with the most seconds, largest first, leaving out zeros."""
        shown = sorted(((c, s) for c, s in self.seconds.items() if s > 0), key=lambda cs: -cs[1])
        return shown[:count]

    def describe(self) -> str:
        """``productive training 12.3s (61%), backoff 2.0s (10%), ...``."""
        total = self.total_s
        parts = [
            f"{CAUSE_WORDS[c]} {s:.1f}s ({s / total:.0%})" if total > 0 else f"{CAUSE_WORDS[c]} {s:.1f}s"
            for c, s in sorted(self.seconds.items(), key=lambda cs: -cs[1])
            if s > 0
        ]
        return ", ".join(parts) or "nothing yet"


@dataclass(frozen=True)
class RunLedger:
    """The run's ledger, each attempt's, and the wall time they add up to."""

    run: Ledger
    attempts: tuple[tuple[int, Ledger], ...]
    wall_s: float
    has_steps: bool  # the journal placed at least one training step

    def of(self, attempt: int) -> Ledger | None:
        return dict(self.attempts).get(attempt)

    @property
    def productive_share(self) -> float | None:
        """Productive training over the wall time: the one figure the summary, ``elastic status``,
        the report and the metrics show; None when no attempt showed a step (it is not known)."""
        return goodput(self.run.seconds.get("productive", 0.0), self.wall_s) if self.has_steps else None


def _sum(ledgers: Iterable[Mapping[str, float]]) -> dict[str, float]:
    total = dict.fromkeys(CAUSES, 0.0)
    for ledger in ledgers:
        for cause, seconds in ledger.items():
            total[cause] += seconds
    return total


def stated_silence_s(message: str | None) -> float | None:
    """The silence a hang's message states (``no heartbeat for 42.0s``), in seconds; None if none.

    Only for records written before hangs carried ``silent_s`` (their journals still read).
    """
    if not message:
        return None
    match = _SILENT_FOR.search(message)
    return float(match.group(1)) if match else None


def _clamp(value: float, low: float, high: float) -> float:
    return max(low, min(high, value))


def _stopped_progressing_s(attempt: FoldedAttempt, running: Sequence[Span]) -> float:
    """When the attempt stopped making progress (seconds since the run started)."""
    end = running[-1].end_s
    cause = attempt.root_cause
    if cause is None:
        exit_hung = _exit_hang_stopped_s(attempt)  # exit-hung ranks, killed, run succeeded
        return end if exit_hung is None else _clamp(exit_hung, running[0].start_s, end)
    if cause.kind is FailureKind.HUNG:
        return _clamp(cause.at_s - (_silence_s(cause) or 0.0), running[0].start_s, end)
    if cause.kind is FailureKind.EXIT_HUNG:
        exit_hung = _exit_hang_stopped_s(attempt)
        if exit_hung is not None:
            return _clamp(exit_hung, running[0].start_s, end)
    return _clamp(min(cause.at_s, _silent_after_steps_s(attempt)), running[0].start_s, end)


def _silent_after_steps_s(attempt: FoldedAttempt) -> float:
    """When an attempt's steps stopped coming: its last placed step plus the longest gap between
    two of its placed steps (the pace its steps were read at); infinity with fewer than two.

    A failure that comes later than that (a peer's collective timing out minutes after a rank
    hung, with no hang watch to call it) followed a silence: detection, not training."""
    times = sorted(at for at, _ in attempt.step_marks)
    if len(times) < 2:
        return math.inf
    return times[-1] + max(b - a for a, b in zip(times, times[1:]))


def _exit_hang_stopped_s(attempt: FoldedAttempt) -> float | None:
    """When ranks killed as hung at exit stopped working: a peer's exit 0, or later for a rank
    left running while it still showed signs of life (killed once silent for ``--exit-timeout``,
    so its work ended that long before the kill). None when no rank was killed as exit-hung
    (ranks ended by a stop after a peer's exit 0 are collateral, not hung)."""
    kills = [f.at_s for f in attempt.failures if f.kind is FailureKind.EXIT_HUNG]
    if attempt.exit_timer_s is None or not kills:
        return None
    timeout_s = (attempt.exit_timer or {}).get("exit_timeout_s")
    if not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool):
        return attempt.exit_timer_s
    return max(attempt.exit_timer_s, min(kills) - float(timeout_s))


def _exit_wait_s(attempt: FoldedAttempt, stopped_s: float) -> float:
    """Seconds the launcher waited for ranks to exit: from the first exit 0 (or the last step a
    rank still running was placed at after it: it trained on) to where progress stopped."""
    if attempt.exit_timer_s is None:
        return 0.0
    since = max(attempt.exit_timer_s, attempt.stepped_after_exit_0_s or attempt.exit_timer_s)
    return max(0.0, stopped_s - since)


def _silence_s(cause: FailureMark) -> float | None:
    """How long a hung rank had been silent when it was found: the field, or an older record's words."""
    if cause.silent_s is not None:
        return cause.silent_s
    if cause.message and _SILENT_SINCE_START.search(cause.message):
        return math.inf  # silent since its start: detection is all its running time
    return stated_silence_s(cause.message)


def _seconds_per_step(
    marks: Sequence[tuple[float, int]], until_s: float, saves: Sequence[tuple[float, float]] = ()
) -> float | None:
    """The attempt's own step time: from its first placed step to its highest, the latter's
    time taken no later than where progress stopped, less the checkpoint saves between them."""
    if not marks:
        return None
    first_at, first_step = marks[0]
    last_step = max(step for _, step in marks)
    last_at = min(max(at for at, step in marks if step == last_step), until_s)
    if last_step <= first_step or last_at <= first_at:
        return None
    return max(0.0, last_at - first_at - _saving_s(saves, first_at, last_at)) / (last_step - first_step)


def _start_step(
    attempt: FoldedAttempt, first: tuple[float, int], per_step: float | None, since_running_s: float, *, seen: bool
) -> tuple[int, float]:
    """The step the attempt started from, and how long before its first placed step it trained.

    The first step the journal placed can be a later one than the attempt's first (output
    is read in batches): the steps between where it started (the resumed checkpoint's,
    else 0) and that one are dated back at the attempt's step rate, unless that reaches
    back before its ranks ran (a script that resumes on its own, from a step the launcher
    does not know: then it started just before its first placed step). Steps placed when they
    were seen (``seen``) date the first placed step's own time back too: it was training.
    """
    known = attempt.resume_step
    base = known if known is not None else 0
    unseen = (first[1] - base - (0 if seen else 1)) * per_step if per_step is not None else 0.0
    if 0.0 < unseen <= since_running_s:
        return base, unseen
    return (known if known is not None else first[1] - 1), 0.0


def _saving_s(saves: Sequence[tuple[float, float]], start_s: float, end_s: float) -> float:
    """Seconds of checkpoint saves between ``start_s`` and ``end_s`` (saves do not overlap: one saver)."""
    return sum(max(0.0, min(end, end_s) - max(began, start_s)) for began, end in saves)


def attempt_ledger(
    attempt: FoldedAttempt,
    *,
    reached_before: int | None,
    run_has_steps: bool,
    saves: Sequence[tuple[float, float]] = (),
    step_s: float | None = None,
) -> dict[str, float]:
    """One attempt's seconds by cause, from its spans (closed: :meth:`RunFold.closed`).

    ``reached_before``: the highest step any earlier attempt reached (None: none placed);
    ``saves``: the run's checkpoint saves, (began, committed) (:attr:`RunFold.checkpoint_saves`);
    ``step_s``: the run's typical step time (:func:`typical_step_s`; None: not known, no step is slow).
    """
    seconds = dict.fromkeys(CAUSES, 0.0)
    running = [s for s in attempt.spans if s.phase == "running"]
    for span in attempt.spans:
        if span.phase != "running":
            seconds[_PHASE_CAUSES.get(span.phase, "other")] += span.end_s - span.start_s
    if not running:
        return seconds
    running_s = sum(s.end_s - s.start_s for s in running)
    stopped_s = _stopped_progressing_s(attempt, running)
    detection = _clamp(running[-1].end_s - stopped_s, 0.0, running_s)
    seconds["detection"] = detection
    left = running_s - detection
    marks = sorted(attempt.step_marks)
    waited = _exit_wait_s(attempt, stopped_s)
    if not marks:
        life_s = attempt.sign_of_life_s  # its first output or heartbeat: no longer starting up
        if run_has_steps:
            seconds["startup"] = left if life_s is None else _clamp(life_s - running[0].start_s, 0.0, left)
        seconds["exit_wait"] = _clamp(waited, 0.0, left - seconds["startup"])
        seconds["running_no_steps"] = left - seconds["startup"] - seconds["exit_wait"]
        return seconds
    first_s = marks[0][0] if attempt.first_step_s is None else min(attempt.first_step_s, marks[0][0])
    seen = attempt.steps_placed_when_seen
    per_step = _seconds_per_step(marks, stopped_s, saves)
    base, unseen_s = _start_step(attempt, marks[0], per_step, first_s - running[0].start_s, seen=seen)
    startup = _clamp(first_s - unseen_s - running[0].start_s, 0.0, left)
    seconds["startup"] = startup
    # Steps placed when seen: after the last one, until progress stopped, no step was trained (a
    # step cut short, a last checkpoint, the ranks' way out): a wait for the exit, or detection.
    tail = max(0.0, stopped_s - max(at for at, _ in marks)) if seen else 0.0
    ended_well = attempt.root_cause is None
    seconds["exit_wait"] = _clamp(max(waited, tail) if ended_well else waited, 0.0, left - startup)
    late = 0.0 if ended_well else _clamp(tail - waited, 0.0, left - startup - seconds["exit_wait"])
    seconds["detection"] += late
    training = left - startup - seconds["exit_wait"] - late
    trained_from = running[0].start_s + startup  # training went on from here for ``training`` seconds
    saving = _clamp(_saving_s(saves, trained_from, trained_from + training), 0.0, training)
    seconds["checkpoint"] = saving
    training -= saving
    reached = max(step for _, step in marks)
    redone = 0.0
    if reached_before is not None:
        redo_steps = max(0, min(reached_before, reached) - base)
        if per_step is not None:
            redone = _clamp(redo_steps * per_step, 0.0, training)
        elif redo_steps > 0:  # one step placed, and it was an old one: all of it was redone
            redone = training
    seconds["redone"] = redone
    productive = training - redone
    if step_s is not None and per_step is not None and per_step > step_s:
        # Its pace over the run's typical: the steps it trained anew, at the typical time, are productive.
        seconds["slow_steps"] = productive * (1.0 - step_s / per_step)
        productive -= seconds["slow_steps"]
    seconds["productive"] = productive
    return seconds


def typical_step_s(attempts: Iterable[FoldedAttempt], saves: Sequence[tuple[float, float]] = ()) -> float | None:
    """The run's typical step time: the median step of its attempts' step intervals (two
    consecutive placed steps, apart in time; the checkpoint saves between them left out), each
    interval's steps at its own pace; None with no interval. The journal places a step at most
    once a minute and at every drain, so this is the pace of most of the run's steps, which a
    pause or a slow attempt does not move."""
    paces: list[tuple[float, int]] = []  # (seconds per step, steps)
    for attempt in attempts:
        marks = sorted(attempt.step_marks)
        for (began, low), (ended, high) in zip(marks, marks[1:]):
            if high > low and ended > began:  # steps read in one batch share a time: no pace
                paces.append((max(0.0, ended - began - _saving_s(saves, began, ended)) / (high - low), high - low))
    if not paces:
        return None
    paces.sort()
    half, counted = sum(steps for _, steps in paces) / 2.0, 0
    for pace, steps in paces:
        counted += steps
        if counted >= half:
            return pace
    return paces[-1][0]


def run_ledger(run: RunFold, until_s: float | None = None) -> RunLedger:
    """The ledger of every attempt and of the run, from its start to the last record (or ``until_s``,
    the run's end as the report has it, or now for a live run)."""
    end = run.now_s if until_s is None else max(until_s, run.now_s)
    attempts = run.closed(end)
    has_steps = any(a.step_marks for a in attempts)
    step_s = typical_step_s(attempts, run.checkpoint_saves)
    rows: list[tuple[int, Ledger]] = []
    reached: int | None = None
    for attempt in attempts:
        seconds = attempt_ledger(attempt, reached_before=reached, run_has_steps=has_steps, saves=run.checkpoint_saves,
                                 step_s=step_s)
        rows.append((attempt.number, Ledger(seconds)))
        steps = [step for _, step in attempt.step_marks]
        if steps:
            reached = max(steps) if reached is None else max(reached, *steps)
    total = _sum(ledger.seconds for _, ledger in rows)
    total["other"] += max(0.0, end - sum(total.values()))
    return RunLedger(Ledger(total), tuple(rows), end, has_steps)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def startup_breakdown(attempt: FoldedAttempt) -> StartupBreakdown | None:
    """Where the attempt's start-up went, by phase, from its ``startup_profiled`` record; None
    when it has none (no rank showed a step, ``--rank-bootstrap off``, a journal before it)."""
    record = attempt.startup_profiled
    phases = record.get("phases") if record is not None else None
    if not isinstance(phases, Mapping):
        return None
    known = {name: _number(phases.get(name)) for name in PHASES}
    measured = {name: max(0.0, seconds) for name, seconds in known.items() if seconds is not None}
    if not measured:
        return None
    assert record is not None
    ranks, slowest, slowest_s = record.get("ranks"), record.get("slowest_rank"), _number(record.get("slowest_s"))
    return StartupBreakdown(
        measured,
        ranks if isinstance(ranks, int) and not isinstance(ranks, bool) else 0,
        slowest if isinstance(slowest, int) and not isinstance(slowest, bool) else -1,
        slowest_s if slowest_s is not None else sum(measured.values()),
    )
