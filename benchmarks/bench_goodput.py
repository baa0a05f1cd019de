"""Goodput under a failure schedule, elastic beside torchrun and Ray Train v2, with elastic's ledger beside the truth.

    python benchmarks/bench_goodput.py --mix llama3 --events 20 --mtbf-steps 100
    python benchmarks/bench_goodput.py --mix llama3,spot,rsc --mtbf-steps 50,100,200 --repeats 3
    python benchmarks/bench_goodput.py --smoke

Draws a seeded schedule from a mix (``benchmarks/goodput/mixes.py``), compresses it so that
its mean time between failures is ``--mtbf-steps`` steps of ``--step-time`` seconds (the
checkpoint cost and interval and the notices shrink by the same factor), runs the same gloo
DDP program (2 ranks; ``--program jax``: a JAX job of 2 processes with Orbax checkpoints) under
each launcher (also NVIDIA's ``ft_launcher``, ``nvrx``, and ``torchft``, where they are installed)
for the schedule's duration while the replayer
injects its events, and prints, per launcher: goodput from the program's own log, elastic's
ledger beside it, recovery per kind of event, steps redone, requeues, the verdict and the
Young/Daly checkpoint interval. Several mixes, MTBFs and repeats (each repeat its own seed,
``--seed`` upward) run one after the other; then one table per mix and MTBF gives medians over
the repeats (``goodput/summary.py``) and ``goodput.svg`` draws goodput against the MTBF, one
line per launcher, one panel per mix (``goodput/figure.py``; matplotlib, the ``benchmarks``
extra). Everything goes to ``benchmarks/results/goodput-<time>/`` (``results.json``, the
schedule, each launcher's logs, steps, events log and run directory; one folder per case when
there are several). See ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_launchers import exit_on_sigterm  # noqa: E402
from goodput.figure import FIGURE_NAME, draw  # noqa: E402
from goodput.mixes import MIXES, generate  # noqa: E402
from goodput.runner import (  # noqa: E402
    LAUNCHERS, PROGRAMS, STOP, JobResult, Settings, format_table, nvrx_missing, run_job, torchft_missing,
)
from goodput.schedule import Event, Schedule  # noqa: E402
from goodput.summary import group, summary_table  # noqa: E402

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SMOKE_LAUNCHERS = "elastic,elastic-ray,torchrun,ray-train"
# The smoke's Rays start fewer processes: no usage report, and Ray Train without the actors that
# watch for drains and reconcile its state (the smoke has no notice; its numbers are no figures).
SMOKE_RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    "RAY_TRAIN_ENABLE_STATE_ACTOR_RECONCILIATION": "0",
}


def smoke_schedule() -> Schedule:
    """A burst: SIGKILLs of rank 1 and rank 0 half a second after the first step (one recovery for
    both), the end 2 s from the first step (the schedule's clock starts there, not at the launch;
    the next attempt stops after its first step when its recovery outlasts the end)."""
    return Schedule("smoke", 0, 2.0, mtbf_s=1.0, checkpoint_interval_s=0.5, checkpoint_cost_s=0.0,
                    events=(Event(0.5, "sigkill", rank=1, burst=0, cause="smoke"),
                            Event(0.5, "sigkill", rank=0, burst=0, cause="smoke")))


def run_side_by_side(names: list[str], schedule: Schedule, out: Path, settings: Settings) -> list[JobResult]:
    """Every launcher's job at once, a thread each, each with its own processes, folders and Ray
    (``--parallel``: they share the machine's cores, so the numbers are no figures)."""
    with ThreadPoolExecutor(len(names)) as pool:
        futures = [pool.submit(run_job, LAUNCHERS[name], schedule, out / name, settings) for name in names]
        try:
            return [future.result() for future in futures]
        except BaseException:
            STOP.set()  # each job stops its processes; the pool waits for them
            raise


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mix", default="llama3",
                        help=f"of {', '.join(MIXES)}, comma-separated for several (default: llama3)")
    parser.add_argument("--events", type=int, default=20, help="events in the schedule (default: 20)")
    parser.add_argument("--seed", type=int, default=0, help="the schedule's seed (default: 0)")
    parser.add_argument("--mtbf-steps", default="100",
                        help="mean time between failures after compression, in steps, comma-separated for "
                             "several (default: 100)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of each mix and MTBF, each with its own seed from --seed up (default: 1)")
    parser.add_argument("--step-time", type=float, default=0.2, help="seconds a step sleeps (default: 0.2)")
    parser.add_argument("--timeout", type=float,
                        help="the process group's timeout, s (default: 15; 60 with --smoke, whose launchers "
                             "start side by side: a rank's torch import can outlast 15 s on a loaded machine)")
    parser.add_argument("--launchers", default="elastic,torchrun,ray-train",
                        help=f"comma-separated, of {', '.join(LAUNCHERS)} (default: elastic,torchrun,ray-train)")
    parser.add_argument("--program", default="ddp", choices=sorted(PROGRAMS),
                        help="the training program: the gloo DDP job, or the JAX one (Orbax; not under ray-train) (default: ddp)")
    parser.add_argument("--baseline", action="store_true", help="also run each launcher with no events, as long")
    parser.add_argument("--schedule", type=Path, help="a schedule's JSON to replay instead of drawing one")
    parser.add_argument("--smoke", action="store_true",
                        help=f"two SIGKILLs under each of {SMOKE_LAUNCHERS} at once (--parallel), 2 s from the first step")
    parser.add_argument("--parallel", action="store_true",
                        help="run the launchers' jobs at the same time: quicker, but they share the cores (no figures)")
    parser.add_argument("--out", type=Path, help="results folder (default: benchmarks/results/goodput-<time>)")
    args = parser.parse_args(argv)
    if args.smoke and args.launchers == parser.get_default("launchers"):
        args.launchers = SMOKE_LAUNCHERS
    args.parallel = args.parallel or args.smoke
    if args.timeout is None:
        args.timeout = 60.0 if args.smoke else 15.0
    if args.parallel and args.baseline:
        parser.error("--parallel (and --smoke): not with --baseline, whose runs are figures, one launcher at a time")
    args.launchers = args.launchers.split(",")
    unknown = sorted(set(args.launchers) - set(LAUNCHERS))
    if unknown:
        parser.error(f"--launchers: unknown {', '.join(unknown)}; known: {', '.join(LAUNCHERS)}")
    if args.program != "ddp" and (ray := sorted(n for n in args.launchers if LAUNCHERS[n].flavour in ("ray", "torchft"))):
        parser.error(f"--program {args.program}: not under {', '.join(ray)} (see docs/operating/goodput.md)")
    if "nvrx" in args.launchers and (why := nvrx_missing()):
        parser.error(f"--launchers nvrx: {why}")
    if "torchft" in args.launchers and (why := torchft_missing()):
        parser.error(f"--launchers torchft: {why}")
    args.mixes = args.mix.split(",")
    unknown = sorted(set(args.mixes) - set(MIXES))
    if unknown:
        parser.error(f"--mix: unknown {', '.join(unknown)}; known: {', '.join(MIXES)}")
    try:
        args.mtbfs = [float(m) for m in args.mtbf_steps.split(",")]
    except ValueError:
        parser.error(f"--mtbf-steps: {args.mtbf_steps!r} is not a number or comma-separated numbers")
    args.mix, args.mtbf_steps = args.mixes[0], args.mtbfs[0]
    if args.events < 1 or min(args.mtbfs) <= 0 or args.step_time <= 0:
        parser.error("--events must be at least 1, --mtbf-steps and --step-time above 0")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return args


def schedule_and_settings(
    args: argparse.Namespace, mix: str | None = None, mtbf_steps: float | None = None, seed: int | None = None,
) -> tuple[Schedule, Settings]:
    """The compressed schedule, and the program's settings that follow from it (a sweep's case
    gives its own mix, MTBF and seed; else the first of the command line's)."""
    mix, mtbf_steps = mix or args.mix, mtbf_steps or args.mtbf_steps
    seed = args.seed if seed is None else seed
    if args.smoke:
        return smoke_schedule(), Settings(step_s=0.1, checkpoint_every=5, timeout_s=args.timeout,
                                          finish_timeout_s=240.0, clock="first-step", program=args.program)
    if args.schedule:
        real = Schedule.from_json(args.schedule.read_text())
    else:
        real = generate(MIXES[mix], seed, events=args.events)
    factor = real.mtbf_s / (mtbf_steps * args.step_time)
    schedule = real.compressed(factor) if abs(factor - 1.0) > 1e-9 else real
    every = max(1, round(schedule.checkpoint_interval_s / args.step_time))
    # The schedule starts at each job's first step: its events fall on training, not on a start-up
    # that a busy machine can stretch past the first events (Ray Train's took over a minute).
    return schedule, Settings(args.step_time, every, schedule.checkpoint_cost_s, args.timeout, clock="first-step",
                              program=args.program)


def run_case(args: argparse.Namespace, schedule: Schedule, settings: Settings, out: Path) -> dict[str, Any]:
    """Run one schedule against each launcher into ``out``, print its table: the case's results."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "schedule.json").write_text(schedule.to_json())
    print(f"schedule: {schedule.mix}, seed {schedule.seed}, {len(schedule.events)} events in "
          f"{schedule.duration_s:.1f} s, compressed {schedule.compression:.0f}x; ratios: "
          + ", ".join(f"{k} {v:.3g}" for k, v in schedule.ratios(settings.step_s).items()), flush=True)
    results: list[JobResult] = []
    baselines: dict[str, float | None] = {}
    if args.parallel:
        results = run_side_by_side(args.launchers, schedule, out, settings)
        for result in results:
            print(f"{result.launcher}: {result.verdict}, goodput {result.truth.goodput}", file=sys.stderr, flush=True)
    for name in [] if args.parallel else args.launchers:
        if args.baseline:
            empty = Schedule(schedule.mix, schedule.seed, schedule.duration_s, schedule.mtbf_s,
                             schedule.checkpoint_interval_s, schedule.checkpoint_cost_s, (), schedule.compression)
            baselines[name] = run_job(LAUNCHERS[name], empty, out / f"{name}-baseline", settings).truth.goodput
            print(f"{name}: with no events, goodput {baselines[name]}", file=sys.stderr, flush=True)
        result = run_job(LAUNCHERS[name], schedule, out / name, settings)
        print(f"{name}: {result.verdict}, goodput {result.truth.goodput}", file=sys.stderr, flush=True)
        results.append(result)
    table = format_table(results, schedule, settings, baselines or None)
    print(table, flush=True)
    return {
        "settings": asdict(settings),
        "schedule": json.loads(schedule.to_json()),
        "baselines": baselines,
        "results": [r.as_dict() for r in results],
        "table": table,
    }


def main(argv: list[str] | None = None) -> int:
    """Run each case's schedule against each launcher, print the tables, save everything, draw the figure."""
    args = parse_args(argv)
    exit_on_sigterm()  # a SIGTERM still stops what the run started
    if args.smoke:
        os.environ.update(SMOKE_RAY_ENV)  # every launcher's environment starts from this one
    out = (args.out or RESULTS_DIR / f"goodput-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    sweep = [(mix, mtbf, repeat) for mix in args.mixes for mtbf in args.mtbfs for repeat in range(args.repeats)]
    document: dict[str, Any] = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cases": [],
    }
    for mix, mtbf, repeat in sweep:
        seed = args.seed + repeat
        schedule, settings = schedule_and_settings(args, mix, mtbf, seed)
        folder = out if len(sweep) == 1 else out / f"{mix}-mtbf{mtbf:g}-r{repeat}"
        case = run_case(args, schedule, settings, folder)
        if len(sweep) == 1:
            document.update(case)  # one run: its results at the top, as before sweeps
        document["cases"].append({"mix": schedule.mix, "mtbf_steps": mtbf, "repeat": repeat, "seed": seed,
                                  "folder": folder.name if folder != out else ".", **case})
        (out / "results.json").write_text(json.dumps(document, indent=1, default=str) + "\n")  # after each case
    if args.repeats > 1 or len(sweep) > 1:
        for (mix, mtbf), cases in group(document["cases"]).items():
            runs = f"{len(cases)} run{'' if len(cases) == 1 else 's'}"
            print(f"\n{mix}, mean time between failures {mtbf:g} steps, {runs}:\n\n{summary_table(cases)}")
    try:
        print(f"figure: {draw(document, out / FIGURE_NAME)}")
    except ImportError:
        print("figure: not drawn, matplotlib is not installed (pip install -e '.[benchmarks]'; then "
              f"python benchmarks/goodput/figure.py {out / 'results.json'})", file=sys.stderr)
    print(f"results: {out}")
    return 0 if all(r["goodput"] is not None for case in document["cases"] for r in case["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
