"""Failure to the next attempt's first training step, with and without ``--prewarm``.

Runs ``examples/torch_ddp.py`` (2 CPU ranks, gloo) and ``examples/jax_orbax.py``
(2 CPU processes) under ``elastic run``, once cold (``--prewarm none``, elastic as
it is without the flag) and once with ``--prewarm`` naming the heavy imports,
interleaved. Rank 1 of attempt 0 is SIGKILLed from outside ``--kill-after``
seconds after the launcher started (once it has shown a step), late enough
for the warm interpreters (started ``--prewarm-delay`` seconds after their
ranks) to have done their imports, as they would have in a run that fails
minutes or hours in. The clock starts at the SIGKILL and stops when
``attempt-1/rank-0.log`` shows its first step line (polled every 10 ms).

    JAX_PLATFORMS=cpu python benchmarks/bench_prewarm.py --repeat 3

It also times ``python -c 'import torch'`` and ``import jax`` alone: the
ceiling of what a prewarm can save.

``--rank0-ddp`` measures instead a DDP script as most are written, where only rank 0
prints its steps (``benchmarks/rank0_ddp.py``: gloo, ``torch.save`` from rank 0): kill
→ training again (rank 1 SIGKILLed ``--kill-after`` seconds in, until attempt 1's rank 0
prints its first step), under elastic with no flag (its ranks' successors learned
once past start-up), elastic with ``--prewarm-memory 0`` (cold) and torchrun, interleaved
in the same run; medians and the ratios to torchrun.

    python benchmarks/bench_prewarm.py --rank0-ddp --repeat 3 --kill-after 20
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = REPO_ROOT / "examples"
T = TypeVar("T")

# example: (its step lines, the modules to prewarm)
VARIANTS = {
    "torch": (re.compile(r"^rank=\d step=\d+/", re.MULTILINE), "torch"),
    "jax": (re.compile(r"^step \d+ ", re.MULTILINE), "jax,orbax.checkpoint"),
}


def _wait(predicate: Callable[[], T | None], timeout_s: float, interval_s: float = 0.01) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise TimeoutError(f"nothing after {timeout_s}s")


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _rank_pid(launcher: int, rank: int) -> int | None:
    """Attempt 0's rank under ``launcher`` (started cold: its environment says RANK=rank)."""
    import psutil

    for child in psutil.Process(launcher).children(recursive=True):
        try:
            env = child.environ()
            if env.get("RANK") == str(rank) and "ELASTIC_RUN_ID" in env and psutil.Process(child.ppid()).environ().get("RANK") is None:
                return child.pid
        except psutil.Error:
            continue
    return None


def once(workdir: Path, framework: str, prewarm: str, kill_after_s: float, delay_s: float, timeout_s: float) -> float:
    """One run: seconds from rank 1's death to attempt 1's first step line on rank 0."""
    run_dir = workdir / "run"
    launcher_argv = [
        sys.executable, "-m", "elastic", "run", "--run-dir", str(run_dir), "--nproc-per-node", "2",
        "--max-restarts", "1", "--grace-period", "5", "--checkpoint-dir", str(workdir / "ckpt"),
        "--prewarm", prewarm, "--prewarm-delay", str(delay_s), "--",
    ]
    if framework == "torch":
        command = [sys.executable, str(EXAMPLES / "torch_ddp.py"), "--output", str(workdir / "final.pt"),
                   "--steps", "100000", "--checkpoint-every", "1"]
    else:
        command = [sys.executable, str(EXAMPLES / "jax_orbax.py"), "--output", str(workdir / "final.npz"),
                   "--steps", "100000", "--step-seconds", "0.1", "--on-peer-loss", "exit",
                   "{resume_step?--resume-step}"]
    step_line, _ = VARIANTS[framework]
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    started_at = time.monotonic()
    with (workdir / "launcher.log").open("wb") as out:
        launcher = subprocess.Popen(launcher_argv + command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
    try:
        rank1_log = run_dir / "attempt-0" / "rank-1.log"
        def due() -> int | None:
            if time.monotonic() - started_at < kill_after_s or step_line.search(_read(rank1_log)) is None:
                return None
            return _rank_pid(launcher.pid, 1)

        os.kill(_wait(due, timeout_s + kill_after_s, 0.02), signal.SIGKILL)
        died_at = time.monotonic()
        next_log = run_dir / "attempt-1" / "rank-0.log"
        _wait(lambda: step_line.search(_read(next_log)) is not None, timeout_s)
        return time.monotonic() - died_at
    finally:
        if launcher.poll() is None:  # two Ctrl-Cs: the launcher kills its ranks at once
            os.kill(launcher.pid, signal.SIGINT)
            time.sleep(0.5)
            if launcher.poll() is None:
                os.kill(launcher.pid, signal.SIGINT)
        launcher.wait(timeout_s)


RANK0_LAUNCHERS = ("elastic", "elastic-cold", "torchrun")
RANK0_STEP = re.compile(r"^step \d+$", re.MULTILINE)


def _rank0_argv(launcher: str, workdir: Path) -> list[str]:
    script = [str(Path(__file__).resolve().parent / "rank0_ddp.py"), str(workdir)]
    if launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
                "--nproc-per-node", "2", "--max-restarts", "1", "--log-dir", str(workdir / "torchrun"),
                "--redirects", "3", *script]
    cold = ["--prewarm-memory", "0"] if launcher == "elastic-cold" else []
    return [sys.executable, "-m", "elastic", "run", "--run-dir", str(workdir / "run"), "--nproc-per-node", "2",
            "--max-restarts", "1", *cold, "--", sys.executable, *script]


def _rank0_log(launcher: str, workdir: Path, attempt: int) -> Path | None:
    """Rank 0's output of ``attempt``, once its launcher made the file."""
    if launcher != "torchrun":
        return workdir / "run" / f"attempt-{attempt}" / "rank-0.log"
    found = sorted(workdir.glob(f"torchrun/*/attempt_{attempt}/0/stdout.log"))
    return found[0] if found else None


def _first_rank_1(launcher: int) -> int | None:
    """Attempt 0's rank 1 under ``launcher`` (RANK=1, TORCHELASTIC_RESTART_COUNT=0, its parent no rank)."""
    import psutil

    for child in psutil.Process(launcher).children(recursive=True):
        try:
            env = child.environ()
            if (env.get("RANK") == "1" and env.get("TORCHELASTIC_RESTART_COUNT") == "0"
                    and psutil.Process(child.ppid()).environ().get("RANK") is None):
                return child.pid
        except psutil.Error:
            continue
    return None


def once_rank0(workdir: Path, launcher: str, kill_after_s: float, timeout_s: float) -> tuple[float, str]:
    """One run of ``rank0_ddp.py``: seconds from rank 1's SIGKILL to attempt 1's first step line on
    rank 0, and (elastic) which ranks of attempt 1 started warm."""
    env = {**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    started_at = time.monotonic()
    with (workdir / "launcher.log").open("wb") as out:
        process = subprocess.Popen(_rank0_argv(launcher, workdir), stdout=out, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True, cwd=workdir)
    try:
        def due() -> int | None:
            log = _rank0_log(launcher, workdir, 0)
            if time.monotonic() - started_at < kill_after_s or log is None or not RANK0_STEP.search(_read(log)):
                return None
            return _first_rank_1(process.pid)

        os.kill(_wait(due, timeout_s + kill_after_s, 0.02), signal.SIGKILL)
        died_at = time.monotonic()

        def trained() -> bool:
            log = _rank0_log(launcher, workdir, 1)
            return log is not None and RANK0_STEP.search(_read(log)) is not None

        _wait(trained, timeout_s)
        seconds = time.monotonic() - died_at
        process.wait(timeout_s)
        warm = ""
        journal = workdir / "run" / "journal.jsonl"
        if journal.exists():
            import json

            started = [e for e in map(json.loads, journal.read_text().splitlines()) if e["event"] == "ranks_started"]
            warm = f"warm {started[-1]['warm']}, cold {started[-1]['cold']}" if started else "all cold"
        return seconds, warm
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: the launcher and its ranks
            process.wait(timeout_s)


def rank0_ddp(repeat: int, kill_after_s: float, timeout_s: float) -> None:
    """Kill → training again for a script whose only rank 0 prints, beside torchrun in the same run."""
    results: dict[str, list[float]] = {}
    for repetition in range(repeat):
        for launcher in RANK0_LAUNCHERS:
            with tempfile.TemporaryDirectory(prefix="bench-rank0-") as workdir:
                seconds, warm = once_rank0(Path(workdir), launcher, kill_after_s, timeout_s)
            results.setdefault(launcher, []).append(seconds)
            print(f"repetition {repetition}: {launcher}: {seconds:.2f}s from rank 1's death to attempt 1's "
                  f"first step{f' ({warm})' if warm else ''}", flush=True)
    baseline = statistics.median(results["torchrun"])
    print("| launcher | kill → training again, median (s) | / torchrun | samples |")
    print("|---|---|---|---|")
    for launcher, samples in results.items():
        median = statistics.median(samples)
        print(f"| {launcher} | {median:.2f} | {median / baseline:.2f} | {', '.join(f'{s:.2f}' for s in samples)} |")


def import_seconds(module: str) -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default="torch,jax", help="examples to run (default: torch,jax)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions per variant (default: 3)")
    parser.add_argument("--kill-after", type=float, default=40.0,
                        help="seconds from the launcher's start to rank 1's SIGKILL (default: 40)")
    parser.add_argument("--prewarm-delay", type=float, default=5.0, help="elastic's --prewarm-delay (default: 5)")
    parser.add_argument("--timeout", type=float, default=240.0, help="bound on every wait, seconds (default: 240)")
    parser.add_argument("--rank0-ddp", action="store_true",
                        help="kill → training again of a DDP script whose only rank 0 prints, elastic beside torchrun")
    args = parser.parse_args()
    if args.rank0_ddp:
        rank0_ddp(args.repeat, args.kill_after, args.timeout)
        return 0
    frameworks = args.frameworks.split(",")
    for module in frameworks:
        samples = [import_seconds(module) for _ in range(args.repeat)]
        print(f"python -c 'import {module}': median {statistics.median(samples):.2f}s, "
              f"samples {', '.join(f'{s:.2f}' for s in samples)}", flush=True)
    results: dict[tuple[str, str], list[float]] = {}
    for repetition in range(args.repeat):
        for framework in frameworks:
            for prewarm in ("none", VARIANTS[framework][1]):
                with tempfile.TemporaryDirectory(prefix="bench-prewarm-") as workdir:
                    seconds = once(Path(workdir), framework, prewarm, args.kill_after, args.prewarm_delay, args.timeout)
                results.setdefault((framework, prewarm), []).append(seconds)
                print(f"repetition {repetition}: {framework} --prewarm {prewarm}: {seconds:.2f}s "
                      "from rank 1's death to attempt 1's first step", flush=True)
    print("median seconds from rank 1's death to attempt 1's first step (rank 0):")
    for (framework, prewarm), samples in results.items():
        print(f"  {framework:5} --prewarm {prewarm:20} {statistics.median(samples):6.2f}"
              f"  samples {', '.join(f'{s:.2f}' for s in samples)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
