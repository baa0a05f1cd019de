"""Benchmark stall detection from the ranks' output: how fast, how costly, and no false alarms.

Three parts, on the local backend, medians of ``--repeat`` runs:

- **Reading cost**: CPU microseconds per output line for the node's step reader
  (the built-in patterns over a mix of step lines, tqdm redraws and NCCL
  warnings, split from bytes as the node does; and over lines with no step),
  best of ``--repeat`` passes.
- **Detection**: two ranks; rank 1 prints 20 steps (0.05 s each), then only NCCL-style
  warnings, never a step; no flags beyond ``--stall-floor 5``. The figure is from
  rank 1's last step (its own wall-clock stamp) to the journal's ``worker_failed``
  (kind hung, ``stalled: ...``).
- **Slow saves**: one rank of 0.2 s steps writes a checkpoint for 10× (2 s) or 60×
  (12 s) a step, into ``--checkpoint-dir`` or elsewhere, with the defaults or with the
  floor out of the way (``--stall-floor 0.01``); the count of runs flagged stalled.

No asserts: figures, for the README and the changelog.

    python benchmarks/bench_stall.py --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RANK = BENCH_DIR / "stall_rank.py"
TIMEOUT_S = 120.0

# (name, extra flags, save seconds, into --checkpoint-dir)
SAVES = [
    ("defaults, 10× save into --checkpoint-dir", [], 2.0, True),
    ("defaults, 10× save elsewhere", [], 2.0, False),
    ("--stall-floor 0.01, 10× save elsewhere (K rule)", ["--stall-floor", "0.01"], 2.0, False),
    ("--stall-floor 0.01, 60× save into --checkpoint-dir (save rule)", ["--stall-floor", "0.01"], 12.0, True),
    ("--stall-floor 0.01, 60× save elsewhere (control)", ["--stall-floor", "0.01"], 12.0, False),
]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def reading_cost_us(lines: int, repeat: int, *, steps: bool = True) -> float:
    """CPU microseconds per line (process time: other load on the host does not count)."""
    sys.path.insert(0, str(REPO_ROOT))
    from elastic.core.training.output_steps import StepReader
    from elastic.node.watchers.steps import LineSplitter

    mix = [
        b"step 120 loss 2.31\n",
        b"\r 12%|\xe2\x96\x88         | 120/1000 [00:31<03:49,  3.84it/s]",
        b"NCCL WARN Call to connect returned Connection refused, retrying\n",
        b"[titan] 2026-12-03 12:00:00,000 - root - INFO - step: 120  loss:  5.1234  memory: 40.1GiB\n",
        b"Epoch 2:  40%|\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88      | 4/10 [00:01<00:01,  3.20it/s, v_num=0]\n",
        b"INFO some unrelated log line with a number 42 in it\n",
    ]
    if not steps:
        mix = [m for m in mix if b"NCCL" in m or b"INFO some" in m]
    data = b"".join(mix[i % len(mix)] for i in range(lines))
    count = data.count(b"\n") + data.count(b"\r")
    best = float("inf")
    for _ in range(repeat):
        reader, splitter = StepReader(), LineSplitter()
        started = time.process_time()
        for offset in range(0, len(data), 1 << 16):
            for line in splitter.feed(data[offset:offset + (1 << 16)]):
                if line:
                    reader.read(line)
        best = min(best, time.process_time() - started)
    return best / count * 1e6


def _journal(run_dir: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines() if line.strip()]


def _stalls(run_dir: Path) -> list[dict[str, object]]:
    return [e for e in _journal(run_dir)
            if e.get("event") == "worker_failed" and "stalled" in str(e.get("message"))]


def _run(argv: list[str], run_dir: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "elastic", "run", "--run-dir", str(run_dir), "--log-format", "json", *argv],
        env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=TIMEOUT_S, check=False,
    )


def detection_s(tmp: Path, index: int) -> float | None:
    run_dir, mark = tmp / f"detect-{index}", tmp / f"detect-{index}.mark"
    _run(["--nproc-per-node", "2", "--stall-floor", "5", "--",
          sys.executable, str(RANK), "stall", "0.05", str(mark)], run_dir)
    stalls = _stalls(run_dir)
    if not stalls or not mark.exists():
        return None
    detected = datetime.fromisoformat(str(stalls[0]["time"])).timestamp()
    return detected - float(mark.read_text())


def flagged(tmp: Path, index: int, name: str, flags: list[str], save_s: float, into: bool) -> bool:
    run_dir = tmp / f"save-{index}-{abs(hash(name))}"
    ckpt = tmp / f"ckpt-{index}-{abs(hash(name))}"
    saves = ckpt / "step-20" if into else tmp / f"elsewhere-{index}-{abs(hash(name))}"
    options = ["--nproc-per-node", "1", *flags, *(["--checkpoint-dir", str(ckpt)] if into else [])]
    _run([*options, "--", sys.executable, str(RANK), "save", "0.2", str(save_s), str(saves)], run_dir)
    return bool(_stalls(run_dir))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--lines", type=int, default=200_000)
    args = parser.parse_args()
    mixed = reading_cost_us(args.lines, args.repeat)
    other = reading_cost_us(args.lines, args.repeat, steps=False)
    print(f"reading cost (CPU, best of {args.repeat} x {args.lines} lines): {mixed:.2f} µs per line "
          f"for a mix of step lines and others, {other:.2f} µs per line without a step")
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        samples = [detection_s(tmp, i) for i in range(args.repeat)]
        found = [s for s in samples if s is not None]
        median = f"{statistics.median(found):.2f}" if found else "n/a"
        spread = f"{min(found):.2f}–{max(found):.2f}" if found else "n/a"
        print(f"stall detection, --stall-floor 5, output continuing: median {median} s "
              f"(range {spread}, detected {len(found)}/{len(samples)})")
        for name, flags, save_s, into in SAVES:
            hits = sum(flagged(tmp, i, name, flags, save_s, into) for i in range(args.repeat))
            print(f"{name}: flagged stalled {hits}/{args.repeat}")


if __name__ == "__main__":
    main()
