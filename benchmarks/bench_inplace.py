"""In-place restart's own cost: a SIGKILLed rank to the survivor's first step of the repaired world.

elastic's launcher does not drive in-place restarts yet (docs/design/in-place-restart.md), so this
plays its part as it will: it hosts the store (``python -m elastic.worker.inplace.store_host``),
starts 2 gloo DDP ranks of ``inplace_rank.py`` and a spare of it, SIGKILLs rank 1 once rank 0 has
finished ``--kill-after`` steps, and at once decides the next world
(:func:`elastic.core.inplace.reform.next_world`), writes rank 0's notice and hands rank 1's place to
the spare. It prints, over ``--repeat`` repetitions, the time from the kill to the survivor's first
completed step of generation 1 (the launcher's own detection of the death, a few milliseconds, is
not in it), whether the survivor kept its process, and the waiting spare's resident memory.

    python benchmarks/bench_inplace.py [--repeat 20] [--kill-after 10] [--step-s 0.05]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from elastic.core.inplace.reform import Reform, next_world, notices  # noqa: E402
from elastic.worker.inplace.notice import NOTICE_VAR, SPARE_VAR, STORE_VAR, write_notice  # noqa: E402

WAIT_S = 120.0


def _wait(predicate: Callable[[], T], what: str) -> T:
    deadline_at = time.monotonic() + WAIT_S
    while not (value := predicate()):
        if time.monotonic() > deadline_at:
            raise TimeoutError(what)
        time.sleep(0.005)
    return value


def _progress(path: Path) -> list[tuple[int, int, int, float]]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [(int(s), int(g), int(p), float(t)) for s, g, p, t in (line.split() for line in lines)]


def _resident_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def repetition(directory: Path, steps: int, kill_after: int, step_s: float) -> tuple[float, bool, float]:
    """One kill and repair: (seconds to the survivor's first step of generation 1, whether it kept
    its pid, the waiting spare's resident MiB)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    ready = directory / "store"
    processes = [subprocess.Popen([sys.executable, "-m", "elastic.worker.inplace.store_host", "127.0.0.1", "0", str(ready)],
                                  env=env, stdin=subprocess.DEVNULL)]
    try:
        address = _wait(lambda: ready.exists() and ready.read_text().strip(), "the store")

        def start(name: str, **variables: str) -> subprocess.Popen[bytes]:
            command = [sys.executable, str(HERE / "inplace_rank.py"), str(steps), str(directory / f"{name}.progress"), str(step_s)]
            variables = {**variables, STORE_VAR: address, NOTICE_VAR: str(directory / f"{name}.notice")}
            with open(directory / f"{name}.log", "wb") as log:
                process = subprocess.Popen(command, env={**env, **variables}, stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL)
            processes.append(process)
            return process

        survivor = start("rank0", RANK="0", WORLD_SIZE="2")
        victim = start("rank1", RANK="1", WORLD_SIZE="2")
        spare = start("spare", **{SPARE_VAR: "1"})
        _wait(lambda: len(_progress(directory / "rank0.progress")) >= kill_after, "rank 0's steps")
        spare_mib = _resident_mib(spare.pid)
        os.kill(victim.pid, signal.SIGKILL)
        killed_at = time.time()
        reform = next_world(0, 2, {1}, spares=1, min_world_size=2)
        assert isinstance(reform, Reform)
        told, (place,) = notices(reform, address)
        write_notice(str(directory / "rank0.notice"), told[0])
        write_notice(str(directory / "spare.notice"), place)
        if survivor.wait(WAIT_S) != 0 or spare.wait(WAIT_S) != 0:
            raise RuntimeError(f"a rank failed: see {directory}")
        steps_seen = _progress(directory / "rank0.progress")
        first = min(at for _, generation, _, at in steps_seen if generation == 1)
        return first - killed_at, {survivor.pid} == {pid for _, _, pid, _ in steps_seen}, spare_mib
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20, help="repetitions (default: 20)")
    parser.add_argument("--kill-after", type=int, default=10, help="rank 0's steps before the kill (default: 10)")
    parser.add_argument("--step-s", type=float, default=0.05, help="sleep after each step (default: 0.05)")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-inplace-") as root:
        for index in range(args.repeat):
            directory = Path(root) / str(index)
            directory.mkdir()
            results.append(repetition(directory, args.kill_after + 10, args.kill_after, args.step_s))
            print(f"{index}: kill -> first step of the repaired world {results[-1][0]:.3f}s", flush=True)
    repaired = sorted(seconds for seconds, _, _ in results)
    print(f"kill -> first step of the repaired world: median {statistics.median(repaired):.3f}s, "
          f"min {repaired[0]:.3f}s, max {repaired[-1]:.3f}s over {len(repaired)}")
    print(f"survivor kept its process: {sum(kept for _, kept, _ in results)}/{len(results)}")
    print(f"a waiting spare's resident memory: median {statistics.median(mib for _, _, mib in results):.0f} MiB")


if __name__ == "__main__":
    main()
