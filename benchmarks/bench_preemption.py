"""What one ``elastic.worker.preemption_requested()`` call costs in a tight loop.

Prints nanoseconds per call (best of --repeat runs of --calls calls) for:

- no launcher (``ELASTIC_PREEMPTION_FILE`` unset): an environment lookup;
- a launcher, no notice yet (the file absent): one ``stat`` of a local path, the
  case every training step pays;
- after the notice (the file there): a global read, once it has been seen;
- a plain empty Python function, for scale.

Each case runs in a fresh interpreter, as a training script would.

    python benchmarks/bench_preemption.py [--calls 200000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile

from call_cost import ns_per_call, print_table

_CASE = """
import sys, time
from elastic.worker import preemption_requested
calls, repeat = int(sys.argv[1]), int(sys.argv[2])
def nothing():
    return False
check = nothing if sys.argv[3] == "empty" else preemption_requested
best = float("inf")
for _ in range(repeat):
    started = time.perf_counter_ns()
    for _ in range(calls):
        check()
    best = min(best, (time.perf_counter_ns() - started) / calls)
print(f"{best:.1f}")
"""


def _measure(case: str, calls: int, repeat: int, notice_file: str | None) -> float:
    return ns_per_call(_CASE, case, calls, repeat, "ELASTIC_PREEMPTION_FILE", notice_file)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        absent, present = os.path.join(tmp, "rank-0.preempt"), os.path.join(tmp, "rank-1.preempt")
        with open(present, "w") as notice:
            notice.write('{"source": "signal SIGUSR1", "deadline": 0, "signal": "SIGTERM"}')
        rows = [
            ("preemption_requested(), no launcher", _measure("check", args.calls, args.repeat, None)),
            ("preemption_requested(), no notice yet", _measure("check", args.calls, args.repeat, absent)),
            ("preemption_requested(), after the notice", _measure("check", args.calls, args.repeat, present)),
            ("an empty Python function, for scale", _measure("empty", args.calls, args.repeat, None)),
        ]
    print_table(rows, args.calls, args.repeat)


if __name__ == "__main__":
    main()
