"""The sweep's figure: goodput against the mean time between failures, one line per launcher, one panel per mix.

    python benchmarks/goodput/figure.py benchmarks/results/goodput-<time>/results.json [MORE.json ...] [--reread]

draws ``goodput.svg`` beside the (first) ``results.json`` that ``bench_goodput.py`` wrote (which
draws it itself at the end of a run) and prints the summary tables (:mod:`goodput.summary`),
running nothing. Several ``results.json`` are one sweep: their cases together, each mix and MTBF's
runs its repeats (a sweep run in parts, a repeat added another day). ``--reread`` reads each
elastic job's journal again with this checkout's ledger (:func:`goodput.runner.reread_ledger`).
Each line is the median goodput (truth) over the repeats of each MTBF, the band its range (min to
max). matplotlib draws it (``pip install -e '.[benchmarks]'``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: benchmarks/ on the path, as bench_goodput.py puts it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from goodput.runner import reread_ledger  # noqa: E402
from goodput.summary import LAUNCHER_NAMES, group, launchers_of, median_range, overview_table, summary_table  # noqa: E402

__all__ = ["COLORS", "FIGURE_NAME", "cases_of", "draw", "main", "merged", "series"]

FIGURE_NAME = "goodput.svg"
# One colour per launcher, the same in every panel.
COLORS = {"elastic": "#2b8a3e", "elastic-lease": "#74b816", "elastic-ray": "#0c8599", "torchrun": "#e8590c",
          "ray-train": "#5f3dc4"}
_OTHER_COLORS = ("#c92a2a", "#1c7ed6", "#f59f00", "#495057")


def cases_of(results: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The cases of a ``results.json``: its ``cases``, or, for one written before sweeps (and by
    ``--smoke``), its one run, whose jobs' folders are beside it."""
    if "cases" in results:
        return list(results["cases"])
    schedule = results["schedule"]
    step_s = float(results["settings"]["step_s"])
    return [{"mix": schedule["mix"], "mtbf_steps": round(float(schedule["mtbf_s"]) / step_s, 6), "repeat": 0,
             "seed": schedule["seed"], "settings": results["settings"], "schedule": schedule,
             "results": results["results"], "folder": "."}]


def merged(paths: Sequence[Path], *, reread: bool = False) -> dict[str, Any]:
    """The ``results.json`` files at ``paths`` as one: their cases in order, each case's ``folder``
    made a path from here, and when and where each ran. ``reread``: each elastic job's ledger
    read again from its journal by this checkout."""
    cases: list[dict[str, Any]] = []
    created: list[str] = []
    platforms: list[str] = []
    for path in paths:
        results = json.loads(path.read_text())
        created += [str(results["created"])] if results.get("created") else []
        platforms += [str(results["platform"])] if results.get("platform") else []
        for case in cases_of(results):
            case = dict(case)
            if "folder" in case:
                case["folder"] = str(path.parent / case["folder"])
                if reread:
                    case["results"] = [_reread(job, Path(case["folder"])) for job in case["results"]]
            cases.append(case)
    return {"created": " and ".join(created), "platform": " and ".join(dict.fromkeys(platforms)), "cases": cases}


def _reread(job: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    if job.get("ledger") is None:
        return dict(job)
    return {**job, "ledger": reread_ledger(folder / str(job["launcher"])) or job["ledger"]}


def series(cases: Sequence[Mapping[str, Any]], mix: str, launcher: str) -> list[tuple[float, float, float, float, int]]:
    """(MTBF in steps, median, min, max, repeats with a goodput) of one launcher's line in one mix's panel."""
    points = []
    for (of_mix, mtbf), repeats in group(cases).items():
        if of_mix != mix:
            continue
        found = [r["goodput"] for c in repeats for r in c["results"] if r["launcher"] == launcher]
        spread = median_range(found)
        if spread is not None:
            points.append((mtbf, *spread, sum(v is not None for v in found)))
    return sorted(points)


def draw(results: Mapping[str, Any], path: Path) -> Path:
    """Draw the figure of ``results`` (a ``results.json``'s content) into ``path`` (SVG): text kept
    as text (``svg.fonttype`` none), ids from a fixed salt and no date, so the same results give
    the same file."""
    import matplotlib

    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "goodput"}):
        return _draw(results, path)


def _draw(results: Mapping[str, Any], path: Path) -> Path:
    from matplotlib.figure import Figure  # no pyplot: no global state, no display

    cases = cases_of(results)
    mixes = list(dict.fromkeys(str(c["mix"]) for c in cases))
    launchers = launchers_of(cases)
    step_s = float(cases[0]["settings"]["step_s"])
    figure = Figure(figsize=(4.6 * len(mixes) + 0.6, 4.2), layout="constrained")
    axes = figure.subplots(1, len(mixes), sharey=True, squeeze=False)[0]
    for panel, (mix, ax) in enumerate(zip(mixes, axes, strict=True)):
        repeats = max(len(r) for (m, _), r in group(cases).items() if m == mix)
        for number, launcher in enumerate(launchers):
            points = series(cases, mix, launcher)
            if not points:
                continue
            color = COLORS.get(launcher, _OTHER_COLORS[number % len(_OTHER_COLORS)])
            x = [p[0] for p in points]
            (line,) = ax.plot(x, [p[1] for p in points], marker="o", color=color, label=LAUNCHER_NAMES.get(launcher, launcher))
            line.set_gid(f"goodput-{mix}-{launcher}")
            if any(p[2] != p[3] for p in points):
                band = ax.fill_between(x, [p[2] for p in points], [p[3] for p in points], color=color, alpha=0.18, linewidth=0)
                band.set_gid(f"range-{mix}-{launcher}")
        mtbfs = sorted({float(c["mtbf_steps"]) for c in cases if c["mix"] == mix})
        if len(mtbfs) > 1 and mtbfs[-1] / mtbfs[0] >= 4:
            ax.set_xscale("log")
        ax.set_xticks(mtbfs, [f"{m:g}" for m in mtbfs])
        ax.minorticks_off()
        ax.set_ylim(0.0, 1.0)
        ax.grid(True, color="#e9ecef")
        ax.set_title(f"{mix} (median of {repeats}, range shaded)" if repeats > 1 else mix)
        ax.set_xlabel(f"mean time between failures, steps of {step_s:g} s")
        if panel == 0:
            ax.set_ylabel("goodput (truth)")
    axes[0].legend(loc="upper left")  # goodput under failures sits low: the top is free
    where = " · ".join(str(results[k]) for k in ("created", "platform") if results.get(k))
    if where:
        figure.suptitle(where, fontsize=8, color="#495057")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="svg", metadata={"Date": None})
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Draw the figure of a ``results.json`` and print its summary tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+",
                        help="results.json files written by benchmarks/bench_goodput.py: one sweep")
    parser.add_argument("--reread", action="store_true",
                        help="read each elastic job's journal again with this checkout's ledger")
    parser.add_argument("--out", type=Path, help=f"the SVG (default: {FIGURE_NAME} beside the first results.json)")
    args = parser.parse_args(argv)
    try:
        results = merged(args.results, reread=args.reread)
    except (OSError, ValueError, KeyError) as error:
        parser.error(f"results: cannot read {' '.join(map(str, args.results))}: {error}")
    print("\ngoodput (truth), median (min–max) over the repeats:\n")
    print(overview_table(cases_of(results)))
    for (mix, mtbf), cases in group(cases_of(results)).items():
        print(f"\n{mix}, mean time between failures {mtbf:g} steps:\n")
        print(summary_table(cases))
    print(f"\nfigure: {draw(results, args.out or args.results[0].with_name(FIGURE_NAME))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
