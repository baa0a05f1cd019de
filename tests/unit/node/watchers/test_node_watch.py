"""The node's one watcher thread: each job at its own rate, the files read once a tick."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from elastic.core.launch.spec import WorkerSpec
from elastic.core.messages import StepsSeen
from elastic.core.training.stall import ProgressPolicy
from elastic.node.clock import SystemClock
from elastic.node.watchers.watcher import Look, NodeWatch
from elastic.node.watchers.steps import StepWatch
from elastic.node.supervisor import RunningWorker

_BOUND_S = 10.0


class _Counting:
    """A job that looks ``looks`` times, every ``every_s``, and notes when it was stopped."""

    def __init__(self, every_s: float, looks: int) -> None:
        self.every_s = every_s
        self.left = looks
        self.ticks = 0
        self.stopped = False
        self.closed = False
        self.closes = 0
        self.done = threading.Event()

    def start(self, now: float) -> float:
        return self.every_s

    def tick(self, now: float, look: Look) -> float | None:
        self.ticks += 1
        self.left -= 1
        if self.left <= 0:
            self.done.set()
            return None
        return self.every_s

    def stop(self) -> None:
        self.stopped = True

    def close(self) -> None:
        self.closed = True
        self.closes += 1


def _none_running() -> list[RunningWorker]:
    return []


def test_jobs_run_at_their_own_rates_on_one_thread() -> None:
    """A fast job and a slow one share the thread: the fast one looks more often, each ends on its own."""
    fast, slow = _Counting(0.01, 20), _Counting(0.05, 3)
    watch = NodeWatch(0, [fast, slow], running=_none_running, clock=time.monotonic)
    watch.start()
    assert fast.done.wait(_BOUND_S) and slow.done.wait(_BOUND_S)
    watch.join(_BOUND_S)
    assert (20, 3) == (fast.ticks, slow.ticks)
    assert fast.closed and slow.closed


def test_stop_tells_every_job_and_ends_the_thread() -> None:
    """A drain tells each job to stop; the thread then ends without another look."""
    job = _Counting(60.0, 1)
    watch = NodeWatch(0, [job], running=_none_running, clock=time.monotonic)
    watch.start()
    watch.stop()
    watch.join(_BOUND_S)
    assert job.stopped and job.closed and 0 == job.ticks


def test_a_job_that_raises_is_dropped_and_the_others_watch_on(capfd: pytest.CaptureFixture[str]) -> None:
    """A bug in one job (the step reader) never silences another (the hang watch)."""

    class _Broken(_Counting):
        def tick(self, now: float, look: Look) -> float | None:
            super().tick(now, look)
            raise ValueError("invalid literal for int() with base 10: '3,'")

    broken, hangs = _Broken(0.01, 100), _Counting(0.01, 10)
    watch = NodeWatch(4, [broken, hangs], running=_none_running, clock=time.monotonic)
    watch.start()
    assert hangs.done.wait(_BOUND_S)
    assert watch.join(_BOUND_S)
    assert (1, 10) == (broken.ticks, hangs.ticks)
    err = capfd.readouterr().err
    assert "the _Broken of attempt 4 failed and stops watching it" in err and "ValueError" in err


def test_jobs_stay_open_after_the_thread_ends_until_the_join() -> None:
    """Jobs that are done end the thread, yet keep their files until the join: the agent
    still reads the last steps after the thread ended (a drain's flush)."""
    job = _Counting(0.01, 2)
    watch = NodeWatch(0, [job], running=_none_running, clock=time.monotonic)
    watch.start()
    assert job.done.wait(_BOUND_S)
    deadline_at = time.monotonic() + _BOUND_S
    while watch._thread.is_alive() and time.monotonic() < deadline_at:
        time.sleep(0.01)
    assert not watch._thread.is_alive() and not job.closed
    assert watch.join(_BOUND_S) and job.closed


def test_a_job_still_inside_a_tick_is_not_closed_under_it() -> None:
    """A join that times out while a job is mid-tick (a stack dump) leaves its files open;
    the thread closes them itself when the tick ends."""
    release = threading.Event()

    class _Dumping(_Counting):
        def tick(self, now: float, look: Look) -> float | None:
            self.done.set()
            release.wait(_BOUND_S)
            assert not self.closed, "closed while its tick was still running"
            return super().tick(now, look)

    job = _Dumping(0.0, 1)
    watch = NodeWatch(0, [job], running=_none_running, clock=time.monotonic)
    watch.start()
    assert job.done.wait(_BOUND_S)
    watch.stop()
    assert not watch.join(0.05) and not job.closed
    release.set()
    deadline_at = time.monotonic() + _BOUND_S
    while not job.closed and time.monotonic() < deadline_at:  # closed by the thread, with no join
        time.sleep(0.01)
    assert job.closed and 1 == job.ticks
    assert watch.join(_BOUND_S) and 1 == job.closes


def test_a_watch_never_started_still_lets_go_of_its_jobs() -> None:
    """A launch that fails before the thread starts still closes what the jobs opened."""
    job = _Counting(1.0, 1)
    watch = NodeWatch(0, [job], running=_none_running, clock=time.monotonic)
    assert watch.join(_BOUND_S) and job.closed and 0 == job.ticks


def _open_fds_of(path: Path) -> int:
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if _points_to(fd, path))


def _points_to(fd: Path, path: Path) -> bool:
    try:
        return Path(fd.readlink()) == path
    except OSError:
        return False


def test_a_drain_reads_the_last_steps_once_and_leaves_no_log_open(tmp_path: Path) -> None:
    """The agent's drain stops the watch, then reads the steps printed since its last look
    (StepWatch.flush), then joins: the log is read on from where it was, and closed once."""
    log = tmp_path / "rank-0.log"
    log.write_text("".join(f"step {n}\n" for n in range(1, 6)))
    spec = WorkerSpec(attempt=0, rank=0, local_rank=0, node_id="n", argv=("python",), env={}, log_path=str(log))
    sent: list[StepsSeen] = []
    running = [RunningWorker(spec, pid=1, started_at=time.monotonic())]
    steps = StepWatch("n", [spec], ProgressPolicy(), report=sent.append, kill_hung=lambda *_: True,
                      clock=SystemClock())
    watch = NodeWatch(0, [steps], running=lambda: running, clock=time.monotonic)
    watch.start()
    deadline_at = time.monotonic() + _BOUND_S
    while not sent and time.monotonic() < deadline_at:
        time.sleep(0.01)
    assert [5] == [s.step for s in sent[-1].steps]
    with log.open("a") as more:
        more.write("step 6\nstep 7\n")
    watch.stop()
    steps.flush()
    assert [7] == [s.step for s in sent[-1].steps]
    assert watch.join(_BOUND_S)
    assert 0 == _open_fds_of(log)
    steps.flush()  # once closed, nothing is opened again
    assert 0 == _open_fds_of(log)


def test_a_look_reads_each_file_once(tmp_path: Path) -> None:
    """Within one tick every job sees the same reading of a file, however it changes meanwhile."""
    beat = tmp_path / "beat"
    beat.write_text('{"step": 1}\n')
    look = Look()
    first = look.signature(str(beat), heartbeat_file=True)
    beat.write_text('{"step": 2, "more": true}\n')
    assert first is not None and first == look.signature(str(beat), heartbeat_file=True)
    assert b'{"step": 1}\n' == first[0][3]
    assert Look().signature(str(beat), heartbeat_file=True) != first
