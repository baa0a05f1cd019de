"""What one ``elastic.heartbeat()`` call costs in a tight loop, with and without a launcher.

Prints nanoseconds per call (best of --repeat runs of --calls calls) for:

- no launcher (``ELASTIC_HEARTBEAT_FILE`` unset): a no-op;
- a launcher: calls rate-limited to one file write per 0.1 s, so the loop
  measures the common case, a clock read and a comparison, plus the writes
  that fall inside it;
- a launcher, with ``compute_s`` given (summed on every call, for straggler reports);
- a plain empty Python function, for scale.

Each case runs in a fresh interpreter, as a training script would.

    python benchmarks/bench_heartbeat.py [--calls 1000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile

from call_cost import ns_per_call, print_table

_CASE = """
import sys, time
import elastic
calls, repeat = int(sys.argv[1]), int(sys.argv[2])
def nothing(step=None):
    pass
beat = nothing if sys.argv[3] == "empty" else elastic.heartbeat
best = float("inf")
for _ in range(repeat):
    started = time.perf_counter_ns()
    if sys.argv[3] == "compute":
        for step in range(calls):
            beat(step=step, compute_s=0.001)
    else:
        for step in range(calls):
            beat(step=step)
    best = min(best, (time.perf_counter_ns() - started) / calls)
print(f"{best:.1f}")
"""


def _measure(case: str, calls: int, repeat: int, heartbeat_file: str | None) -> float:
    return ns_per_call(_CASE, case, calls, repeat, "ELASTIC_HEARTBEAT_FILE", heartbeat_file)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [
            ("elastic.heartbeat(step=...), no launcher", _measure("heartbeat", args.calls, args.repeat, None)),
            ("elastic.heartbeat(step=...), launcher", _measure(
                "heartbeat", args.calls, args.repeat, os.path.join(tmp, "rank-0.heartbeat"))),
            ("elastic.heartbeat(step=..., compute_s=...), launcher", _measure(
                "compute", args.calls, args.repeat, os.path.join(tmp, "rank-0.heartbeat"))),
            ("an empty Python function, for scale", _measure("empty", args.calls, args.repeat, None)),
        ]
    print_table(rows, args.calls, args.repeat)


if __name__ == "__main__":
    main()
