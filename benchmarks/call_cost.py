"""The cost of one call, measured in a fresh interpreter: shared by the per-call benchmarks.

Each case runs in its own ``python -c PROGRAM CALLS REPEAT CASE``, with one
``ELASTIC_*`` variable set or removed (as a launcher would, or would not, set
it), and prints the best of ``REPEAT`` loops of ``CALLS`` calls in nanoseconds
per call.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence


def ns_per_call(program: str, case: str, calls: int, repeat: int, variable: str, value: str | None) -> float:
    """Run ``program`` for ``case`` with ``variable`` set to ``value`` (None: unset); its ns per call."""
    env = {k: v for k, v in os.environ.items() if k != variable}
    if value is not None:
        env[variable] = value
    done = subprocess.run(
        [sys.executable, "-c", program, str(calls), str(repeat), case],
        env=env, capture_output=True, text=True, timeout=600, check=True,
    )
    return float(done.stdout.strip())


def print_table(rows: Sequence[tuple[str, float]], calls: int, repeat: int) -> None:
    """One line per case: its name and its ns per call."""
    width = max(len(name) for name, _ in rows)
    print(f"{'case':<{width}}  ns/call  (best of {repeat} x {calls} calls)")
    for name, ns in rows:
        print(f"{name:<{width}}  {ns:7.1f}")
