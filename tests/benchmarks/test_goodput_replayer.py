"""The replayer finds a rank by the pid it registered, and never injects twice into one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from goodput.replayer import NOTICE_AFTER_START_S, Job, LauncherSpec, inject
from goodput.schedule import Event

pytestmark = pytest.mark.process


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    control = tmp_path / "control"
    control.mkdir()
    spec = LauncherSpec("sleeper", "torchrun", lambda work, requeue: [sys.executable, "-c", "import time; time.sleep(60)"])
    job = Job(spec, tmp_path, {**os.environ, "BENCH_CONTROL": str(control), "BENCH_MARK": f"replayer-test-{os.getpid()}"})
    job.start()
    yield job
    job.take_machine()


def register(job: Job, rank: int, proc: subprocess.Popen[bytes]) -> None:
    start = int(Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    with open(job.control / "pids.jsonl", "a") as out:
        out.write(json.dumps({"rank": rank, "pid": proc.pid, "start": start, "t": time.time()}) + "\n")


def test_a_rank_an_event_was_injected_into_is_no_target_for_the_next(job: Job) -> None:
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        register(job, 1, first)
        line = inject(job, 0, Event(1.0, "exception", rank=1))
        assert line is not None and line["pid"] == first.pid
        assert (job.control / f"raise-{first.pid}").exists()  # that process's, not the rank's next
        assert job.rank_pid(1) is None  # still alive, but already given its event
        assert inject(job, 1, Event(2.0, "sigkill", rank=1)) is None  # waits for the next rank 1
        second = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            register(job, 1, second)
            line = inject(job, 1, Event(2.0, "sigkill", rank=1))
            assert line is not None and line["pid"] == second.pid
            assert second.wait(timeout=10) == -9
        finally:
            second.kill()
            second.wait()
    finally:
        first.kill()
        first.wait()


def test_an_injected_exception_is_raised_by_the_process_it_was_injected_into_only(tmp_path: Path) -> None:
    """The file names a process: another process (the rank's next, after the target died first)
    trains on; the target raises once, at its next step. Before, the rank's next process raised it,
    minutes later in another attempt."""
    train_ddp = pytest.importorskip("goodput.train_ddp")  # the DDP program imports torch
    (tmp_path / f"raise-{os.getpid() + 100000}").write_text("0")  # a process that died before its next step
    train_ddp.raise_if_injected(tmp_path, "rank 0", 5)
    (tmp_path / f"raise-{os.getpid()}").write_text("1")
    with pytest.raises(RuntimeError, match="rank 0: the failure injected at step 6"):
        train_ddp.raise_if_injected(tmp_path, "rank 0", 6)
    train_ddp.raise_if_injected(tmp_path, "rank 0", 7)  # once


def test_a_notice_waits_until_the_launcher_has_run_half_a_second(job: Job) -> None:
    """A burst's next notice to a launcher just requeued is held back until it has run
    ``NOTICE_AFTER_START_S``: sooner, elastic's notice signal came inside its interpreter's own start
    and killed it. Then the notice goes: its file for the program, its deadline for the runner."""
    job.started_at = time.time()  # as if it had just been requeued
    assert inject(job, 0, Event(1.0, "preemption", notice_s=0.3)) is None
    assert not list(job.control.glob("notice-*"))
    time.sleep(NOTICE_AFTER_START_S)
    line = inject(job, 0, Event(1.0, "preemption", notice_s=0.3))
    assert line is not None and line["deadline"] == pytest.approx(line["t"] + 0.3, abs=0.05)
    assert (job.control / "notice-0").exists()


@pytest.mark.parametrize("keeps_ranks", [False, True], ids=["cleared at the requeue", "kept for the next launcher"])
def test_a_launcher_that_dies_alone_leaves_its_ranks_running_until_the_requeue(tmp_path: Path, keeps_ranks: bool) -> None:
    """``driver_oom``: the launcher alone is SIGKILLed, its rank lives on; the requeue clears it
    first, unless the launcher keeps its ranks for its next run (elastic's --orphan-lease)."""
    control = tmp_path / "control"
    control.mkdir()
    rank_code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    spec = LauncherSpec("dies-alone", "torchrun", lambda work, requeue: [sys.executable, "-c", rank_code],
                        keeps_ranks=keeps_ranks)
    job = Job(spec, tmp_path, {**os.environ, "BENCH_CONTROL": str(control), "BENCH_MARK": f"replayer-test-{os.getpid()}"})
    job.start()
    try:
        def ranks() -> set[int]:
            return job.descendants()

        deadline_at = time.monotonic() + 15
        while not ranks() and time.monotonic() < deadline_at:
            time.sleep(0.05)
        [rank] = ranks()
        line = inject(job, 0, Event(1.0, "driver_oom"))
        assert line is not None and job.taken and job.proc is not None and -9 == job.proc.returncode
        assert _alive(rank)  # the launcher alone died
        job.start()  # the requeue
        assert keeps_ranks == _alive(rank)
    finally:
        job.take_machine()
        for pid in job.left:
            _kill(pid)
    if keeps_ranks:
        _kill(rank)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _kill(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass
