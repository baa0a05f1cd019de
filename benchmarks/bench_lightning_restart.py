"""Time from a rank's SIGKILL to the next attempt's first training step, with examples/lightning_train.py.

Each repetition runs the Lightning recipe under ``python -m elastic run`` with
2 CPU ranks, SIGKILLs rank 1 from outside once its log shows ``--kill-at``,
and polls ``attempt-1/rank-0.log`` every 10 ms for its first ``step N`` line.
It prints each repetition's figures (the kill to the next attempt's start in
the journal, and to that first step; and, for comparison, the first attempt's
own start-up: its start in the journal to its first step) and their medians::

    python benchmarks/bench_lightning_restart.py --repeat 3

Extra ``elastic run`` options go after ``--``: ``... --repeat 3 -- --failure-grace 2``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import psutil

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "lightning_train.py"
STEP = re.compile(r"^step (\d+)$", re.MULTILINE)
POLL_S = 0.01
TIMEOUT_S = 600.0
T = TypeVar("T")


def rank_pid(launcher: int, rank: int) -> int | None:
    """The pid of ``rank`` under the launcher: the outermost process with its ``RANK`` and a run id."""
    found: dict[int, int] = {}
    try:
        tree = psutil.Process(launcher).children(recursive=True)
    except psutil.NoSuchProcess:
        return None
    for process in tree:
        try:
            env = process.environ()
            if "ELASTIC_RUN_ID" in env and env.get("RANK") == str(rank):
                found[process.pid] = process.ppid()
        except psutil.Error:
            continue
    outer = [pid for pid, parent in found.items() if parent not in found]
    return outer[0] if outer else None


def wait(predicate: Callable[[], T | None], what: str) -> T:
    """Poll ``predicate`` every 10 ms until it returns something truthy (bounded)."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(POLL_S)
    raise SystemExit(f"timed out waiting for {what}")


def steps_in(path: Path) -> list[int]:
    """The step numbers a rank's log shows so far."""
    try:
        return [int(n) for n in STEP.findall(path.read_text(errors="replace"))]
    except FileNotFoundError:
        return []


def once(work: Path, args: argparse.Namespace) -> tuple[float, float, float]:
    """One run, in seconds: kill → attempt 1 started, kill → attempt 1's first step on rank 0,
    and attempt 0 started → its first step on rank 0."""
    run_dir = work / "run"
    argv = [
        sys.executable, "-m", "elastic", "run", "--run-dir", str(run_dir), "--nproc-per-node", "2",
        "--max-restarts", "3", "--checkpoint-dir", str(work / "ckpt"), *args.elastic,
        "--", sys.executable, str(EXAMPLE), "--steps", str(args.steps), "--checkpoint-every", "4",
        "--output", str(work / "final.pt"), "{resume_from?--ckpt-path}",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELASTIC_", "TORCHELASTIC_"))}
    with (work / "launcher.log").open("wb") as log:
        launcher = subprocess.Popen(argv, cwd=work, env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        first_log, victim_log = run_dir / "attempt-0" / "rank-0.log", run_dir / "attempt-0" / "rank-1.log"
        wait(lambda: steps_in(first_log), "attempt 0's first step")
        cold_step = time.time()
        wait(lambda: max(steps_in(victim_log), default=0) >= args.kill_at, f"step {args.kill_at}")
        pid = wait(lambda: rank_pid(launcher.pid, 1), "rank 1's pid")
        os.kill(pid, signal.SIGKILL)  # by pid: a rank of the launcher this run started
        killed = time.time()
        survivor_log = run_dir / "attempt-1" / "rank-0.log"
        wait(lambda: steps_in(survivor_log), "attempt 1's first step")
        first_step = time.time()
        launcher.wait(TIMEOUT_S)
    finally:
        if launcher.poll() is None:
            os.kill(launcher.pid, signal.SIGKILL)  # by pid: the launcher this run started
            launcher.wait()
    if launcher.returncode != 0:
        raise SystemExit(f"elastic exited {launcher.returncode}; see {work / 'launcher.log'}")
    events = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines() if line]
    started = {e["attempt"]: datetime.fromisoformat(e["time"]).timestamp() for e in events if e["event"] == "attempt_started"}
    return started[1] - killed, first_step - killed, cold_step - started[0]


def main() -> int:
    """Run the repetitions and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs to take the median of (default: 3)")
    parser.add_argument("--steps", type=int, default=30, help="the recipe's --steps (default: 30)")
    parser.add_argument("--kill-at", type=int, default=14, help="SIGKILL rank 1 at this step (default: 14)")
    parser.add_argument("elastic", nargs="*", help="extra elastic run options, after --")
    args = parser.parse_args()
    results = []
    for index in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="bench-lightning-") as work:
            relaunch, first, cold = once(Path(work), args)
        results.append((relaunch, first, cold))
        print(
            f"run {index}: kill -> attempt 1 started {relaunch:.2f}s, -> first step {first:.2f}s"
            f" (attempt 0: start -> first step {cold:.2f}s)",
            flush=True,
        )
    relaunch, first, cold = (statistics.median(column) for column in zip(*results))
    print(
        f"median of {args.repeat}: kill -> attempt 1 started {relaunch:.2f}s, -> first step {first:.2f}s"
        f" (attempt 0: start -> first step {cold:.2f}s); load average {os.getloadavg()[0]:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
