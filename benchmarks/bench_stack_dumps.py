"""Benchmark stack dumps: how long ``py-spy dump --native`` takes against a plain dump.

A hung rank's stacks are dumped before it is killed, so the dump's time delays
the restart (bounded by ``elastic.node.probes.stacks.DUMP_TIMEOUT_S``). For each kind
of rank below, a process is started that hangs on a lock once it is ready, and
dumped ``--repeat`` times each way, interleaved: ``py-spy dump`` (Python frames),
``py-spy dump --native`` (what elastic takes now), and elastic's own
``dump_group`` (native, with the Python-only fallback), wall seconds:

- ``python``: a bare interpreter;
- ``torch``: torch imported and a gloo process group of one (libtorch's symbols);
- ``jax``: JAX imported and one jitted function run (jaxlib's symbols).

No asserts: figures, for the README and the changelog.

    python benchmarks/bench_stack_dumps.py --repeat 5
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

from elastic.node.probes.stacks import dump_group, find_py_spy  # noqa: E402

PRELUDES = {
    "python": "",
    "torch": (
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo', init_method='tcp://127.0.0.1:29541', rank=0, world_size=1)\n"
        "dist.all_reduce(torch.ones(4))\n"
    ),
    "jax": "import jax\njax.jit(lambda x: x + 1)(1.0).block_until_ready()\n",
}
HANG = (
    "import threading\n"
    "lock = threading.Lock()\n"
    "lock.acquire()\n"
    "print('ready', flush=True)\n"
    "lock.acquire()\n"
)


def _timed(argv: list[str]) -> float:
    started = time.monotonic()
    subprocess.run(argv, capture_output=True, check=True, timeout=120)
    return time.monotonic() - started


def bench(kind: str, repeat: int, py_spy: str) -> dict[str, list[float]]:
    rank = subprocess.Popen(
        [sys.executable, "-c", PRELUDES[kind] + HANG], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert rank.stdout is not None and rank.stdout.readline().strip() == "ready", kind
        times: dict[str, list[float]] = {"plain": [], "native": [], "dump_group": []}
        for _ in range(repeat):
            times["plain"].append(_timed([py_spy, "dump", "--pid", str(rank.pid)]))
            times["native"].append(_timed([py_spy, "dump", "--native", "--pid", str(rank.pid)]))
            started = time.monotonic()
            text = dump_group(py_spy, rank.pid)
            times["dump_group"].append(time.monotonic() - started)
            assert "native frames unavailable" not in text, text
        return times
    finally:
        os.killpg(rank.pid, signal.SIGKILL)
        rank.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--kinds", default="python,torch,jax")
    args = parser.parse_args()
    py_spy = find_py_spy()
    if py_spy is None:
        sys.exit("py-spy is not installed: pip install 'elastic-launch[debug]'")
    print(f"load average {os.getloadavg()[0]:.2f}; medians (max) of {args.repeat}, wall seconds")
    print(f"{'rank':<8} {'py-spy dump':>16} {'--native':>16} {'dump_group':>16} {'native / plain':>15}")
    for kind in args.kinds.split(","):
        times = bench(kind, args.repeat, py_spy)
        cells = [f"{statistics.median(v):.3f} ({max(v):.3f})" for v in times.values()]
        ratio = statistics.median(times["native"]) / statistics.median(times["plain"])
        print(f"{kind:<8} {cells[0]:>16} {cells[1]:>16} {cells[2]:>16} {ratio:>15.1f}")


if __name__ == "__main__":
    main()
