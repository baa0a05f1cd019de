"""What the driver's bookkeeping costs when a big group fails: 1,000 nodes x 8 ranks.

Runs the real :class:`elastic.run.driver.Driver` over the fake backend of
:mod:`elastic.testing` (no processes, no Ray), with a real run directory on
disk (journal fsynced, ``state.json`` replaced atomically) and structlog
rendering JSON lines to ``/dev/null``. One repetition:

1. the driver plans and launches attempt 0: 1,000 fake nodes x 8 ranks;
2. **failure**: rank 0 exits 1; the driver drains the group, the fake reports
   the other 7,999 ranks' exits at once (collateral), the driver journals
   them, plans and launches attempt 1. Measured from the failing exit to
   attempt 1 being launched;
3. **success**: every rank of attempt 1 exits 0; the driver drains, finishes
   and writes the report. Measured from the first exit to ``run()`` returning.

Each phase reports CPU time (``time.process_time``: every thread of the
process, the driver's included) and wall time, median of ``--repeat``.

    python benchmarks/bench_bookkeeping.py [--nodes 1000] [--nproc 8] [--repeat 5]

Figures on the shared 2-core development VM (ext4, Python 3.11), seconds,
before (median of 3) and after (median of 5) issue 9's bookkeeping changes:

=======================================  ===========  ===========
phase (1,000 nodes x 8 ranks)            before       after
                                         CPU / wall   CPU / wall
=======================================  ===========  ===========
1 failure + 7,999 collateral + relaunch  30.2 / 43.3  0.63 / 0.71
8,000 ranks exit 0 + finish              22.0 / 32.3  0.52 / 0.65
=======================================  ===========  ===========

Before, every exit cost a scan of the attempt's failures (root cause), a copy
of every attempt's failures (``state.json``'s restart count), one journal
fsync per record and one ``state.json`` replace (write, fsync, rename); the
relaunch looked each rank's node up by scanning the nodes. After: the root
cause is kept as failures come in, ended attempts' summaries are kept,
observations queued together are journaled with one fsync and one
``state.json``, collateral exits past the first 16 are counted per node, and
nodes are found by id. What is left is linear: 8,000 worker specs for the
relaunch, 8,000 ``worker_exited`` lines on success.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import structlog

from elastic.core.config import RunConfig
from elastic.run.driver import Driver, RunResult
from elastic.run.journal import RunDirectory
from elastic.core.messages import Outcome
from elastic.core.plan import NodeSlot
from elastic.testing import FakeBackend, FakeClock

_TIMEOUT_S = 600.0


def _quiet_logging(sink: object) -> None:
    """JSON lines, as a run without a terminal renders them, into ``/dev/null``."""
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.JSONRenderer(),
        ],
        logger_factory=structlog.PrintLoggerFactory(sink),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )


def one_run(root: Path, nodes: int, nproc: int) -> dict[str, tuple[float, float]]:
    """One repetition: ``{phase: (cpu_s, wall_s)}``."""
    backend = FakeBackend(
        nodes=[NodeSlot(f"node-{i:04d}", f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", nproc)
               for i in range(nodes)],
        clock=FakeClock(),
    )
    config = RunConfig(
        command=("train",), run_id="bench", run_dir=root / "run", nproc_per_node=nproc,
        min_nodes=nodes, max_nodes=nodes, max_restarts=1,
    )
    driver = Driver(config, backend, RunDirectory.create(config.run_dir),
                    base_env={"HOME": "/home/bench", "PATH": "/usr/bin:/bin"}, clock=backend.clock)
    results: list[RunResult] = []
    thread = threading.Thread(target=lambda: results.append(driver.run()), daemon=True)
    thread.start()
    world = nodes * nproc
    backend.wait_for_attempt(0, timeout_s=_TIMEOUT_S)

    cpu, wall = time.process_time(), time.perf_counter()
    backend.exit(0, 1)  # rank 0 fails; the drain ends the other ranks as collateral
    backend.wait_for_attempt(1, timeout_s=_TIMEOUT_S)
    figures = {"failure": (time.process_time() - cpu, time.perf_counter() - wall)}

    cpu, wall = time.process_time(), time.perf_counter()
    for rank in range(world):
        backend.exit(rank, 0)
    thread.join(_TIMEOUT_S)
    figures["success"] = (time.process_time() - cpu, time.perf_counter() - wall)
    if thread.is_alive() or not results or results[0].outcome is not Outcome.SUCCEEDED:
        raise RuntimeError(f"the run did not succeed: {results}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--nproc", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where run directories go (default: a temporary one)")
    args = parser.parse_args()
    samples: dict[str, list[tuple[float, float]]] = {"failure": [], "success": []}
    with open(os.devnull, "w") as sink, tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        _quiet_logging(sink)
        for n in range(args.repeat):
            for phase, figures in one_run(Path(tmp) / str(n), args.nodes, args.nproc).items():
                samples[phase].append(figures)
    world = args.nodes * args.nproc
    names = {
        "failure": f"1 failure + {world - 1:,} collateral + relaunch",
        "success": f"{world:,} ranks exit 0 + finish",
    }
    width = max(len(name) for name in names.values())
    print(f"{'phase (' + str(args.nodes) + ' x ' + str(args.nproc) + ')':<{width}}  "
          f"CPU s   wall s   (median of {args.repeat})")
    for phase, rows in samples.items():
        cpu = statistics.median(c for c, _ in rows)
        wall = statistics.median(w for _, w in rows)
        print(f"{names[phase]:<{width}}  {cpu:6.3f}  {wall:7.3f}")


if __name__ == "__main__":
    main()
