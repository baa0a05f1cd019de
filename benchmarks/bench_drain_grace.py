"""Benchmark what a failure's drain costs when a survivor never exits on SIGTERM.

Two ranks on the local backend, ``--max-restarts 1``. On attempt 0 rank 0 ignores
SIGTERM (or, with ``--survivor jax``, has initialized JAX's distributed runtime, whose
preemption service catches SIGTERM); once both ranks are ready the benchmark SIGKILLs
rank 1 from outside. The launcher drains rank 0, which waits out its grace and is
SIGKILLed, then starts attempt 1, whose ranks print a wall-clock stamp as their first
line. Three settings, interleaved:

- ``before``: the survivors get 30 s, what they got before ``--failure-grace`` (the
  drain used ``--grace-period``, default 30 s); run as ``--failure-grace 30``.
- ``after``: the defaults (``--failure-grace`` 5 s). No ``--checkpoint-dir``: no write
  can be seen, so the survivor gets the whole grace.
- ``checkpoint-dir``: the defaults and a ``--checkpoint-dir`` nothing writes to: no
  write is under way, so the survivor is SIGKILLed at once.

Per setting, medians of: kill to the next attempt's first output line (the ranks' own
stamp; the headline figure), the journal's figure for the same span (``sign_of_life_s``
in report.json: failure observed to first output or heartbeat), and the relaunch
latency (``downtime_s``). No asserts: figures, for the README and the changelog.

    python benchmarks/bench_drain_grace.py --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RANK = BENCH_DIR / "grace_rank.py"
RESULTS_DIR = BENCH_DIR / "results"
SETTINGS = {"before": ["--failure-grace", "30"], "after": [], "checkpoint-dir": ["--checkpoint-dir", "{out}/ckpt"]}
METRICS = {
    "kill_to_first_line_s": "kill → next attempt's first output line",
    "sign_of_life_s": "failure → first output or heartbeat (journal)",
    "relaunch_latency_s": "relaunch latency (failure → ranks running)",
}
POLL_S = 0.01


def _wait_for(paths: list[Path], timeout_s: float) -> None:
    deadline_at = time.monotonic() + timeout_s
    while not all(p.exists() for p in paths):
        if time.monotonic() > deadline_at:
            raise TimeoutError(f"not there within {timeout_s:g}s: {[str(p) for p in paths]}")
        time.sleep(POLL_S)


def _first_line_at(run_dir: Path, attempt: int) -> float | None:
    stamps = []
    for log in (run_dir / f"attempt-{attempt}").glob("rank-*.log"):
        first = log.read_text(errors="replace").splitlines()[:1]
        if first and first[0].startswith("first line at "):
            stamps.append(float(first[0].removeprefix("first line at ")))
    return min(stamps, default=None)


def repetition(out: Path, setting: str, survivor: str, timeout_s: float) -> dict[str, Any]:
    """One run: start, wait for both ranks, SIGKILL rank 1, wait for the end; its figures."""
    pids, run_dir = out / "pids", out / "run"
    pids.mkdir(parents=True)
    argv = [
        sys.executable, "-m", "elastic", "run", "--run-dir", str(run_dir), "--log-format", "json",
        "--ranks", "none", "--nproc-per-node", "2", "--max-restarts", "1",
        *(option.format(out=out) for option in SETTINGS[setting]),
        "--", sys.executable, str(RANK), str(pids), survivor,
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "JAX_PLATFORMS": "cpu"}
    with (out / "launcher.stderr").open("wb") as stderr:
        launcher = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=stderr,
                                    start_new_session=True)
    try:
        _wait_for([pids / "rank-0.pid", pids / "rank-1.pid"], timeout_s)
        victim = int((pids / "rank-1.pid").read_text())
        killed_at = time.time()
        os.kill(victim, signal.SIGKILL)
        status = launcher.wait(timeout_s)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
    report = json.loads((run_dir / "report.json").read_text())
    first_line_at = _first_line_at(run_dir, 1)
    drains = [e for e in map(json.loads, (run_dir / "journal.jsonl").read_text().splitlines())
              if e.get("event") == "phase_changed" and e.get("dest") == "draining"]
    return {
        "setting": setting,
        "exit_status": status,
        "kill_to_first_line_s": None if first_line_at is None else first_line_at - killed_at,
        "sign_of_life_s": report.get("sign_of_life_s"),
        "relaunch_latency_s": report.get("downtime_s"),
        "drain_grace": drains[0].get("grace_s") if drains else None,
        "killed_at_grace": report["attempts"][0]["killed_at_grace"]["description"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--survivor", choices=("ignore", "jax"), default="ignore")
    parser.add_argument("--timeout", type=float, default=120.0, help="bound on every wait (s)")
    args = parser.parse_args()
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = RESULTS_DIR / f"grace-{stamp}"
    samples: list[dict[str, Any]] = []
    for index in range(args.repeat):
        for setting in SETTINGS:  # interleaved: the machine's load hits both alike
            sample = repetition(base / f"{setting}-{index}", setting, args.survivor, args.timeout)
            samples.append(sample)
            print(json.dumps(sample), file=sys.stderr, flush=True)
    print(f"survivor: {args.survivor}; medians of {args.repeat}, seconds")
    print("| metric | before (30 s to survivors) | after (--failure-grace default) | after, --checkpoint-dir |")
    print("|---|---|---|---|")
    for key, label in METRICS.items():
        cells = []
        for setting in SETTINGS:
            values = [s[key] for s in samples if s["setting"] == setting and s[key] is not None]
            cells.append(f"{statistics.median(values):.3f} ({len(values)}/{args.repeat})" if values else "-")
        print(f"| {label} | {' | '.join(cells)} |")
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / f"grace-{stamp}.json").write_text(json.dumps(
        {"survivor": args.survivor, "repeat": args.repeat, "samples": samples}, indent=2))


if __name__ == "__main__":
    main()
