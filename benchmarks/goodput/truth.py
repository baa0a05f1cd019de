"""Ground truth from the training program's own log, and the Young/Daly interval. Pure.

Rank 0 of the training program appends one JSON line per committed step
(``{"step", "t", "pid"}``: after the optimizer step, wall clock) and one per
checkpoint it wrote (``{"save", "t0", "t1", "pid"}``). The replayer appends one
line per event it injected (``{"index", "kind", "t", ...}``). From those:

- goodput truth = unique committed steps × the median undisturbed step time / wall time,
  where an undisturbed step is the time between two consecutive steps of one process;
- steps redone = committed steps − unique ones;
- an event's recovery = its injection → the first step of a process that had committed no
  step before it (the next attempt training again).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Truth", "read_lines", "recoveries", "truth", "young_daly_s"]


def read_lines(text: str) -> list[dict[str, Any]]:
    """The complete JSON lines of a log (a line cut off by a kill is left out)."""
    lines = text.splitlines(keepends=True)
    return [json.loads(line) for line in lines if line.endswith("\n") and line.strip()]


@dataclass(frozen=True)
class Truth:
    """What the training program's log says of one run."""

    wall_s: float
    steps: int  # committed, redone ones included
    unique_steps: int
    step_s: float | None  # the median undisturbed step
    checkpoint_s: float | None  # the median checkpoint write
    checkpoints: int

    @property
    def redone(self) -> int:
        """Steps committed again after a restart."""
        return self.steps - self.unique_steps

    @property
    def goodput(self) -> float | None:
        """Unique committed steps × the median undisturbed step time / wall time."""
        if self.step_s is None or self.wall_s <= 0:
            return None
        return self.unique_steps * self.step_s / self.wall_s


def truth(log: Sequence[dict[str, Any]], wall_s: float, nominal_step_s: float | None = None) -> Truth:
    """Read the program's log of a run that took ``wall_s`` seconds; ``nominal_step_s`` stands in
    for the median step when no process committed two steps in a row (a run that hardly trained)."""
    steps = [line for line in log if "step" in line]
    saves = [line["t1"] - line["t0"] for line in log if "save" in line]
    intervals = [
        b["t"] - a["t"]
        for a, b in zip(steps, steps[1:])
        if a["pid"] == b["pid"] and b["step"] == a["step"] + 1
    ]
    return Truth(
        wall_s=wall_s,
        steps=len(steps),
        unique_steps=len({line["step"] for line in steps}),
        step_s=statistics.median(intervals) if intervals else (nominal_step_s if steps else None),
        checkpoint_s=statistics.median(saves) if saves else None,
        checkpoints=len(saves),
    )


def recoveries(log: Iterable[dict[str, Any]], injected: Iterable[dict[str, Any]]) -> list[float | None]:
    """For each injected event (its wall time ``t``), seconds to the first step of a process
    that had committed none before it; None when the run ended first."""
    steps = sorted((line for line in log if "step" in line), key=lambda line: line["t"])
    out: list[float | None] = []
    for event in injected:
        seen = {line["pid"] for line in steps if line["t"] < event["t"]}
        after = (line["t"] for line in steps if line["t"] >= event["t"] and line["pid"] not in seen)
        first = next(after, None)
        out.append(None if first is None else first - event["t"])
    return out


def young_daly_s(checkpoint_cost_s: float, mtbf_s: float) -> float:
    """The checkpoint interval that loses the least: √(2 × checkpoint cost × MTBF) (Young 1974, Daly 2006)."""
    if checkpoint_cost_s < 0 or mtbf_s <= 0:
        raise ValueError("a checkpoint cost of 0 s or more and a mean time between failures above 0")
    return math.sqrt(2.0 * checkpoint_cost_s * mtbf_s)
