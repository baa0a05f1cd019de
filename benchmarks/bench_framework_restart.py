"""Benchmark each framework recipe in examples/: from a rank's SIGKILL to the next attempt's first step.

Each repetition runs one recipe under ``python -m elastic run`` with 2 ranks
and today's defaults (plus ``--max-restarts 1`` and a checkpoint directory),
SIGKILLs rank 1 from outside once its log shows the recipe's kill step, and
polls the next attempt's rank-0 log every 10 ms for its first ``step N`` line.
Reported, medians over the repetitions, in seconds from the kill:

- *relaunched*: the journal's ``attempt_started`` of the next attempt (the
  launcher's part: detection, drain, planning, the checkpoint scan);
- *first step*: the next attempt's first training step (what users wait for:
  the launcher's part, then the interpreter, the framework's imports and
  set-up, the process group, loading the checkpoint and one step);
- *rank CPU*: the CPU time rank 0 of the next attempt used until then, which
  other work on the machine does not inflate: on an idle machine with a core
  per rank, the first step comes about that long after the relaunch;
- *start-up by phase*: the next attempt's start-up as its ``report.json`` breaks it
  down (``startup_breakdown``: spawn, imports, distributed init, cache load,
  restore, first step; each the median over its ranks), medians over the
  repetitions, the phases the rank bootstrap measured only.

    python benchmarks/bench_framework_restart.py --recipes hf-trainer,dcp-ddp,dcp-fsdp2 --repeat 3
    python benchmarks/bench_framework_restart.py --recipes jax-plain --options="--failure-grace 30"

``--options`` adds ``elastic run`` options to every recipe (``--failure-grace
30`` is how survivors were drained before ``--failure-grace`` existed).

Add a framework with one entry in :data:`RECIPES`: its command (given the
repetition's scratch directory, which is also the checkpoint directory's
parent) and the step after which rank 1 is killed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

from elastic.core.training.startup import PHASE_WORDS, PHASES

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
EXAMPLES = REPO_ROOT / "examples"
RESULTS_DIR = BENCH_DIR / "results"
POLL_S = 0.01
STEP_LINE = re.compile(r"\bstep[ =:]+(\d+)")


@dataclass(frozen=True)
class Recipe:
    """A framework recipe: its command given a scratch directory, and the step after which rank 1 dies.

    ``options`` are extra ``elastic run`` options; the checkpoint directory is
    always ``SCRATCH/ckpt``.
    """

    command: Callable[[Path], list[str]]
    kill_step: int
    options: tuple[str, ...] = ()


RECIPES: dict[str, Recipe] = {
    "hf-trainer": Recipe(
        lambda d: [sys.executable, str(EXAMPLES / "hf_trainer.py"), "--output_dir", str(d / "ckpt"),
                   "--output", str(d / "final.pt"), "--max_steps", "40", "--save_steps", "5",
                   "--step_pause", "0.1", "{resume_from?--resume_from_checkpoint}"],
        kill_step=12,
    ),
    "dcp-ddp": Recipe(
        lambda d: [sys.executable, str(EXAMPLES / "torch_dcp.py"), "--parallel", "ddp",
                   "--output", str(d / "final.pt"), "--steps", "40", "--step-pause", "0.1"],
        kill_step=12,
    ),
    # dcp-ddp with a SIGTERM handler of the user's own (SystemExit: finally blocks and atexit run):
    # a failure's survivor that caught the signal this way gets --failure-grace to exit.
    "dcp-ddp-handler": Recipe(
        lambda d: [sys.executable, str(BENCH_DIR / "user_sigterm_handler.py"), str(EXAMPLES / "torch_dcp.py"),
                   "--parallel", "ddp", "--output", str(d / "final.pt"), "--steps", "40", "--step-pause", "0.1"],
        kill_step=12,
    ),
    "dcp-fsdp2": Recipe(
        lambda d: [sys.executable, str(EXAMPLES / "torch_dcp.py"), "--parallel", "fsdp2",
                   "--output", str(d / "final.pt"), "--steps", "40", "--step-pause", "0.1"],
        kill_step=12,
    ),
    "lightning": Recipe(
        lambda d: [sys.executable, str(EXAMPLES / "lightning_train.py"), "--steps", "30",
                   "--checkpoint-every", "4", "--output", str(d / "final.pt"), "{resume_from?--ckpt-path}"],
        kill_step=14,
    ),
    # The recipe: a survivor exits as soon as its collective fails.
    "jax-orbax": Recipe(
        lambda d: [sys.executable, str(EXAMPLES / "jax_orbax.py"), "--output", str(d / "final.npz"),
                   "--steps", "100", "--step-seconds", "0.1", "--on-peer-loss", "exit",
                   "{resume_step?--resume-step}"],
        kill_step=8,
    ),
    # A plain JAX script: the survivor hangs in Orbax's background save and JAX's
    # preemption service swallows SIGTERM, so it lives until the drain's SIGKILL.
    "jax-plain": Recipe(
        lambda d: [sys.executable, str(EXAMPLES / "jax_orbax.py"), "--output", str(d / "final.npz"),
                   "--steps", "100", "--step-seconds", "0.1", "--on-peer-loss", "raise",
                   "{resume_step?--resume-step}"],
        kill_step=8,
    ),
}


@dataclass(frozen=True)
class Sample:
    """One repetition's times, in seconds from the kill (``None``: not seen, see ``error``)."""

    relaunched_s: float | None
    first_step_s: float | None
    resume_step: int | None
    load_1m: float  # the machine's 1-minute load average at the kill: other work inflates the times
    rank_cpu_s: float | None = None  # CPU time rank 0 of the next attempt spent until its first step
    error: str | None = None
    startup: dict[str, float] | None = None  # the next attempt's start-up by phase (report.json)


def latest_step(path: Path) -> int | None:
    """The highest ``step N`` in a rank's log, if any."""
    try:
        steps = [int(s) for s in STEP_LINE.findall(path.read_text(errors="replace"))]
    except FileNotFoundError:
        return None
    return max(steps) if steps else None


def rank_pid(root: int, rank: int) -> int | None:
    """The pid of ``rank`` under launcher ``root`` (the outermost process with its RANK and ELASTIC_RUN_ID)."""
    found: dict[int, int] = {}
    try:
        tree = psutil.Process(root).children(recursive=True)
    except psutil.NoSuchProcess:
        return None
    for process in tree:
        try:
            env = process.environ()
            if "ELASTIC_RUN_ID" in env and env.get("RANK") == str(rank):
                found[process.pid] = process.ppid()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    outer = [pid for pid, parent in found.items() if parent not in found]
    return outer[0] if outer else None


def rank_cpu_seconds(root: int, rank: int) -> float | None:
    """User and system CPU time ``rank`` has used so far (its own process; the recipes start no children)."""
    pid = rank_pid(root, rank)
    try:
        times = psutil.Process(pid).cpu_times() if pid is not None else None
    except psutil.NoSuchProcess:
        return None
    return None if times is None else times.user + times.system


def wait_for(what: str, predicate: Callable[[], Any], deadline_at: float) -> Any:
    """Poll every 10 ms until ``predicate`` gives something truthy; ``TimeoutError`` at the deadline."""
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline_at:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(POLL_S)


def journal_time(run_dir: Path, event: str, attempt: int) -> float | None:
    """The wall time of the journal's ``event`` for ``attempt``, if written."""
    try:
        lines = (run_dir / "journal.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return None
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == event and record.get("attempt") == attempt:
            return datetime.fromisoformat(record["time"]).timestamp()
    return None


def resume_step(run_dir: Path, attempt: int) -> int | None:
    for line in (run_dir / "journal.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("event") == "attempt_started" and record.get("attempt") == attempt:
            step = record.get("resume_step")
            return int(step) if step is not None else None
    return None


def startup_phases(run_dir: Path, attempt: int) -> dict[str, float] | None:
    """The attempt's start-up by phase from the run's report.json (medians over its ranks), if there."""
    try:
        report = json.loads((run_dir / "report.json").read_text())
    except (FileNotFoundError, ValueError):
        return None
    rows = [row for row in report.get("attempts", []) if row.get("attempt") == attempt]
    found = rows[0].get("startup_breakdown") if rows else None
    return dict(found["phases"]) if found else None


def repetition(recipe: Recipe, scratch: Path, timeout_s: float, options: tuple[str, ...] = ()) -> Sample:
    """Run the recipe once under elastic, kill rank 1 at its kill step, time the recovery."""
    scratch.mkdir(parents=True)
    run_dir = scratch / "run"
    argv = [sys.executable, "-m", "elastic", "run", "--run-dir", str(run_dir), "--nproc-per-node", "2",
            "--max-restarts", "1", "--checkpoint-dir", str(scratch / "ckpt"), "--log-format", "json",
            *recipe.options, *options, "--", *recipe.command(scratch)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELASTIC_", "TORCHELASTIC_"))}
    env.setdefault("JAX_PLATFORMS", "cpu")
    with (scratch / "launcher.out").open("wb") as out:
        launcher = subprocess.Popen(argv, cwd=scratch, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
    deadline_at = time.monotonic() + timeout_s
    try:
        victim_log = run_dir / "attempt-0" / "rank-1.log"

        def victim() -> int | None:
            if launcher.poll() is not None:
                raise RuntimeError(f"the launcher ended (status {launcher.returncode}) before the kill")
            step = latest_step(victim_log)
            return rank_pid(launcher.pid, 1) if step is not None and step >= recipe.kill_step else None

        pid = wait_for(f"rank 1 at step {recipe.kill_step}", victim, deadline_at)
        os.kill(pid, signal.SIGKILL)  # by pid: a rank of the launcher started above
        killed_at = time.time()
        load = os.getloadavg()[0]
        next_log = run_dir / "attempt-1" / "rank-0.log"
        wait_for("the next attempt's first step", lambda: latest_step(next_log) is not None, deadline_at)
        first_step_at = time.time()
        cpu_s = rank_cpu_seconds(launcher.pid, 0)
        launcher.wait(max(1.0, deadline_at - time.monotonic()))
        relaunched_at = journal_time(run_dir, "attempt_started", 1)
        return Sample(
            None if relaunched_at is None else relaunched_at - killed_at,
            first_step_at - killed_at,
            resume_step(run_dir, 1),
            load,
            cpu_s,
            None if launcher.returncode == 0 else f"the launcher exited {launcher.returncode}",
            startup_phases(run_dir, 1),
        )
    except (TimeoutError, RuntimeError, subprocess.TimeoutExpired) as error:
        return Sample(None, None, None, os.getloadavg()[0], None, str(error))
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)  # its own session: only what this repetition started
            launcher.wait(10)


def median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def cell(value: float | None, count: int, total: int) -> str:
    if value is None:
        return "—"
    return f"{value:.2f}" + ("" if count == total else f" ({count}/{total})")


def phases_cell(runs: list[Sample]) -> str:
    """``spawn 0.02, imports 0.91, restore 0.04 (2/3), ...``: each phase's median over the repetitions
    that measured it (how many, when not all)."""
    parts = []
    for phase in PHASES:
        values = [s.startup[phase] for s in runs if s.startup and phase in s.startup]
        if values:
            counted = "" if len(values) == len(runs) else f" ({len(values)}/{len(runs)})"
            parts.append(f"{PHASE_WORDS[phase]} {statistics.median(values):.2f}{counted}")
    return ", ".join(parts) or "—"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", default=",".join(RECIPES), help=f"comma-separated, of {', '.join(RECIPES)}")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions per recipe (default: 3)")
    parser.add_argument("--timeout", type=float, default=300.0, help="bound on each repetition, seconds")
    parser.add_argument("--options", default="", help="extra `elastic run` options for every recipe, one string")
    args = parser.parse_args(argv)
    options = tuple(shlex.split(args.options))
    names = [n for n in args.recipes.split(",") if n]
    unknown = [n for n in names if n not in RECIPES]
    if unknown:
        parser.error(f"--recipes: unknown {', '.join(unknown)}; known: {', '.join(RECIPES)}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    scratch = RESULTS_DIR / f"framework-restart-{stamp}"
    samples: dict[str, list[Sample]] = {}
    for name in names:
        for index in range(args.repeat):
            sample = repetition(RECIPES[name], scratch / f"{name}-{index}", args.timeout, options)
            samples.setdefault(name, []).append(sample)
            print(f"{name} #{index}: {sample}", file=sys.stderr, flush=True)
    if options:
        print(f"elastic run options: {shlex.join(options)}")
    print("| recipe | kill step | resumed from | kill → next attempt launched (s) "
          "| kill → next attempt's first step (s) | rank 0's CPU time to it (s) "
          "| next attempt's start-up by phase (s) | load average at the kill |")
    print("|---|---|---|---|---|---|---|---|")
    for name, runs in samples.items():
        relaunched = [s.relaunched_s for s in runs]
        first = [s.first_step_s for s in runs]
        cpu = [s.rank_cpu_s for s in runs]
        resumed = sorted({s.resume_step for s in runs if s.resume_step is not None})
        print(f"| {name} | {RECIPES[name].kill_step} | {', '.join(map(str, resumed)) or '—'} "
              f"| {cell(median(relaunched), sum(v is not None for v in relaunched), len(runs))} "
              f"| {cell(median(first), sum(v is not None for v in first), len(runs))} "
              f"| {cell(median(cpu), sum(v is not None for v in cpu), len(runs))} "
              f"| {phases_cell(runs)} "
              f"| {statistics.median(s.load_1m for s in runs):.1f} |")
    RESULTS_DIR.mkdir(exist_ok=True)
    result = RESULTS_DIR / f"framework-restart-{stamp}.json"
    result.write_text(json.dumps({n: [asdict(s) for s in runs] for n, runs in samples.items()}, indent=2))
    print(f"\nevery sample: {result}", file=sys.stderr)
    return 0 if all(s.error is None for runs in samples.values() for s in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
