"""Each death of elastic's driver in one job of the benchmark, and what its takeover cost.

    python benchmarks/goodput/takeovers.py RESULTS/CASE/elastic-lease

reads one elastic job (its run directory's journal, the program's step log and the replayer's
events) and prints, for each launcher killed (``driver_kill``, ``driver_oom``): how long its
successor took from its own process start to the attempt taken over (``attempt_adopted``; a
restart instead says so), and the program's steps from the kill to the takeover: how many, and
the slowest interval between two of them against the run's median interval (a takeover costs no
step when the ranks train through it at their usual pace).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from goodput.truth import read_lines  # noqa: E402

__all__ = ["Takeover", "format_takeovers", "takeovers"]

DRIVER_KINDS = ("driver_kill", "driver_oom")


@dataclass(frozen=True)
class Takeover:
    """One driver's death and its successor: ``adopted_s`` from the successor's process start to
    the attempt taken over (None: it restarted instead); the steps logged from the kill to then,
    and the slowest interval between two steps from the last before the kill to the first after
    the takeover (or the restart's start), over the run's median interval."""

    killed_at: float
    kind: str
    adopted_s: float | None
    steps_during: int
    slowest_over_median: float | None


def _time(record: Mapping[str, Any]) -> float:
    return datetime.fromisoformat(str(record["time"])).timestamp()


def takeovers(journal: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]],
              events: Sequence[Mapping[str, Any]]) -> list[Takeover]:
    """Each driver death of ``events`` (the replayer's lines) with what followed it in ``journal``
    (elastic's records) and ``steps`` (the program's committed steps, ``{"step", "t"}``)."""
    times = sorted(float(s["t"]) for s in steps if "step" in s)
    gaps = [b - a for a, b in zip(times, times[1:])]
    median = statistics.median(gaps) if gaps else None
    starts = [r for r in journal if r.get("event") == "run_started"]
    found = []
    for event in (e for e in events if e.get("kind") in DRIVER_KINDS):
        killed_at = float(event["t"])
        successor = next((r for r in starts if _time(r) > killed_at), None)
        if successor is None:
            continue
        began = _time(successor) - float(successor.get("process_started_s_ago") or 0.0)
        after = [r for r in journal if _time(r) >= _time(successor)]
        adopted = next((r for r in after if r.get("event") == "attempt_adopted"), None)
        if adopted is not None and any(r.get("event") == "attempt_started" and _time(r) < _time(adopted) for r in after):
            adopted = None  # the successor started an attempt of its own first: no takeover of this one
        until = _time(adopted) if adopted is not None else _time(successor)
        during = [t for t in times if killed_at <= t <= until]
        # The steps through the outage with the last one before it and the first one after it:
        # a restart's gap is one long interval, a takeover's steps keep their pace.
        window = [*[t for t in times if t < killed_at][-1:], *during, *[t for t in times if t > until][:1]]
        intervals = [b - a for a, b in zip(window, window[1:])]
        found.append(Takeover(
            killed_at=killed_at, kind=str(event["kind"]),
            adopted_s=None if adopted is None else _time(adopted) - began,
            steps_during=len(during),
            slowest_over_median=max(intervals) / median if intervals and median else None,
        ))
    return found


def format_takeovers(found: Sequence[Takeover]) -> str:
    lines = ["| killed | successor start → taken over | steps meanwhile | slowest step / median |", "|---|---|---|---|"]
    for t in found:
        adopted = "restarted instead" if t.adopted_s is None else f"{t.adopted_s:.2f} s"
        slowest = "-" if t.slowest_over_median is None else f"{t.slowest_over_median:.2f}"
        lines.append(f"| {t.kind} | {adopted} | {t.steps_during} | {slowest} |")
    return "\n".join(lines)


def _read(path: Path) -> list[dict[str, Any]]:
    return read_lines(path.read_text()) if path.exists() else []


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("job", type=Path, help="one elastic job of a results directory: RESULTS/CASE/LAUNCHER")
    args = parser.parse_args(argv)
    journal = [json.loads(line) for line in (args.job / "run" / "journal.jsonl").read_text().splitlines() if line.strip()]
    found = takeovers(journal, _read(args.job / "steps.jsonl"), _read(args.job / "events.jsonl"))
    print(format_takeovers(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
