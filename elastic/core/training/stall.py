"""Each rank's training steps and when one has stalled. Pure: it is told the times.

A rank's output shows *counters* (:mod:`elastic.core.training.output_steps`): its training
bar, an evaluation bar, a data loader's bar, step lines. The *training counter*
is the first counter read in the attempt; it stays the training counter for the
attempt. Only it gives the rank's step: a step counts when it is higher than
any the training counter showed before (a repeated line is no step), and only
that step goes to the driver (``step_reached``, the ledger, stragglers). The rank's
*first* step is the first training step it showed, not the highest of the lines read
with it: ``step 0`` to ``step 3`` arriving in one read make the step 3 and the first
step 0 (``first_step_seen``, the attempt's start-up). A bar
drawn empty (``0/80``) claims the training counter but shows no step: the
Hugging Face Trainer, resumed from step 20, draws its training bar at ``0/80``
before its first step, then at ``21/80``; that 0 is not the attempt's step. A
heartbeat step (``elastic.heartbeat(step=...)``) is exact and wins over the
output for good once seen. Least of all counts the Hugging Face Trainer's own
record (:mod:`elastic.core.training.trainer_state`: ``trainer_state.json`` at each save,
its log lines' epochs): the whole job's step, read where a rank shows none, and
the output's or the heartbeat's steps win over it for good once seen.

Any counter that *advances* (shows a number above the one it showed last; one
that falls back starts counting again from there) is a sign of life: an
evaluation over 200 batches at step 5 is neither step 200 nor silence.

A rank *stalls* when, having shown two steps, it shows no higher step and no
sign of life within its window: ``--stall-timeout SECONDS``, or with ``auto``
(the default) ``max(--stall-floor, STALL_K × p95 of its recent step times)``.
Output that goes on without an advancing counter (NCCL warnings, a retry loop)
is no progress. A checkpoint being written (``--checkpoint-dir`` changed within
the window) holds the window open: a rank that saves is not stalled, however
long the save.
A rank whose steps come from the Trainer's record is never called stalled: they
come a save or ``logging_steps`` apart, the job's pace rather than the rank's.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from elastic.core.training.output_steps import Reading

__all__ = ["RECENT_STEPS", "STALL_K", "STEP_SOURCES", "TRAINER", "ProgressPolicy", "RankProgress", "stall_reason"]

# A save or an evaluation pass that takes 10× a step must not trip the auto window:
# 20× the p95 step time leaves twice that, and the floor (1800 s by default) is
# above it for any step shorter than 90 s.
STALL_K = 20.0
# The step times the p95 is taken over: the last this many increases.
RECENT_STEPS = 32
DEFAULT_STALL_FLOOR_S = 1800.0
# Counters remembered per rank besides the training one (bars of many totals: the
# least recently read is forgotten first, and counts again from its next reading).
_COUNTERS = 64
# Where a rank's step comes from, least exact first: one takes over from those before it for good.
TRAINER = "trainer"  # the Hugging Face Trainer's trainer_state.json and log lines
STEP_SOURCES = (TRAINER, "output", "heartbeat")
_PRECEDENCE = {source: index for index, source in enumerate(STEP_SOURCES)}


@dataclass(frozen=True)
class ProgressPolicy:
    """How a node reads steps and calls a stall; frozen and picklable, it travels in each WorkerSpec.

    ``pattern``: the user's ``--progress-pattern`` (None: the built-in patterns);
    ``read_output`` False with ``--progress-pattern none`` (heartbeat steps only).
    ``stall_timeout_s``: a fixed window; with ``stall_auto`` the window is derived;
    neither: no stall is ever called (``--stall-timeout none``).
    """

    pattern: str | None = None
    read_output: bool = True
    stall_auto: bool = True
    stall_timeout_s: float | None = None
    stall_floor_s: float = DEFAULT_STALL_FLOOR_S
    checkpoint_dir: str | None = None

    @property
    def watches_stalls(self) -> bool:
        return self.stall_auto or self.stall_timeout_s is not None


class RankProgress:
    """One rank's training step (its highest, when it came, its recent step times) and
    when any of its counters last advanced."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.step_at: float | None = None
        self.source: str | None = None
        self.steps_seen = 0  # distinct increases, the first step included
        self.first_step: int | None = None  # the first step it showed, of whichever source
        self.training: str | None = None  # the output's training counter, once one was read
        self.alive_at: float | None = None  # when a counter last advanced
        self._last: dict[str, int] = {}  # each counter's last number, least recently read first
        self._times: deque[float] = deque(maxlen=RECENT_STEPS)

    def read(self, readings: Iterable[Reading], at: float) -> bool:
        """Record what one look at the rank's output read, in order, at ``at``.

        True when the training step advanced (by the highest training number read; an empty
        bar's is none). The first training number read is the rank's :attr:`first_step`
        when it has shown none before.
        """
        best: int | None = None
        first: int | None = None
        last = self._last
        for counter, number, empty in readings:
            before = last.pop(counter, None)
            last[counter] = number
            if before is not None and number > before:
                self.alive_at = at
            if self.training is None:
                self.training = counter
            if counter == self.training and not empty:
                first = number if first is None else first
                best = number if best is None or number > best else best
        while len(last) > _COUNTERS:
            del last[next(iter(last))]
        return best is not None and self.saw(best, at, "output", first=first)

    def saw(self, step: int, at: float, source: str, *, first: int | None = None) -> bool:
        """Record a step read at ``at`` from ``source`` (one of :data:`STEP_SOURCES`);
        ``first``: the first of the steps read with it, of which ``step`` is the highest.

        True when it is progress: higher than any before. Once a rank has reported
        a step by heartbeat, its output's steps no longer count (the heartbeat is exact);
        once its output showed one, the Trainer's record no longer counts.
        Progress is a sign of life too. The rank's first progress sets its
        :attr:`first_step`: ``first`` where given, else ``step``.
        """
        if self.source is not None and _PRECEDENCE[source] < _PRECEDENCE[self.source]:
            return False
        if self.step is None:  # its first step, from any source
            self.first_step = step if first is None else first
        if self.source is not None and _PRECEDENCE[source] > _PRECEDENCE[self.source]:
            self.step, self.step_at, self.source = step, at, source  # the precise count takes over
            self._times.clear()
            self.steps_seen = 1
            self.alive_at = at
            return True
        if self.step is not None and step <= self.step:
            return False
        if self.step is not None and self.step_at is not None:
            self._times.append(max(0.0, at - self.step_at) / (step - self.step))
        self.step, self.step_at, self.source = step, at, source
        self.steps_seen += 1
        self.alive_at = at
        return True

    def p95_s(self) -> float | None:
        """The 95th percentile of the recent step times (nearest rank), or None before two steps."""
        if not self._times:
            return None
        ordered = sorted(self._times)
        return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]

    def window_s(self, policy: ProgressPolicy) -> float | None:
        """How long without a higher step or a sign of life is a stall; None while no stall can be called."""
        if self.steps_seen < 2 or not policy.watches_stalls or self.source == TRAINER:
            return None
        if policy.stall_timeout_s is not None:
            return policy.stall_timeout_s
        p95 = self.p95_s()
        return max(policy.stall_floor_s, STALL_K * (p95 or 0.0))

    def stalled_for(self, now: float, policy: ProgressPolicy, saved_at: float | None = None) -> float | None:
        """Seconds without a new step if the rank is stalled at ``now``, else None.

        A sign of life since the last step (another counter advanced) restarts the window
        from it; so does a save: ``saved_at``, when the checkpoint directory last changed
        (None: unknown).
        """
        window = self.window_s(policy)
        if window is None or self.step_at is None:
            return None
        since = max(self.step_at, *(t for t in (self.alive_at, saved_at) if t is not None))
        if now - since <= window:
            return None
        return now - self.step_at


def stall_reason(silent_s: float, step: int | None, window_s: float, policy: ProgressPolicy) -> str:
    """``stalled: no new step for 42 s (last step 120); --stall-timeout auto allows 30 s``."""
    how = "auto" if policy.stall_timeout_s is None else f"{policy.stall_timeout_s:g}"
    return (
        f"stalled: no new step for {silent_s:.0f} s (last step {step}); "
        f"--stall-timeout {how} allows {window_s:.3g} s"
    )
