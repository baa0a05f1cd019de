"""Failure to the next attempt's first training step, for compiled steps: elastic (compile caches in
``--cache-dir``) against torchrun (the frameworks' defaults), in the same run.

Two jobs of 2 processes on CPU, each run by both launchers with ``--max-restarts 1``, interleaved:

* ``jax``: a jitted step that takes seconds to compile (``BENCH_LAYERS`` layers, forward and
  backward); JAX's persistent cache is off by default, so under torchrun the next attempt compiles
  again; under elastic it loads the step from ``run_dir/cache/jax``.
* ``torch``: DDP (gloo) with ``torch.compile``, each attempt on a "replacement node": every rank
  gets a fresh ``TMPDIR`` per attempt, so inductor's default cache (``$TMPDIR/torchinductor_$USER``)
  is cold under torchrun; under elastic the cache is in ``run_dir/cache/torchinductor``.

On attempt 0 the last rank logs the wall time and SIGKILLs itself after step 3 (``compiled_rank.py``);
the benchmark polls rank 0's log of attempt 1 every 10 ms for its first ``step N`` line.

    python benchmarks/bench_compile_caches.py --jobs jax,torch --repeat 5
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
from pathlib import Path

from bench_launchers import RESULTS_DIR, RepetitionError, read_events, stop_launcher

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RANK = BENCH_DIR / "compiled_rank.py"
LAUNCHERS = ("elastic", "torchrun")
STEP = re.compile(rb"^step \d+", re.MULTILINE)
TIMING = re.compile(r"timing: import ([0-9.]+)s, initialize ([0-9.]+)s, first step ([0-9.]+)s")
POLL_S = 0.01
# What the user could have set: both launchers start from the frameworks' defaults.
CACHE_VARIABLES = ("JAX_COMPILATION_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
                   "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES")


def argv(launcher: str, job: str, work: Path) -> list[str]:
    if launcher == "elastic":
        return [sys.executable, "-m", "elastic", "run", "--nproc-per-node", "2", "--max-restarts", "1",
                "--run-dir", str(work / "run"), "--run-id", work.name, "--log-format", "json",
                "--", sys.executable, str(RANK), job]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
            "--nproc-per-node", "2", "--max-restarts", "1", "--log-dir", str(work / "torchrun"),
            "--redirects", "3", str(RANK), job]


def first_step_log(launcher: str, work: Path) -> Path | None:
    """Rank 0's output of attempt 1, once the launcher has made it."""
    if launcher == "elastic":
        return work / "run" / "attempt-1" / "rank-0.log"
    found = sorted(work.glob("torchrun/*/attempt_1/0/stdout.log"))
    return found[0] if found else None


def start_up(launcher: str, work: Path) -> tuple[float, float, float] | None:
    """Rank 0's own account of attempt 1 (JAX only): seconds importing, initializing, to its first step."""
    if launcher == "elastic":
        logs = [work / "run" / "attempt-1" / "rank-0.log"]
    else:
        logs = sorted(work.glob("torchrun/*/attempt_1/0/stderr.log"))
    for log in logs:
        found = TIMING.search(log.read_text(errors="replace")) if log.exists() else None
        if found:
            return float(found[1]), float(found[2]), float(found[3])
    return None


def once(launcher: str, job: str, work: Path, layers: int, timeout_s: float) -> float:
    """Seconds from the victim's SIGKILL to rank 0's first step line of attempt 1."""
    work.mkdir(parents=True)
    events = work / "events.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARIABLES}
    env.update(BENCH_EVENTS=str(events), BENCH_LAYERS=str(layers), JAX_PLATFORMS="cpu",
               PYTHONUNBUFFERED="1", TORCHINDUCTOR_COMPILE_THREADS="1", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    if job == "torch":
        env["BENCH_TMP"] = str(work / "tmp")
    with (work / "launcher.log").open("wb") as out:
        proc = subprocess.Popen(argv(launcher, job, work), cwd=work, env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        killed: float | None = None
        while time.monotonic() < deadline:
            if killed is None:
                found = [e for e in read_events(events) if e["ev"] == "killed"]
                killed = found[0]["t"] if found else None
            else:
                log = first_step_log(launcher, work)
                if log is not None and log.exists() and STEP.search(log.read_bytes()):
                    return time.time() - killed
            if proc.poll() is not None:
                raise RepetitionError(f"{launcher} exited with {proc.returncode} first; see {work}/launcher.log")
            time.sleep(POLL_S)
        raise RepetitionError(f"no first step of attempt 1 after {timeout_s:.0f} s; see {work}")
    finally:
        stop_launcher(proc, events)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="jax,torch", help="comma-separated: jax, torch (default: both)")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions per job and launcher (default: 5)")
    parser.add_argument("--layers", type=int, default=16, help="layers of the JAX step (default: 16)")
    parser.add_argument("--timeout", type=float, default=400.0, help="bound on each repetition, seconds")
    args = parser.parse_args()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    root = RESULTS_DIR / f"bench-caches-{stamp}"
    samples: dict[tuple[str, str], list[float]] = {}
    errors: list[str] = []
    for job in args.jobs.split(","):
        for rep in range(args.repeat):
            for launcher in LAUNCHERS:
                work = root / f"{job}-{launcher}-r{rep}"
                try:
                    seconds = once(launcher, job, work, args.layers, args.timeout)
                except RepetitionError as error:
                    errors.append(f"{job} {launcher} r{rep}: {error}")
                    print(errors[-1], file=sys.stderr, flush=True)
                    continue
                samples.setdefault((job, launcher), []).append(seconds)
                print(f"{job} {launcher} r{rep}: {seconds:.2f} s from the kill to attempt 1's first step",
                      file=sys.stderr, flush=True)
    print("| job | elastic (s) | torchrun (s) | elastic/torchrun | samples elastic; torchrun |")
    print("|---|---|---|---|---|")
    for job in args.jobs.split(","):
        e, t = samples.get((job, "elastic"), []), samples.get((job, "torchrun"), [])
        me = statistics.median(e) if e else None
        mt = statistics.median(t) if t else None
        ratio = f"{me / mt:.2f}" if me is not None and mt else "-"
        cell = lambda m, xs: "-" if m is None else f"{m:.2f} ({len(xs)}/{args.repeat})"  # noqa: E731
        print(f"| {job} | {cell(me, e)} | {cell(mt, t)} | {ratio} | "
              f"{', '.join(f'{x:.2f}' for x in e)}; {', '.join(f'{x:.2f}' for x in t)} |")
    parts: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for job in args.jobs.split(","):
        for launcher in LAUNCHERS:
            for rep in range(args.repeat):
                found = start_up(launcher, root / f"{job}-{launcher}-r{rep}")
                if found is not None:
                    parts.setdefault((job, launcher), []).append(found)
    if parts:
        print("\nwhere attempt 1's start-up went on rank 0 (medians, s):")
        print("| job | launcher | import | initialize | first step (compile or cache load, and run) |")
        print("|---|---|---|---|---|")
        for (job, launcher), rows in parts.items():
            medians = [statistics.median(column) for column in zip(*rows)]
            print(f"| {job} | {launcher} | " + " | ".join(f"{m:.2f}" for m in medians) + " |")
    out = RESULTS_DIR / f"bench-caches-{stamp}.json"
    out.write_text(json.dumps({"created": stamp, "cpus": os.cpu_count(), "layers": args.layers,
                               "samples": {f"{j}/{l}": v for (j, l), v in samples.items()},
                               "start_up": {f"{j}/{l}": v for (j, l), v in parts.items()},
                               "errors": errors}, indent=2) + "\n")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
