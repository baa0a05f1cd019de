"""Failure to the next attempt's first training step, with and without ``--prewarm``.

Runs ``examples/torch_ddp.py`` (2 CPU ranks, gloo) and ``examples/jax_orbax.py``
(2 CPU processes) under ``elastic run``, once cold (``--prewarm none``, elastic as
it is without the flag) and once with ``--prewarm`` naming the heavy imports,
interleaved. Rank 1 dies at a step of attempt 0: torch's SIGKILLs itself
(``--fail-at-step``; the clock starts when its log shows the line it prints
just before), JAX's is SIGKILLed from outside once its log shows
``--kill-at-step``. The clock stops when ``attempt-1/rank-0.log`` shows its
first step line (polled every 10 ms).

    JAX_PLATFORMS=cpu python benchmarks/bench_prewarm.py --repeat 3

It also times ``python -c 'import torch'`` and ``import jax`` alone: the
ceiling of what a prewarm can save.
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

# (example, its first-step line, how rank 1 dies, the modules to prewarm)
VARIANTS = {
    "torch": (re.compile(r"^rank=0 step=\d+/", re.MULTILINE), "torch"),
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


def once(workdir: Path, framework: str, prewarm: str, kill_at: int, timeout_s: float) -> float:
    """One run: seconds from rank 1's death to attempt 1's first step line on rank 0."""
    run_dir = workdir / "run"
    launcher_argv = [
        sys.executable, "-m", "elastic", "run", "--run-dir", str(run_dir), "--nproc-per-node", "2",
        "--max-restarts", "1", "--grace-period", "5", "--checkpoint-dir", str(workdir / "ckpt"),
        "--prewarm", prewarm, "--",
    ]
    if framework == "torch":
        command = [sys.executable, str(EXAMPLES / "torch_ddp.py"), "--output", str(workdir / "final.pt"),
                   "--steps", "200", "--checkpoint-every", "1", "--fail-at-step", str(kill_at)]
    else:
        command = [sys.executable, str(EXAMPLES / "jax_orbax.py"), "--output", str(workdir / "final.npz"),
                   "--steps", "200", "--step-seconds", "0.1", "--on-peer-loss", "exit",
                   "{resume_step?--resume-step}"]
    first_step, _ = VARIANTS[framework]
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    with (workdir / "launcher.log").open("wb") as out:
        launcher = subprocess.Popen(launcher_argv + command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
    try:
        rank1_log = run_dir / "attempt-0" / "rank-1.log"
        if framework == "torch":
            _wait(lambda: "SIGKILLing myself" in _read(rank1_log), timeout_s)
        else:
            def at_step() -> int | None:
                steps = [int(s) for s in re.findall(r"^step (\d+) ", _read(rank1_log), re.MULTILINE)]
                return _rank_pid(launcher.pid, 1) if steps and max(steps) >= kill_at else None

            os.kill(_wait(at_step, timeout_s, 0.02), signal.SIGKILL)
        died_at = time.monotonic()
        next_log = run_dir / "attempt-1" / "rank-0.log"
        _wait(lambda: first_step.search(_read(next_log)) is not None, timeout_s)
        return time.monotonic() - died_at
    finally:
        if launcher.poll() is None:  # two Ctrl-Cs: the launcher kills its ranks at once
            os.kill(launcher.pid, signal.SIGINT)
            time.sleep(0.5)
            if launcher.poll() is None:
                os.kill(launcher.pid, signal.SIGINT)
        launcher.wait(timeout_s)


def import_seconds(module: str) -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default="torch,jax", help="examples to run (default: torch,jax)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions per variant (default: 3)")
    parser.add_argument("--kill-at-step", type=int, default=5, help="rank 1 dies at this step (default: 5)")
    parser.add_argument("--timeout", type=float, default=240.0, help="bound on every wait, seconds (default: 240)")
    args = parser.parse_args()
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
                    seconds = once(Path(workdir), framework, prewarm, args.kill_at_step, args.timeout)
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
