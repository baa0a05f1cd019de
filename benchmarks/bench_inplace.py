"""A SIGKILLed rank to the first step of the repaired world: elastic in place, elastic's restart, torchrun.

One run per launcher of 2 gloo DDP ranks of ``inplace_rank.py`` (a step every ``--step-s``), in
which rank 1 fails ``--kills`` times, each once the world it belongs to has stepped ``--settle``
times (and, in place, once the next spare waits), in each way ``--failures`` names: ``kill``
(SIGKILL), ``stop`` (SIGSTOP: a hang in the all-reduce, which elastic finds with
``--heartbeat-timeout 1`` and torchrun only at the process group's timeout, 120 s here), ``raise``
(a ``ValueError`` in the step):

- ``elastic-inplace``: ``elastic run --spares 1``: the survivor keeps its process, a warm spare
  takes the lost place;
- ``elastic``: ``elastic run`` as without spares: both ranks restarted (``--backoff 0:0``: no
  checkpoint is written, and the wait a crash loop earns is not what is measured here);
- ``torchrun``: ``torchrun --standalone`` (torch's own elastic agent, the same program outside
  elastic: one generation on the usual variables, restarted whole).

Each launcher may restart :data:`RESTARTS_PER_KILL` times per kill: a restarted world that fails to
form is restarted again, and that time is part of its recovery.

For each kill: the seconds from the kill to the first step any rank of the next world completed
(the program's own progress file, wall clock: in place, a step of the next generation; else a
step of a new process), and for ``elastic-inplace`` whether rank 0 kept its
process. Printed: the median, min and max per launcher, the ratios of the medians, the waiting
spare's resident memory, and the step time when nothing fails (with and without ``--spares``).

    python benchmarks/bench_inplace.py [--kills 20] [--failures kill,stop,raise] [--step-s 0.2]
        [--launchers elastic-inplace,elastic,torchrun]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psutil  # type: ignore[import-untyped]

T = TypeVar("T")
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WAIT_S = 180.0
LAUNCHERS = ("elastic-inplace", "elastic", "torchrun")
# Restarts allowed per kill: a restarted world can fail to form on a busy machine (torchrun's gloo
# "connectFullMesh ... Connection refused" here, round after round); its time counts in the recovery.
RESTARTS_PER_KILL = 4
FAILURES = ("kill", "stop", "raise")
HANG_TIMEOUT_S = 1.0  # --heartbeat-timeout for a stopped rank (elastic); torchrun has no hang watch


def _wait(predicate: Callable[[], T | None], what: str) -> T:
    deadline_at = time.monotonic() + WAIT_S
    while not (value := predicate()):
        if time.monotonic() > deadline_at:
            raise TimeoutError(f"waited {WAIT_S:.0f} s for {what}")
        time.sleep(0.005)
    return value


def _progress(path: Path) -> list[tuple[int, int, int, float]]:
    """``(step, generation, pid, time)`` per completed step; a line still being written is left out."""
    text = path.read_text() if path.exists() else ""
    rows = []
    for line in text.splitlines()[: -1 if text and not text.endswith("\n") else None]:
        step, generation, pid, at = line.split()
        rows.append((int(step), int(generation), int(pid), float(at)))
    return rows


def _resident_mib(pid: int) -> float:
    try:
        return float(psutil.Process(pid).memory_info().rss) / 2**20
    except psutil.Error:
        return float("nan")


class Run:
    """One launcher's run of ``inplace_rank.py``, and how to find its rank 1."""

    def __init__(
        self, launcher: str, directory: Path, steps: int, step_s: float, kills: int, *, hang_timeout_s: float | None
    ) -> None:
        self.launcher, self.directory = launcher, directory
        self.progress = directory / "progress"
        self.raise_file = directory / "raise"  # rank 1 raises in the step after it appears (and removes it)
        self.run_dir = directory / "run"
        program = [sys.executable, str(HERE / "inplace_rank.py"), str(steps), str(self.progress), str(step_s)]
        if launcher == "torchrun":
            argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                    "--max-restarts", str(RESTARTS_PER_KILL * kills), *program[1:]]
        else:
            argv = [sys.executable, "-m", "elastic", "run", "--run-dir", str(self.run_dir), "--nproc-per-node", "2",
                    "--max-restarts", str(RESTARTS_PER_KILL * kills), "--backoff", "0:0",
                    *(["--heartbeat-timeout", str(hang_timeout_s)] if hang_timeout_s else []),
                    *(["--spares", "1"] if launcher == "elastic-inplace" else []), "--", *program]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               "BENCH_RAISE_FILE": str(self.raise_file)}
        with open(directory / "launcher.log", "wb") as log:
            self.process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)

    def rank_pids(self) -> dict[int, int]:
        """Each rank's pid now: elastic's journal (its latest ``rank_pids``: a spare handed a place
        has no RANK of its own in /proc), torchrun's children's variables."""
        if self.launcher != "torchrun":
            journal = self.run_dir / "journal.jsonl"
            lines = journal.read_text().splitlines() if journal.exists() else []
            records = [json.loads(line) for line in lines if '"rank_pids"' in line and line.endswith("}")]
            return {int(rank): int(pid) for rank, pid in records[-1]["pids"].items()} if records else {}
        pids: dict[int, int] = {}
        for child in psutil.Process(self.process.pid).children(recursive=True):
            try:
                if "inplace_rank.py" in " ".join(child.cmdline()) and "RANK" in (env := child.environ()):
                    pids[int(env["RANK"])] = child.pid
            except psutil.Error:
                continue
        return pids

    def spare_ready(self, index: int) -> int | None:
        """The pid of this run's ``index``-th spare once it waits (elastic-inplace only)."""
        ready = self.run_dir / "attempt-0" / f"spare-0-{index}.inplace.ready"
        text = ready.read_text().strip() if ready.exists() else ""
        return int(text) if text else None

    def stop(self) -> None:
        """SIGTERM (each launcher drains its ranks), then SIGKILL after 60 s."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def measure(launcher: str, failure: str, kills: int, step_s: float, settle: int) -> dict[str, object]:
    """One run of ``launcher`` in which rank 1 fails ``kills`` times as ``failure`` says: each
    failure to the next world's first step."""
    steps = 100_000  # never reached: the run is stopped after the last failure's repair
    tmp = tempfile.mkdtemp(prefix=f"bench-inplace-{launcher}-{failure}-")  # kept when it fails: its logs say why
    run = Run(launcher, Path(tmp), steps, step_s, kills, hang_timeout_s=HANG_TIMEOUT_S if failure == "stop" else None)
    recoveries: list[float] = []
    kept: list[bool] = []
    spare_mib: float | None = None
    quiet_steps: list[float] = []
    failed = False
    try:
        since = 0.0
        first_rank0: int | None = None
        for kill in range(kills):
            # Every other failure later: a restarted world begins at step 1 again, and the same rank
            # failing the same way at the same step twice in a row is a repeat elastic does not retry.
            steps_before = settle + (2 * settle + 2) * (kill % 2)
            _wait(lambda: sum(1 for *_, at in _progress(run.progress) if at > since) >= steps_before * 2,
                  f"{steps_before} steps of the world before failure {kill}")
            if launcher == "elastic-inplace":
                spare = _wait(lambda: run.spare_ready(kill), f"spare {kill} waiting")
                spare_mib = spare_mib or _resident_mib(spare)
            pids = _wait(lambda: p if len(p := run.rank_pids()) == 2 else None, "both ranks' pids")
            if kill == 0:  # rank 0's pace before any failure
                times = [at for _, _, pid, at in _progress(run.progress) if pid == pids[0]]
                quiet_steps = [b - a for a, b in zip(times, times[1:])]
            first_rank0 = first_rank0 or pids[0]
            old_world = max((g for _, g, _, _ in _progress(run.progress)), default=0)
            failed_at = time.time()
            if failure == "raise":
                run.raise_file.touch()  # rank 1 raises in its next step
            else:
                os.kill(pids[1], signal.SIGKILL if failure == "kill" else signal.SIGSTOP)

            def next_world(row: tuple[int, int, int, float]) -> bool:
                """A step of the world after the failure: of a new process, or in place of the next
                generation (a survivor's step in flight may still end in the old one)."""
                return row[2] not in pids.values() or (launcher == "elastic-inplace" and row[1] > old_world)

            try:
                after = _wait(lambda: [r for r in _progress(run.progress) if r[3] > failed_at and next_world(r)],
                              f"a step after failure {kill}")
            except TimeoutError:  # never trained again: said, and this launcher's run ends here
                print(f"{launcher}: no step within {WAIT_S:.0f} s of failure {kill} ({failure}); its run is in {tmp}",
                      file=sys.stderr)
                failed = True
                break
            recoveries.append(min(at for *_, at in after) - failed_at)
            since = failed_at
            if launcher == "elastic-inplace":
                _wait(lambda: len(p := run.rank_pids()) == 2 and p[1] != pids[1], "the re-formed world's pids")
                kept.append(run.rank_pids()[0] == first_rank0)
    except BaseException:
        print(f"{launcher}: failed; its run is in {tmp}", file=sys.stderr)
        raise
    finally:
        run.stop()
    if not failed:
        shutil.rmtree(tmp)
    return {"launcher": launcher, "failure": failure, "recoveries_s": recoveries, "kills": kills, "kept": kept,
            "spare_mib": spare_mib, "step_s_quiet": statistics.median(quiet_steps) if quiet_steps else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="failures of rank 1 per launcher and kind")
    parser.add_argument("--failures", default="kill", help=f"comma-separated, of {', '.join(FAILURES)}")
    parser.add_argument("--step-s", type=float, default=0.2)
    parser.add_argument("--settle", type=int, default=5, help="steps of a world before its rank 1 fails")
    parser.add_argument("--launchers", default=",".join(LAUNCHERS))
    args = parser.parse_args()
    for failure in args.failures.split(","):
        if failure not in FAILURES:
            parser.error(f"--failures: {failure!r} is not one of {', '.join(FAILURES)}")
        results = [measure(name, failure, args.kills, args.step_s, args.settle) for name in args.launchers.split(",")]
        report(failure, results)


def report(failure: str, results: list[dict[str, object]]) -> None:
    """One kind of failure's figures, a line per launcher, and the ratios of the medians."""
    medians: dict[str, float] = {}
    for result in results:
        recoveries = result["recoveries_s"]
        assert isinstance(recoveries, list)
        if not recoveries:
            print(f"{failure:>5} {result['launcher']:>16}: never trained again after the first failure")
            continue
        medians[str(result["launcher"])] = statistics.median(recoveries)
        kept = result["kept"]
        line = (f"{failure:>5} {result['launcher']:>16}: failure -> first step of the next world: median "
                f"{statistics.median(recoveries):.3f} s (min {min(recoveries):.3f}, max {max(recoveries):.3f}; "
                f"trained again after {len(recoveries)} of {result['kills']})")
        if isinstance(kept, list) and kept:
            line += f"; rank 0 kept its process {sum(1 for k in kept if k)}/{len(kept)}"
        if result["spare_mib"]:
            line += f"; a waiting spare held {result['spare_mib']:.0f} MiB"
        if result["step_s_quiet"] is not None:
            line += f"; step time with no failure {result['step_s_quiet']:.3f} s"
        print(line, flush=True)
    if "elastic-inplace" in medians:
        for other in ("elastic", "torchrun"):
            if other in medians:
                print(f"{failure:>5} elastic-inplace / {other}: {medians['elastic-inplace'] / medians[other]:.3f}x",
                      flush=True)


if __name__ == "__main__":
    main()
