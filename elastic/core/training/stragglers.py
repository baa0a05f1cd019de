"""Stragglers: a rank whose steps take clearly longer than its peers'. Pure: no clock, no I/O.

Each node measures every rank's step time (:mod:`elastic.node.watchers.steps`): the
mean over the rank's last :data:`STRAGGLER_STEPS` steps, of the seconds the
script says the step took on the rank (``elastic.heartbeat(step=...,
compute_s=...)``, the time outside the collective) when it gives them, else of
the interval between its steps (read from its output or heartbeat). The node
sends it with the rank's step (:class:`elastic.core.messages.RankStep`) only
once the rank's steps have settled (:class:`WindowMean`: two consecutive blocks
of that many steps agree), so the steps right after a start or a restore
(compilation, lines that arrive in a burst ahead of or behind their work) are
never compared with a peer's steady ones. Here a rank is a *straggler* when its step time is at
least :data:`STRAGGLER_MARGIN` × the median of the other ranks' latest step
times, with at least two ranks timed. Each rank is reported once per attempt.

The lockstep caveat: in synchronous data parallel every rank waits for the
slowest in the collective, so every rank's step *interval* is the same and no
straggler shows in them; only ``compute_s`` shows one there. Intervals show
stragglers where ranks are not in lockstep (independent or asynchronous
workers, ranks that print before the collective, pipeline stages).
"""

from __future__ import annotations

import bisect
import enum
import itertools
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, overload

from elastic.core.labels import node_label
from elastic.core.messages import RankStep

__all__ = [
    "STRAGGLER_MARGIN", "STRAGGLER_STEPS", "OnStraggler", "SortedTimes", "Straggler", "StragglerDecision",
    "StragglerWatch", "WindowMean", "decide_straggler", "median_without", "shrinking_pays", "straggler_text",
]

# 1.25×: step times of healthy data-parallel ranks differ by a few per cent (data
# loading jitter, a noisy neighbour); a GPU that throttles, a slow NIC or a host
# busy with something else costs tens of per cent. A quarter over the median is
# clear of the jitter and still catches a rank that costs the job a fifth of its pace.
STRAGGLER_MARGIN = 1.25
# 16 steps: in the mean over 16 steps one step of twice the usual time (a garbage
# collection, a data-loader refill) weighs 6 per cent, far below the margin, and the
# window is short enough to name a slow rank within a minute at steps of a few
# seconds. A pause of five steps' time or more by one rank alone (a save only rank 0
# writes, where ranks are not in lockstep) can cross the margin: with compute_s,
# leave such work out of the seconds given.
STRAGGLER_STEPS = 16


class OnStraggler(enum.Enum):
    """What a straggler leads to (``--on-straggler``)."""

    WARN = "warn"  # journaled and reported; the attempt runs on
    RESTART = "restart"  # drain, and run the next attempt without its node (when that is faster)


@dataclass(frozen=True)
class Straggler:
    """A rank found slower than its peers: its step time, the others' median, and their ratio."""

    rank: int
    node: str
    step_time_s: float
    median_s: float
    ratio: float
    source: str  # "compute" (compute_s given) or "interval" (between its steps)
    step: int

    def fields(self) -> dict[str, object]:
        """As ``straggler_seen`` journals it (the decision adds ``action`` and ``reason``)."""
        return {
            "rank": self.rank, "node": self.node, "step": self.step,
            "step_time_s": round(self.step_time_s, 6), "median_s": round(self.median_s, 6),
            "ratio": round(self.ratio, 3), "source": self.source,
        }


def straggler_text(record: Mapping[str, Any]) -> str:
    """``rank 2 on 0f3a9c81d2e4: 0.31 s a step, 2.05x the others' median 0.15 s (interval); warned``."""
    get = record.get
    action = get("action", "warn")
    then = "node left out of the next attempt" if action == "restart" else "warned"
    why = get("reason")
    return (
        f"rank {get('rank', '?')} on {node_label(str(get('node', '?')))}: {_num(get('step_time_s'))} s a step, "
        f"{_num(get('ratio'))}x the others' median {_num(get('median_s'))} s ({get('source', '?')}); "
        f"{then}{f' ({why})' if why and action != 'restart' else ''}"
    )


def _num(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else "?"


class StragglerWatch:
    """One attempt's step times by rank, and the stragglers already reported.

    A report costs its own ranks, not the world's: each rank's step time is replaced in
    place in a sorted multiset (:class:`SortedTimes`), whose middle gives every rank's
    "median of the others" (:func:`median_without`) without sorting or copying the world.
    """

    def __init__(self, margin: float = STRAGGLER_MARGIN) -> None:
        self.margin = margin
        self._latest: dict[int, tuple[str, RankStep]] = {}  # rank: (node, its latest timed step)
        self._times: dict[int, float] = {}  # rank: its latest step time, as in _ordered
        self._ordered = SortedTimes()
        self._reported: set[int] = set()

    @property
    def step_times(self) -> Mapping[int, float]:
        """Each timed rank's latest step time in seconds: a copy taken at the call (one C-level
        dict copy), safe to read from any thread."""
        return MappingProxyType(self._times.copy())

    def saw(self, node: str, steps: Sequence[RankStep]) -> list[Straggler]:
        """Take a node's latest steps; the ranks of these found straggling now, each once per attempt.

        A node's report holds each of its ranks that stepped since its last one, so a rank
        is judged whenever it has stepped on. A report costs O(k log n) for its k ranks
        of the n timed ones, however many ranks the run has.
        """
        for seen in steps:
            if seen.step_time_s is not None and seen.step_time_s >= 0:
                previous = self._times.get(seen.rank)
                if previous is not None:
                    self._ordered.remove(previous)
                self._ordered.add(seen.step_time_s)
                self._times[seen.rank] = seen.step_time_s
                self._latest[seen.rank] = (node, seen)
        if len(self._times) < 2:
            return []
        found = []
        for rank in sorted({seen.rank for seen in steps}):
            if rank in self._reported or rank not in self._times:
                continue
            where, seen = self._latest[rank]
            step_time_s = self._times[rank]
            median_s = median_without(self._ordered, step_time_s)
            if median_s <= 0 or step_time_s < self.margin * median_s:
                continue
            self._reported.add(rank)
            found.append(
                Straggler(rank, where, step_time_s, median_s, step_time_s / median_s,
                          seen.time_source or "interval", seen.step)
            )
        return found


def median_without(ordered: Sequence[float], value: float) -> float:
    """The median of ``ordered`` (sorted, holding ``value``) with one ``value`` taken out.

    Reads at most four values next to the middle (``ordered`` may be a :class:`SortedTimes`).
    """
    count = len(ordered) - 1

    def at(index: int) -> float:  # the index-th of the values left: those below value keep their place
        below = ordered[index]
        return below if below < value else ordered[index + 1]

    middle = count // 2
    return at(middle) if count % 2 else (at(middle - 1) + at(middle)) / 2


class SortedTimes(Sequence[float]):
    """A sorted multiset of step times that takes a value in or out without copying the others.

    The values are kept in sorted buckets of at most ``2 * load`` (a bucketed sorted list):
    adding or removing one is a binary search over the buckets' maxima and a shift inside one
    bucket; reading by position bisects the buckets' starts, rebuilt (one pass over the buckets,
    not the values) at the first read after a change. At 16,000 ranks that is 8 to 16 buckets
    of 1,000 to 2,000: a report's few changes and the median's few reads cost microseconds.
    """

    def __init__(self, load: int = 1000) -> None:
        self._load = load
        self._buckets: list[list[float]] = []
        self._maxes: list[float] = []  # each bucket's largest value
        self._starts: list[int] | None = []  # each bucket's first position; None: to rebuild
        self._len = 0

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> float: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[float]: ...

    def __getitem__(self, index: int | slice) -> float | Sequence[float]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._len))]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(index)
        if self._starts is None:
            self._starts = list(itertools.accumulate((len(b) for b in self._buckets[:-1]), initial=0))
        bucket = bisect.bisect_right(self._starts, index) - 1
        return self._buckets[bucket][index - self._starts[bucket]]

    def add(self, value: float) -> None:
        self._len += 1
        self._starts = None
        if not self._buckets:
            self._buckets.append([value])
            self._maxes.append(value)
            return
        at = bisect.bisect_right(self._maxes, value)  # the first bucket with a larger value
        if at == len(self._maxes):
            at -= 1
            self._buckets[at].append(value)
            self._maxes[at] = value
        else:
            bisect.insort(self._buckets[at], value)
        bucket = self._buckets[at]
        if len(bucket) > 2 * self._load:
            half = len(bucket) // 2
            self._buckets[at:at + 1] = [bucket[:half], bucket[half:]]
            self._maxes[at:at + 1] = [bucket[half - 1], bucket[-1]]

    def remove(self, value: float) -> None:
        """Take one ``value`` out (it must be there)."""
        at = bisect.bisect_left(self._maxes, value)  # the first bucket that can hold it
        bucket = self._buckets[at] if at < len(self._buckets) else []
        index = bisect.bisect_left(bucket, value)
        if index == len(bucket) or bucket[index] != value:
            raise ValueError(f"{value} is not among the step times")
        del bucket[index]
        self._len -= 1
        self._starts = None
        if not bucket:
            del self._buckets[at], self._maxes[at]
        elif index == len(bucket):
            self._maxes[at] = bucket[-1]


@dataclass(frozen=True)
class StragglerDecision:
    """What a straggler leads to: ``warn`` or ``restart``, and why (journaled with it)."""

    action: OnStraggler
    reason: str


def decide_straggler(
    found: Straggler,
    *,
    on_straggler: OnStraggler,
    nodes: int,
    min_nodes: int,
    available_nodes: int | None,
    running: bool,
) -> StragglerDecision:
    """Restart without the straggler's node only when asked, while the attempt runs (not
    draining), and when that leaves the run faster (see :func:`shrinking_pays`): a usable
    node outside the attempt takes its place (``available_nodes``, the scale watch's latest
    count, more than the attempt's ``nodes``), or, with none, the nodes left still meet
    ``--nnodes`` MIN and outpace the whole world held back to the straggler's pace."""
    if on_straggler is OnStraggler.WARN:
        return StragglerDecision(OnStraggler.WARN, "--on-straggler warn")
    if not running:
        return StragglerDecision(OnStraggler.WARN, "the attempt is not running (still launching, or draining)")
    if available_nodes is not None and available_nodes > nodes:
        return StragglerDecision(
            OnStraggler.RESTART, f"a spare node: {available_nodes} usable, the attempt runs on {nodes}"
        )
    spares = "no other usable node known" if available_nodes is None else f"{available_nodes} usable"
    if nodes - 1 < min_nodes:
        return StragglerDecision(
            OnStraggler.WARN,
            f"no spare node: without node {node_label(found.node)} {nodes - 1} of {nodes} would be left, "
            f"--nnodes needs at least {min_nodes}, and {spares}",
        )
    left = f"without node {node_label(found.node)} the {nodes - 1} of {nodes} nodes left"
    paces = f"{(nodes - 1) / nodes:.2f} of the full pace, against {1 / found.ratio:.2f} for all held to the straggler's"
    if not shrinking_pays(found.ratio, nodes):
        return StragglerDecision(
            OnStraggler.WARN,
            f"no spare node ({spares}), and {left} would train slower: {paces} "
            f"(leaving it out pays over {nodes / (nodes - 1):.2f}x the median)",
        )
    return StragglerDecision(
        OnStraggler.RESTART, f"{left} (--nnodes needs at least {min_nodes}) train faster: {paces}"
    )


def shrinking_pays(ratio: float, nodes: int) -> bool:
    """Whether ``nodes - 1`` nodes train faster than ``nodes`` held to a straggler at ``ratio``.

    In synchronous training every rank waits for the slowest, so the world runs at
    ``1 / ratio`` of its pace; without the straggler's node (and no node in its place)
    it runs at ``(nodes - 1) / nodes``. Leaving the node out pays when ``ratio >
    nodes / (nodes - 1)``: over 2x on two nodes, 1.33x on four, 1.14x on eight. The
    restart's own cost (the relaunch and the steps since the checkpoint) is not weighed,
    and a ratio of ``compute_s`` leaves out the collective, which every rank spends alike,
    so it overstates the slowdown: the rule errs towards the restart the user asked for.
    """
    return nodes > 1 and ratio * (nodes - 1) > nodes


class WindowMean:
    """The mean per step over the last :data:`STRAGGLER_STEPS` steps, from running marks, once settled.

    Each mark is a count and a running total at that count: a step number and the time it
    was seen (the step interval), or the rank's ``compute_steps`` and ``compute_s`` totals
    from its heartbeat file. The mean is the total's change over the count's, from the
    latest mark back to the most recent mark at least ``steps`` steps before it.

    A rank's first steps of an attempt are not its steady pace: they carry compilation and
    a restore's warm caches, and their lines can arrive in a burst, ahead of their work (a
    host that queues steps before its device runs them) or behind it, with a silence while
    the work catches up. So the mean is given only once the marks have *settled*: two
    consecutive blocks of at least ``steps`` steps, from the first mark on, whose means agree
    within :data:`STRAGGLER_MARGIN`; from then on it slides over the last ``steps`` steps.
    A count that starts again (another source of counts) settles again.
    """

    def __init__(self, steps: int = STRAGGLER_STEPS) -> None:
        self.steps = steps
        self._marks: deque[tuple[int, float]] = deque()
        self._block: tuple[int, float] | None = None  # the mark the block being measured began at
        self._block_mean: float | None = None  # the mean of the block before it
        self._settled = False

    def add(self, count: int, total: float) -> None:
        if self._marks and count <= self._marks[-1][0]:
            if count < self._marks[-1][0]:
                self.clear()  # counted from the start again: a new source of counts
            else:
                return
        self._marks.append((count, total))
        while len(self._marks) >= 2 and count - self._marks[1][0] >= self.steps:
            self._marks.popleft()
        if not self._settled:
            self._settle(count, total)

    def _settle(self, count: int, total: float) -> None:
        if self._block is None:
            self._block = (count, total)
            return
        began_count, began = self._block
        if count - began_count < self.steps:
            return
        mean = max(0.0, total - began) / (count - began_count)
        before, self._block_mean, self._block = self._block_mean, mean, (count, total)
        self._settled = before is not None and _agree(before, mean)

    @property
    def settled(self) -> bool:
        """Two consecutive blocks of steps agreed: the mean is the steady pace."""
        return self._settled

    def clear(self) -> None:
        self._marks.clear()
        self._block, self._block_mean, self._settled = None, None, False

    def mean(self) -> float | None:
        """Seconds a step over the window; None until the steps have settled and span ``steps`` steps."""
        if not self._settled or len(self._marks) < 2:
            return None
        (first, began), (last, ended) = self._marks[0], self._marks[-1]
        if last - first < self.steps:
            return None
        return max(0.0, ended - began) / (last - first)


def _agree(one: float, other: float) -> bool:
    """Two blocks' means within :data:`STRAGGLER_MARGIN` of each other (both zero agree)."""
    low, high = min(one, other), max(one, other)
    return high <= STRAGGLER_MARGIN * low if low > 0 else high == 0
