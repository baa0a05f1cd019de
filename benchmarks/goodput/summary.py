"""A sweep's results (``results.json``'s ``cases``) read back: medians over repeats, one table per mix and MTBF. Pure.

A *case* is one schedule (a mix, a mean time between failures in steps, a repeat with its own
seed) run against each launcher: what ``bench_goodput.py`` writes, one entry of ``cases`` each,
with ``results`` as :meth:`goodput.runner.JobResult.as_dict` gives them. The repeats of a mix and
an MTBF are summarised together: goodput as its median and range, recoveries pooled by kind,
steps redone and elastic's ledger as medians, events and verdicts counted, and the Young/Daly
checkpoint interval for the median checkpoint cost measured beside the interval used.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from goodput.truth import young_daly_s

__all__ = ["LAUNCHER_NAMES", "group", "launchers_of", "median_range", "overview_table", "summary_table"]

Case = Mapping[str, Any]

# How a launcher is named in tables and figures.
LAUNCHER_NAMES = {"elastic": "elastic", "elastic-lease": "elastic --orphan-lease", "elastic-ray": "elastic on Ray",
                  "torchrun": "torchrun", "ray-train": "Ray Train v2"}


def group(cases: Iterable[Case]) -> dict[tuple[str, float], list[Case]]:
    """The cases by (mix, MTBF in steps), in the order they first appear."""
    out: dict[tuple[str, float], list[Case]] = {}
    for case in cases:
        out.setdefault((str(case["mix"]), float(case["mtbf_steps"])), []).append(case)
    return out


def launchers_of(cases: Iterable[Case]) -> list[str]:
    """Every launcher the cases ran, in the order first run."""
    names: list[str] = []
    for case in cases:
        for result in case["results"]:
            if result["launcher"] not in names:
                names.append(result["launcher"])
    return names


def _results_of(cases: Sequence[Case], launcher: str) -> list[Mapping[str, Any]]:
    return [r for case in cases for r in case["results"] if r["launcher"] == launcher]


def median_range(values: Iterable[float | None]) -> tuple[float, float, float] | None:
    """(median, min, max) of the values given, None when there are none."""
    found = [v for v in values if v is not None]
    return (statistics.median(found), min(found), max(found)) if found else None


def _goodput_cell(values: Sequence[float | None]) -> str:
    """``0.426 (0.401–0.440)``: the median and the range; runs that gave none are counted."""
    found = median_range(values)
    if found is None:
        return "-"
    median, low, high = found
    shown = sum(v is not None for v in values)
    cell = f"{median:.3f}" + (f" ({low:.3f}–{high:.3f})" if shown > 1 else "")
    return cell + (f", none in {len(values) - shown}" if shown < len(values) else "")


def _median_cell(values: Iterable[float | None], digits: int = 3) -> str:
    found = median_range(values)
    return "-" if found is None else f"{found[0]:.{digits}f}"


def _recoveries_by_kind(results: Iterable[Mapping[str, Any]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for result in results:
        for line, seconds in zip(result["injected"], result["recoveries"], strict=True):
            if seconds is not None:
                out.setdefault(str(line["kind"]), []).append(float(seconds))
    return out


def _verdicts(results: Iterable[Mapping[str, Any]]) -> str:
    counted: dict[str, int] = {}
    for result in results:
        counted[result["verdict"]] = counted.get(result["verdict"], 0) + 1
    return ", ".join(f"{n} {verdict}" for verdict, n in counted.items()) or "-"


def _furthest_cell(jobs: Sequence[Mapping[str, Any]]) -> str:
    """The ledger's furthest from the truth over the repeats, in goodput points (signed)."""
    gaps = [100.0 * (r["ledger"]["goodput"] - r["goodput"]) for r in jobs
            if r.get("ledger") and r["ledger"].get("goodput") is not None and r.get("goodput") is not None]
    return f"{max(gaps, key=abs):+.1f}" if gaps else "-"


def summary_table(cases: Sequence[Case]) -> str:
    """One mix and MTBF over its repeats, one column per launcher, as Markdown."""
    names = launchers_of(cases)
    per = {name: _results_of(cases, name) for name in names}
    rows: list[list[str]] = [["", *(LAUNCHER_NAMES.get(n, n) for n in names)], ["---", *("---" for _ in names)]]

    def row(label: str, cells: Iterable[str]) -> None:
        rows.append([label, *cells])

    row(f"goodput (truth), median (min–max) of {len(cases)}", [_goodput_cell([r["goodput"] for r in per[n]]) for n in names])
    row("elastic's ledger, median", [
        _median_cell([(r.get("ledger") or {}).get("goodput") for r in per[n]]) if any(r.get("ledger") for r in per[n]) else "-"
        for n in names
    ])
    row("ledger − truth, points: furthest", [_furthest_cell(per[n]) if any(r.get("ledger") for r in per[n]) else "-"
                                               for n in names])
    row("events injected / scheduled", [
        f"{sum(len(r['injected']) for r in per[n])}/{sum(int(r['scheduled']) for r in per[n])}" for n in names
    ])
    kinds = sorted({k for n in names for k in _recoveries_by_kind(per[n])})
    for kind in kinds:
        cells = []
        for n in names:
            seconds = _recoveries_by_kind(per[n]).get(kind, [])
            cells.append(f"{statistics.median(seconds):.1f} / {max(seconds):.1f} ({len(seconds)})" if seconds else "-")
        row(f"recovery s, {kind}: median / worst (n)", cells)
    row("steps redone, median", [_median_cell([r["redone"] for r in per[n]], 0) for n in names])
    row("verdicts", [_verdicts(per[n]) for n in names])
    interval = [float(c["settings"]["checkpoint_every"]) * float(c["settings"]["step_s"]) for c in cases]
    row("checkpoint interval s (used)", [f"{statistics.median(interval):.2f}" for _ in names])
    row("checkpoint cost s, median", [_median_cell([r["truth"]["checkpoint_s"] for r in per[n]]) for n in names])
    mtbf_s = statistics.median(float(c["schedule"]["mtbf_s"]) for c in cases)
    costs = {n: median_range(r["truth"]["checkpoint_s"] for r in per[n]) for n in names}
    row("Young/Daly interval s", [
        "-" if (cost := costs[n]) is None else f"{young_daly_s(cost[0], mtbf_s):.2f}" for n in names
    ])
    return "\n".join("| " + " | ".join(cells) + " |" for cells in rows)


def overview_table(cases: Sequence[Case]) -> str:
    """One row per mix and MTBF, one column per launcher: goodput (truth) as its median and range
    over the repeats, the best median in bold; and the repeats counted. The sweep at a glance."""
    names = launchers_of(cases)
    head = ["mix, MTBF steps", "repeats", *[LAUNCHER_NAMES.get(n, n) for n in names]]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for (mix, mtbf), repeats in group(cases).items():
        values = {n: [r["goodput"] for r in _results_of(repeats, n)] for n in names}
        medians = {n: found[0] for n in names if (found := median_range(values[n])) is not None}
        best = max(medians.values(), default=None)
        cells = [f"**{_goodput_cell(values[n])}**" if best is not None and medians.get(n) == best
                 else _goodput_cell(values[n]) for n in names]
        lines.append("| " + " | ".join([f"{mix}, {mtbf:g}", str(len(repeats)), *cells]) + " |")
    return "\n".join(lines)

