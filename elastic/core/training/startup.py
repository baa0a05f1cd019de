"""Where a rank's start-up went: its marks read as phases, and an attempt's phases over its ranks. Pure.

The rank bootstrap marks a rank's start-up in its ``ELASTIC_STARTUP_FILE``
(``elastic/worker/bootstrap/startup_marks.py``); its node reads the file when it
sees the rank's first training step and turns the marks, with the moment it asked
its spawner for the process, into :data:`PHASES` (:func:`rank_phases`), all on
that node's wall clock. The phases of a rank are consecutive and add up to the
time from the spawn request to its first step as the node read it:

- ``spawn``: the spawn request to the bootstrap running in the rank's interpreter
  (a warm one, ``--prewarm``: to its being handed the rank);
- ``imports``: from there to the distributed initialisation (to the first step when
  there was none), less a restore or cache reads that fell in it;
- ``distributed_init``: ``jax.distributed.initialize`` or ``init_process_group``;
- ``cache_load``: reading compiled programs from JAX's persistent compilation cache;
- ``restore``: the first checkpoint restore (Orbax's, torch's ``dcp.load``);
- ``first_step``: the rest, up to the first training step (compiling, the first step itself).

A phase not measured (no initialisation, no restore seen) is left out, not zero.
:func:`breakdown` gives an attempt's median of each phase over its ranks and its
slowest rank.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FILE_TIME_TICK_S",
    "PHASES",
    "PHASE_WORDS",
    "RankImports",
    "StartupBreakdown",
    "breakdown",
    "rank_phases",
    "read_imports",
    "read_marks",
]

PHASES = ("spawn", "imports", "distributed_init", "cache_load", "restore", "first_step")
PHASE_WORDS = {
    "spawn": "spawn",
    "imports": "imports",
    "distributed_init": "distributed init",
    "cache_load": "cache load",
    "restore": "restore",
    "first_step": "first step",
}


def _first_process_lines(text: str) -> Iterator[tuple[str, float, dict[str, Any]]]:
    """``(mark, wall time, the whole line)`` of each line a startup file's first process wrote (a
    child of the rank inherits the file); a line being written, or not a mark, is left out."""
    pid = None
    for line in text.splitlines():
        try:
            entry = json.loads(line)
            name, at, owner = entry["mark"], float(entry["time"]), entry.get("pid")
        except (ValueError, KeyError, TypeError):
            continue
        if pid is None:
            pid = owner
        if owner == pid and isinstance(name, str):
            yield name, at, entry


def read_marks(text: str) -> dict[str, float]:
    """The marks of a startup file, ``name -> wall time``, of its first process only; the first
    of each, but the last ``cache_load`` total (seconds)."""
    marks: dict[str, float] = {}
    for name, at, entry in _first_process_lines(text):
        if name == "cache_load":
            seconds = entry.get("seconds")
            if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
                marks[name] = float(seconds)
        elif name not in marks:
            marks[name] = at
    return marks


@dataclass(frozen=True)
class RankImports:
    """What a rank had imported from its installed packages at a point of its start-up (its
    ``imports`` mark), and its resident memory then: what a warm successor would hold."""

    modules: tuple[str, ...]
    resident_kb: int


def read_imports(text: str, *, before: float) -> RankImports | None:
    """The last ``imports`` record of a startup file's first process written at or before
    ``before`` (wall clock: the rank's first step), or None."""
    found = None
    for name, at, entry in _first_process_lines(text):
        if name != "imports" or at > before:
            continue
        modules, resident_kb = entry.get("modules"), entry.get("resident_kb", 0)
        if isinstance(modules, list) and all(isinstance(m, str) for m in modules) and isinstance(resident_kb, int):
            found = RankImports(tuple(modules), resident_kb)
    return found


def _overlap(begin: float, end: float, low: float, high: float) -> float:
    return max(0.0, min(end, high) - max(begin, low))


# A first step placed by its log's modification time reads the kernel's coarse clock, up to a tick
# (1 ms at HZ=1000, 10 ms at HZ=100) behind the ``time.time()`` of the marks the rank wrote just before.
FILE_TIME_TICK_S = 0.01


def rank_phases(marks: Mapping[str, float], *, spawned_at: float | None, first_step_at: float) -> dict[str, float]:
    """A rank's start-up in :data:`PHASES` (seconds, each at least 0), from its marks
    (:func:`read_marks`), its spawn request and its first step, all on one wall clock.
    Empty when the rank's interpreter left no mark (``--rank-bootstrap off``). An ``init_end``
    within :data:`FILE_TIME_TICK_S` after the first step came before it."""
    started = marks.get("interpreter")
    if started is None:
        return {}
    phases: dict[str, float] = {}
    if spawned_at is not None:
        phases["spawn"] = max(0.0, started - spawned_at)
    end = max(started, first_step_at)
    init_begin, init_end = marks.get("init_begin"), marks.get("init_end")
    if init_end is not None and end < init_end <= end + FILE_TIME_TICK_S:
        end = init_end  # the step printed right after the init, its log's time a tick behind the mark
    if init_begin is not None and init_end is not None and started <= init_begin <= init_end <= end:
        imports = (started, init_begin)
        after = (init_end, end)
        phases["distributed_init"] = init_end - init_begin
    else:
        imports, after = (started, end), None
    import_s = imports[1] - imports[0]
    after_s = 0.0 if after is None else after[1] - after[0]
    restore_begin, restore_end = marks.get("restore_begin"), marks.get("restore_end")
    if restore_begin is not None and restore_end is not None and restore_begin <= restore_end:
        in_imports = _overlap(restore_begin, restore_end, *imports)
        in_after = 0.0 if after is None else _overlap(restore_begin, restore_end, *after)
        if restore_begin < end:  # a restore after the first step is no part of the start-up
            phases["restore"] = in_imports + in_after
            import_s -= in_imports
            after_s -= in_after
    cache = marks.get("cache_load")
    if cache is not None:
        # Compiles come after the initialisation as a rule; what does not fit there came before it.
        from_after = min(cache, after_s) if after is not None else 0.0
        from_imports = min(cache - from_after, import_s)
        phases["cache_load"] = from_after + from_imports
        after_s -= from_after
        import_s -= from_imports
    phases["imports"] = import_s
    if after is not None:
        phases["first_step"] = after_s
    return {name: phases[name] for name in PHASES if name in phases}


@dataclass(frozen=True)
class StartupBreakdown:
    """An attempt's start-up: the median of each phase over the ranks that measured it, and the
    slowest rank (the longest start-up) with its seconds."""

    phases: Mapping[str, float]
    ranks: int  # the ranks whose phases are known
    slowest_rank: int
    slowest_s: float

    @property
    def total_s(self) -> float:
        return sum(self.phases.values())

    def to_dict(self, digits: int = 6) -> dict[str, object]:
        return {
            "phases": {name: round(seconds, digits) for name, seconds in self.phases.items()},
            "ranks": self.ranks,
            "slowest_rank": self.slowest_rank,
            "slowest_s": round(self.slowest_s, digits),
        }

    def describe(self) -> str:
        """``spawn 0.05s, imports 2.1s, distributed init 0.4s, ...``: the phases measured, in order."""
        return ", ".join(f"{PHASE_WORDS[name]} {_seconds(s)}" for name, s in self.phases.items())


def _seconds(value: float) -> str:
    return f"{value:.2f}s" if value < 1.0 else f"{value:.1f}s"


def breakdown(by_rank: Iterable[tuple[int, Mapping[str, float]]]) -> StartupBreakdown | None:
    """The median of each phase over the ranks, and the slowest rank; None when no rank has phases."""
    ranks = [(rank, phases) for rank, phases in by_rank if phases]
    if not ranks:
        return None
    medians = {}
    for name in PHASES:
        values = [float(phases[name]) for _, phases in ranks if name in phases]
        if values:
            medians[name] = statistics.median(values)
    slowest_rank, slowest = max(ranks, key=lambda rank_phases: (sum(rank_phases[1].values()), -rank_phases[0]))
    return StartupBreakdown(medians, len(ranks), slowest_rank, sum(slowest.values()))
