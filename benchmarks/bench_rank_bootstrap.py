"""What the rank bootstrap (``--rank-bootstrap on``) costs a rank that never imports JAX.

For each interpreter, runs ``python -c pass`` ``--repeat`` times with and without
the bootstrap folder first on ``PYTHONPATH``, interleaved, and reports the median
wall time of each, their difference, and what ``-X importtime`` charges to the
``sitecustomize`` import with the bootstrap (ours plus the one it chains to)
against the interpreter's own ``sitecustomize`` without it (median over
``--repeat`` runs, microseconds, cumulative).

    python benchmarks/bench_rank_bootstrap.py --repeat 200 --python /usr/bin/python3 --python python3.12
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from elastic.worker.bootstrap import BOOTSTRAP_DIR  # noqa: E402


def _env(bootstrap: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if bootstrap:
        env["PYTHONPATH"] = BOOTSTRAP_DIR
    return env


def _wall_s(python: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([python, "-c", "pass"], env=env, check=True)
    return time.perf_counter() - started


def _sitecustomize_us(python: str, env: dict[str, str]) -> int:
    """Cumulative microseconds -X importtime charges to the top-level ``sitecustomize`` import (0: none)."""
    done = subprocess.run([python, "-X", "importtime", "-c", "pass"], env=env, capture_output=True, text=True,
                          check=True)
    found: list[tuple[int, int]] = []  # (indentation, cumulative us) of each sitecustomize line
    for line in done.stderr.splitlines():
        fields = line.split("|")
        if len(fields) == 3 and fields[2].strip() == "sitecustomize":
            found.append((len(fields[2]) - len(fields[2].lstrip()), int(fields[1])))
    return min(found)[1] if found else 0  # the least indented: the one site imported


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--python", action="append", help="interpreter(s); default: this one")
    args = parser.parse_args()
    for python in args.python or [sys.executable]:
        walls: dict[bool, list[float]] = {False: [], True: []}
        imports: dict[bool, list[int]] = {False: [], True: []}
        for _ in range(args.repeat):
            for bootstrap in (False, True):
                walls[bootstrap].append(_wall_s(python, _env(bootstrap)))
                imports[bootstrap].append(_sitecustomize_us(python, _env(bootstrap)))
        version = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True,
                                 text=True, check=True).stdout.strip()
        without, with_ = (statistics.median(walls[b]) * 1000 for b in (False, True))
        print(f"{python} (Python {version}), median of {args.repeat}:")
        print(f"  python -c pass: {without:.2f} ms without, {with_:.2f} ms with the bootstrap "
              f"({with_ - without:+.2f} ms)")
        print(f"  -X importtime sitecustomize (cumulative): {statistics.median(imports[False]):.0f} us without, "
              f"{statistics.median(imports[True]):.0f} us with")


if __name__ == "__main__":
    main()
