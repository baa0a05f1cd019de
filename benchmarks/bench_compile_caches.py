"""Failure to the next attempt's first training step, for compiled steps: elastic (compile caches in
``--cache-dir``) against torchrun (the frameworks' defaults), in the same run.

Two jobs of 2 processes on CPU, each run by both launchers with ``--max-restarts 1``, interleaved:

* ``jax``: a jitted step that takes seconds to compile (``BENCH_LAYERS`` layers, forward and
  backward); JAX's persistent cache is off by default, so under torchrun the next attempt compiles
  again; under elastic it loads the step from ``run_dir/cache/jax``.
* ``torch``: DDP (gloo) with ``torch.compile``, each attempt on a "replacement node": every rank
  gets a fresh ``TMPDIR`` per attempt, so inductor's default cache (``$TMPDIR/torchinductor_$USER``)
  is cold under torchrun; under elastic the cache is in ``run_dir/cache/torchinductor``.

``elastic`` is elastic with its defaults, which prewarm each rank's successor at the rank's first
step with the packages it imported before its process group and their modules one level down
(``--prewarm-memory``).
``elastic-cold`` is elastic with that off (``--prewarm-memory 0``): every attempt's ranks start
cold. ``elastic-ray`` is elastic's defaults on the embedded Ray (``--backend ray``).
``elastic-prewarm`` is elastic with ``--prewarm`` naming what the rank imports (``PREWARM``)
after ``--prewarm-delay`` seconds.

On attempt 0 the last rank logs the wall time and SIGKILLs itself after step 3, once ``--kill-after``
seconds have passed since it started (late enough for the warm interpreters to be ready;
``compiled_rank.py``); the benchmark polls rank 0's log of attempt 1 every 10 ms for its first
``step N`` line, and notes the machine's 1-minute load average at the kill and at that line.

    python benchmarks/bench_compile_caches.py --jobs jax --repeat 5 --prewarm-delay 5 --kill-after 30
    python benchmarks/bench_compile_caches.py --jobs torch --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench_launchers import RESULTS_DIR, RepetitionError, read_events, stop_launcher

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RANK = BENCH_DIR / "compiled_rank.py"
LAUNCHERS = ("elastic", "elastic-cold", "elastic-ray", "elastic-prewarm", "torchrun")
STEP = re.compile(rb"^step \d+", re.MULTILINE)
TIMING = re.compile(r"timing: import ([0-9.]+)s, initialize ([0-9.]+)s, first step ([0-9.]+)s")
POLL_S = 0.01
# What compiled_rank.py imports before its process group: all of its import time.
PREWARM = {"jax": "jax", "torch": "torch,torch.distributed,torch.nn.parallel,torch._dynamo"}
# What the user could have set: both launchers start from the frameworks' defaults.
CACHE_VARIABLES = ("JAX_COMPILATION_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
                   "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES")


def argv(launcher: str, job: str, work: Path, prewarm_delay_s: float) -> list[str]:
    if launcher.startswith("elastic"):
        prewarm = {
            "elastic": [],
            "elastic-cold": ["--prewarm-memory", "0"],
            "elastic-ray": ["--backend", "ray"],
            "elastic-prewarm": ["--prewarm", PREWARM[job], "--prewarm-delay", str(prewarm_delay_s)],
        }[launcher]
        return [sys.executable, "-m", "elastic", "run", "--nproc-per-node", "2", "--max-restarts", "1",
                "--run-dir", str(work / "run"), "--run-id", work.name, "--log-format", "json", *prewarm,
                "--", sys.executable, str(RANK), job]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
            "--nproc-per-node", "2", "--max-restarts", "1", "--log-dir", str(work / "torchrun"),
            "--redirects", "3", str(RANK), job]


def first_step_log(launcher: str, work: Path) -> Path | None:
    """Rank 0's output of attempt 1, once the launcher has made it."""
    if launcher.startswith("elastic"):
        return work / "run" / "attempt-1" / "rank-0.log"
    found = sorted(work.glob("torchrun/*/attempt_1/0/stdout.log"))
    return found[0] if found else None


def start_up(launcher: str, work: Path) -> tuple[float, float, float] | None:
    """Rank 0's own account of attempt 1: seconds importing, initializing, to its first step."""
    if launcher.startswith("elastic"):
        logs = [work / "run" / "attempt-1" / "rank-0.log"]
    else:
        logs = sorted(work.glob("torchrun/*/attempt_1/0/stderr.log"))
    for log in logs:
        found = TIMING.search(log.read_text(errors="replace")) if log.exists() else None
        if found:
            return float(found[1]), float(found[2]), float(found[3])
    return None


@dataclass(frozen=True)
class Sample:
    """One repetition: seconds from the kill to the first step, and the 1-minute load average then."""

    seconds: float
    load_at_kill: float
    load_at_step: float


def once(launcher: str, job: str, work: Path, args: argparse.Namespace) -> Sample:
    """Seconds from the victim's SIGKILL to rank 0's first step line of attempt 1."""
    work.mkdir(parents=True)
    events = work / "events.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARIABLES}
    env.update(BENCH_EVENTS=str(events), BENCH_LAYERS=str(args.layers), BENCH_KILL_AFTER=str(args.kill_after),
               JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1", TORCHINDUCTOR_COMPILE_THREADS="1",
               TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    if job == "torch":
        env["BENCH_TMP"] = str(work / "tmp")
    with (work / "launcher.log").open("wb") as out:
        proc = subprocess.Popen(argv(launcher, job, work, args.prewarm_delay), cwd=work, env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + args.timeout
        killed: float | None = None
        load_at_kill = 0.0
        while time.monotonic() < deadline:
            if killed is None:
                found = [e for e in read_events(events) if e["ev"] == "killed"]
                killed = found[0]["t"] if found else None
                load_at_kill = os.getloadavg()[0]
            else:
                log = first_step_log(launcher, work)
                if log is not None and log.exists() and STEP.search(log.read_bytes()):
                    return Sample(time.time() - killed, load_at_kill, os.getloadavg()[0])
            if proc.poll() is not None:
                raise RepetitionError(f"{launcher} exited with {proc.returncode} first; see {work}/launcher.log")
            time.sleep(POLL_S)
        raise RepetitionError(f"no first step of attempt 1 after {args.timeout:.0f} s; see {work}")
    finally:
        stop_launcher(proc, events)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="jax,torch", help="comma-separated: jax, torch (default: both)")
    parser.add_argument("--launchers", default=",".join(LAUNCHERS),
                        help=f"comma-separated, run in this order each repetition (default: {','.join(LAUNCHERS)})")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions per job and launcher (default: 5)")
    parser.add_argument("--layers", type=int, default=16, help="layers of the JAX step (default: 16)")
    parser.add_argument("--kill-after", type=float, default=70.0,
                        help="the victim dies at its first step this many seconds after it started, and after "
                             "step 3 (default: 70)")
    parser.add_argument("--prewarm-delay", type=float, default=30.0,
                        help="elastic-prewarm's --prewarm-delay, seconds (default: 30, elastic's)")
    parser.add_argument("--timeout", type=float, default=400.0, help="bound on each repetition, seconds")
    args = parser.parse_args()
    jobs, launchers = args.jobs.split(","), args.launchers.split(",")
    unknown = sorted(set(launchers) - set(LAUNCHERS))
    if unknown:
        parser.error(f"--launchers: unknown {unknown}; allowed: {', '.join(LAUNCHERS)}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    root = RESULTS_DIR / f"bench-caches-{stamp}"
    samples: dict[tuple[str, str], list[Sample]] = {}
    errors: list[str] = []
    for job in jobs:
        for rep in range(args.repeat):
            for launcher in launchers:
                work = root / f"{job}-{launcher}-r{rep}"
                try:
                    sample = once(launcher, job, work, args)
                except RepetitionError as error:
                    errors.append(f"{job} {launcher} r{rep}: {error}")
                    print(errors[-1], file=sys.stderr, flush=True)
                    continue
                samples.setdefault((job, launcher), []).append(sample)
                print(f"{job} {launcher} r{rep}: {sample.seconds:.2f} s from the kill to attempt 1's first step "
                      f"(load average {sample.load_at_kill:.2f} at the kill, {sample.load_at_step:.2f} then)",
                      file=sys.stderr, flush=True)
    parts: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for job in jobs:
        for launcher in launchers:
            for rep in range(args.repeat):
                found = start_up(launcher, root / f"{job}-{launcher}-r{rep}")
                if found is not None:
                    parts.setdefault((job, launcher), []).append(found)
    print(format_tables(jobs, launchers, args.repeat, samples, parts))
    out = RESULTS_DIR / f"bench-caches-{stamp}.json"
    out.write_text(json.dumps({"created": stamp, "cpus": os.cpu_count(), "settings": vars(args),
                               "samples": {f"{j}/{l}": [asdict(x) for x in v] for (j, l), v in samples.items()},
                               "start_up": {f"{j}/{l}": v for (j, l), v in parts.items()},
                               "errors": errors}, indent=2) + "\n")
    print(f"results: {out}")
    return 0


def format_tables(jobs: list[str], launchers: list[str], repeat: int, samples: dict[tuple[str, str], list[Sample]],
                  parts: dict[tuple[str, str], list[tuple[float, float, float]]]) -> str:
    """Medians per job and launcher with the ratio to torchrun; then rank 0's own account of its start-up."""
    lines = ["| job | launcher | kill to first step (s) | / torchrun | load average at the kill, median (range) "
             "| per repetition |", "|---|---|---|---|---|---|"]
    for job in jobs:
        baseline = samples.get((job, "torchrun"))
        for launcher in launchers:
            rows = samples.get((job, launcher))
            if not rows:
                lines.append(f"| {job} | {launcher} | - (0/{repeat}) | - | - | - |")
                continue
            median = statistics.median(r.seconds for r in rows)
            ratio = f"{median / statistics.median(r.seconds for r in baseline):.2f}" if baseline else "-"
            loads = [r.load_at_kill for r in rows]
            lines.append(f"| {job} | {launcher} | {median:.2f} ({len(rows)}/{repeat}) | {ratio} "
                         f"| {statistics.median(loads):.2f} ({min(loads):.2f}-{max(loads):.2f}) "
                         f"| {', '.join(f'{r.seconds:.2f}' for r in rows)} |")
    if parts:
        lines += ["", "where attempt 1's start-up went on rank 0 (medians, s):",
                  "| job | launcher | import | initialize | first step (compile or cache load, and run) |",
                  "|---|---|---|---|---|"]
        for (job, launcher), accounts in parts.items():
            medians = [statistics.median(column) for column in zip(*accounts)]
            lines.append(f"| {job} | {launcher} | " + " | ".join(f"{m:.2f}" for m in medians) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
