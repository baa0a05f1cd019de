"""What the driver's bookkeeping costs when a big group fails, and per round of step reports: 1,000 nodes x 8 ranks.

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

4. **steps** (a run of its own): while attempt 0 runs, ``--rounds`` rounds of
   step reports, one from each node holding its ranks' steps and full-window
   step times, as each node's step watch sends them at most every second (every 5 s
   before issue 35). The
   reports are built first, then handed to the driver's sink at once; measured
   from the first to the round's last one handled, which names a new straggler
   (a rank of the last node at 3 s a step) so that its ``straggler_seen`` marks
   the round's end in the journal (one record, one fsync). A first round, every
   rank's first report, is not counted.

With ``--tails`` failed ranks carry 20-line log tails, what failure signatures
(:mod:`elastic.core.diagnosis.signatures`) read: the drained ranks' are NCCL's abort
lines, the failing rank's ends in a CUDA out-of-memory error (``root``) or is NCCL's abort
too (``symptom``: the drain then reads a bounded few of the drained ranks for the cause).
Before and after issue 20 (failure signatures, root cause versus symptom, identical
failures, teardown, node health), CPU s, median of 9, three runs each, interleaved on the
same VM (``before``: the commit before, with this benchmark and ``elastic.testing``'s tails):

============================  ===================  ===================
phase, ``--tails``            before               after
============================  ===================  ===================
failure, ``root``             0.289 0.290 0.291    0.296 0.300 0.304
success, ``root``             0.225 0.233 0.233    0.234 0.237 0.250
failure, ``symptom``          0.287 0.298 0.298    0.299 0.301 0.306
success, ``symptom``          0.226 0.229 0.229    0.226 0.227 0.237
============================  ===================  ===================

Medians +3 %, +2 %, +1 % and 0: about 1 us a rank exit on some 37. A failing rank's tail
is read in about 8 us (this one) to 70 us (20 lines of NCCL's text); a drained rank's is
not read unless the root cause is a symptom, and then at most 32 of them.

Each phase reports CPU time (``time.process_time``: every thread of the
process, the driver's included) and wall time, median of ``--repeat`` (steps:
of every round timed).

    python benchmarks/bench_bookkeeping.py [--nodes 1000] [--nproc 8] [--repeat 5] [--rounds 5]
        [--tails root|symptom]
        [--phases failure,success,steps]

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

Issue 35 (item 8): nodes send every second, not every 5 s; a round costs what it did (CPU s,
median of 5 x 5 rounds, three interleaved runs on the loaded VM: 0.080 0.082 0.078 before,
0.075 0.073 0.080 after), so the driver spends five times as much a second on reports while
every rank's step changes: at 8,000 ranks about 0.08 s a second here, 0.025 s on a quiet VM.

A round of step reports, before and after issue 18 (item 7), median of 3 x 5
rounds, in one run of both on the same VM (seconds, CPU / wall):

==============================  =============  =============
world                           before         after
==============================  =============  =============
1,000 nodes x 8 = 8,000 ranks   1.03 / 1.04    0.025 / 0.026
2,000 nodes x 8 = 16,000 ranks  4.20 / 4.25    0.052 / 0.052
==============================  =============  =============

Before, each report (8 ranks) copied every rank's step into a fresh mapping,
rebuilt every timed rank's step time and sorted them all for the stragglers'
medians: O(world log world) a report, O(nodes x world log world) a round, so
at 16,000 ranks a round took most of the 5 s between reports and the driver
fell behind. After, a report updates its own ranks in place, in a sorted
multiset of step times whose middle gives each rank's median of the others
(``elastic.core.training.stragglers.SortedTimes``): about 22 us a report at any world
size, 1 % of the report interval at 16,000 ranks. The per-rank mappings the
metrics read are copied when read, per scrape, not per report.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import structlog

from elastic.backends.protocol import ExitSink
from elastic.core.options.config import RunConfig
from elastic.run.driver import Driver, RunResult
from elastic.run.records.journal import RunDirectory
from elastic.core.messages import Outcome, RankStep, StepsSeen
from elastic.core.launch.plan import NodeSlot
from elastic.node.watchers.steps import REPORT_EVERY_S  # a node's step watch reports at most this often
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


# --tails: what failed ranks printed last, 20 lines each as the node reads them. The failing rank:
# a traceback ending in a CUDA out-of-memory error (a signature, found after scanning the whole tail);
# the others, drained: NCCL's abort lines (never read: collateral).
_ROOT_TAIL = tuple(
    ["Traceback (most recent call last):"] + [f'  File "/work/train.py", line {n}, in step' for n in range(17)]
    + ["    loss.backward()",
       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.22 GiB. GPU 0 has a total capacity of "
       "15.69 GiB of which 3.71 GiB is free."]
)
_DRAINED_TAIL = tuple(
    f"[rank{n}]:[E1016 03:31:38.929241154 ProcessGroupNCCL.cpp:621] [Rank {n}] Some NCCL operations have failed "
    "or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
    "corrupted/incomplete data." for n in range(20)
)


def one_run(root: Path, nodes: int, nproc: int, tails: str | None = None) -> dict[str, tuple[float, float]]:
    """One repetition: ``{phase: (cpu_s, wall_s)}``; ``tails``: failed ranks carry log tails, the
    failing rank's ending in a CUDA OOM (``root``) or in NCCL's abort lines, a symptom (``symptom``)."""
    backend = FakeBackend(
        nodes=[NodeSlot(f"node-{i:04d}", f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", nproc)
               for i in range(nodes)],
        clock=FakeClock(),
    )
    if tails:
        backend.tails = dict.fromkeys(range(nodes * nproc), _DRAINED_TAIL)
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
    first = {"root": _ROOT_TAIL, "symptom": _DRAINED_TAIL}.get(tails or "", ())
    backend.exit(0, 1, first)  # rank 0 fails; the drain ends the others as collateral
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




class _SinkBackend(FakeBackend):
    """The fake backend, keeping the driver's sink so that a round of reports is built before it is timed."""

    sink: ExitSink | None = None

    def start(self, on_exit: ExitSink) -> None:
        super().start(on_exit)
        self.sink = on_exit


class _Synced:
    """The journal's fsync, telling the benchmark each time the driver commits a batch."""

    def __init__(self) -> None:
        self.done = threading.Event()

    def __call__(self, fd: int) -> None:
        os.fsync(fd)
        self.done.set()


def _round(
    nodes: list[NodeSlot], nproc: int, step: int, at: float, straggler: int
) -> list[StepsSeen]:
    """Every node's report of its ranks at ``step``, as full step windows: step times spread
    over 1.0-1.1 s and changing each round; ``straggler`` (a rank of the last node, whose report
    comes last) at 3 s, so that its ``straggler_seen`` marks the round's end in the journal."""
    reports = []
    for index, node in enumerate(nodes):
        steps = []
        for rank in range(index * nproc, (index + 1) * nproc):
            step_time = 3.0 if rank == straggler else 1.0 + (rank * 7919 + step) % 101 / 1000
            steps.append(RankStep(rank, step, "output", at, step_time, "interval"))
        reports.append(StepsSeen(0, node.node_id, tuple(steps), at))
    return reports


def step_rounds(root: Path, nodes: int, nproc: int, rounds: int) -> list[tuple[float, float]]:
    """Rounds of step reports, one from each node (its ``nproc`` ranks), to a running attempt:
    ``[(cpu_s, wall_s)]`` per round, from the first report pushed to the round's last one
    handled (its straggler journaled and fsynced). The first round (every rank's first
    report, the attempt's first step) is not counted."""
    if rounds + 1 > nproc:
        raise ValueError(f"--rounds: at most {nproc - 1} (one straggler of the last node per round)")
    slots = [NodeSlot(f"node-{i:04d}", f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", nproc) for i in range(nodes)]
    backend = _SinkBackend(nodes=slots, clock=FakeClock())
    config = RunConfig(
        command=("train",), run_id="bench", run_dir=root / "run", nproc_per_node=nproc,
        min_nodes=nodes, max_nodes=nodes,
    )
    synced = _Synced()
    driver = Driver(config, backend, RunDirectory.create(config.run_dir, fsync=synced),
                    base_env={"HOME": "/home/bench", "PATH": "/usr/bin:/bin"}, clock=backend.clock)
    results: list[RunResult] = []
    thread = threading.Thread(target=lambda: results.append(driver.run()), daemon=True)
    thread.start()
    world = nodes * nproc
    backend.wait_for_attempt(0, timeout_s=_TIMEOUT_S)
    journal = _JournalTail(root / "run" / "journal.jsonl")
    figures = []
    for number in range(rounds + 1):
        backend.clock.advance(REPORT_EVERY_S)
        straggler = world - 1 - number
        reports = _round(slots, nproc, 10 * (number + 1), backend.clock.monotonic(), straggler)
        assert backend.sink is not None
        synced.done.clear()
        cpu, wall = time.process_time(), time.perf_counter()
        for report in reports:
            backend.sink(report)
        _wait_for_straggler(journal, synced, straggler)
        if number:
            figures.append((time.process_time() - cpu, time.perf_counter() - wall))
    journal.close()
    for rank in range(world):
        backend.exit(rank, 0)
    thread.join(_TIMEOUT_S)
    if thread.is_alive() or not results or results[0].outcome is not Outcome.SUCCEEDED:
        raise RuntimeError(f"the run did not succeed: {results}")
    return figures


class _JournalTail:
    """The journal's lines as they are appended (a line still being written waits for its end)."""

    def __init__(self, path: Path) -> None:
        self._file = path.open()
        self._partial = ""

    def new_events(self) -> list[dict[str, object]]:
        *lines, self._partial = (self._partial + self._file.read()).split("\n")
        return [json.loads(line) for line in lines if line]

    def close(self) -> None:
        self._file.close()


def _wait_for_straggler(journal: _JournalTail, synced: _Synced, rank: int) -> None:
    """Until the journal holds ``straggler_seen`` for ``rank`` (checked after each fsync)."""
    deadline = time.monotonic() + _TIMEOUT_S
    while time.monotonic() < deadline:
        synced.done.wait(deadline - time.monotonic())
        synced.done.clear()
        for event in journal.new_events():
            if event["event"] == "straggler_seen" and event["rank"] == rank:
                return
    raise RuntimeError(f"rank {rank}'s straggler_seen was not journaled within {_TIMEOUT_S}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--nproc", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of step reports timed per repetition")
    parser.add_argument("--phases", default="failure,success,steps",
                        help="which of failure, success, steps to time (default: all)")
    parser.add_argument("--dir", default=None, help="where run directories go (default: a temporary one)")
    parser.add_argument("--tails", choices=("root", "symptom"), default=None,
                        help="failed ranks carry 20-line log tails, the drained ones NCCL's abort lines and the "
                             "failing one a CUDA OOM (root) or NCCL's abort too (symptom): what failure "
                             "signatures read")
    args = parser.parse_args()
    phases = args.phases.split(",")
    samples: dict[str, list[tuple[float, float]]] = {phase: [] for phase in ("failure", "success", "steps")
                                                     if phase in phases}
    with open(os.devnull, "w") as sink, tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        _quiet_logging(sink)
        for n in range(args.repeat):
            if "failure" in samples or "success" in samples:
                for phase, figures in one_run(Path(tmp) / str(n), args.nodes, args.nproc, args.tails).items():
                    if phase in samples:
                        samples[phase].append(figures)
            if "steps" in samples:
                samples["steps"] += step_rounds(Path(tmp) / f"steps-{n}", args.nodes, args.nproc, args.rounds)
    world = args.nodes * args.nproc
    names = {
        "failure": f"1 failure + {world - 1:,} collateral + relaunch",
        "success": f"{world:,} ranks exit 0 + finish",
        "steps": f"1 round of step reports ({args.nodes:,} x {args.nproc})",
    }
    width = max(len(name) for name in names.values())
    print(f"{'phase (' + str(args.nodes) + ' x ' + str(args.nproc) + ')':<{width}}  "
          f"CPU s   wall s   (median of {args.repeat}; steps: of {args.repeat} x {args.rounds} rounds)")
    for phase, rows in samples.items():
        cpu = statistics.median(c for c, _ in rows)
        wall = statistics.median(w for _, w in rows)
        print(f"{names[phase]:<{width}}  {cpu:6.3f}  {wall:7.3f}")


if __name__ == "__main__":
    main()
