"""The watch on distributed initialisations: the ranks' own marks read, the hung killed, earlier inits remembered."""

from __future__ import annotations

import json
import time
from pathlib import Path

from elastic.core.launch.spec import WorkerSpec
from elastic.core.training.init_hang import InitTimeout
from elastic.node.supervisor import RunningWorker
from elastic.node.watchers.init_hangs import InitHistory, InitWatch
from elastic.node.watchers.watcher import Look

AUTO = InitTimeout()


def _rank(tmp_path: Path, attempt: int, rank: int, longest_init_s: float | None = None) -> WorkerSpec:
    env = {"ELASTIC_STARTUP_FILE": str(tmp_path / f"attempt-{attempt}-rank-{rank}.startup")}
    return WorkerSpec(attempt=attempt, rank=rank, local_rank=rank, node_id="n", argv=("python",), env=env,
                      log_path=str(tmp_path / f"attempt-{attempt}-rank-{rank}.log"), longest_init_s=longest_init_s)


def _mark(spec: WorkerSpec, name: str, at: float) -> None:
    with open(spec.env["ELASTIC_STARTUP_FILE"], "a") as marks:
        marks.write(json.dumps({"mark": name, "time": at, "pid": 7}) + "\n")


class _Attempt:
    def __init__(self, specs: list[WorkerSpec], policy: InitTimeout, history: InitHistory) -> None:
        self.wall = 1000.0
        self.killed: list[tuple[int, str]] = []
        self.watch = InitWatch(specs, policy, history, kill_hung=self._kill, clock=time.monotonic,
                               wall=lambda: self.wall)
        self.watch.start(time.monotonic())
        running = [RunningWorker(s, pid=100 + s.rank, started_at=time.monotonic()) for s in specs]
        self._running = running
        self._attempt = specs[0].attempt

    def _kill(self, pid: int, reason: str, detected_at: float, silent_s: float) -> bool:
        self.killed.append((pid - 100, reason))
        return True

    def tick(self, wall: float) -> float | None:
        self.wall = wall
        return self.watch.tick(time.monotonic(), Look(lambda: self._running, self._attempt))


def test_a_rank_still_in_its_init_past_the_window_is_killed_as_hung_in_distributed_initialisation(
    tmp_path: Path,
) -> None:
    specs = [_rank(tmp_path, 0, 0), _rank(tmp_path, 0, 1)]
    attempt = _Attempt(specs, InitTimeout(5.0, auto=False), InitHistory())
    _mark(specs[0], "init_begin", 1000.0)

    assert attempt.tick(1004.0) is not None
    assert [] == attempt.killed

    assert attempt.tick(1006.0) is None  # it fires once
    [(rank, reason)] = attempt.killed
    assert 0 == rank
    assert reason.startswith("hung in distributed initialisation for 6 s (--init-timeout 5)")


def test_an_init_completed_in_an_earlier_attempt_sets_the_auto_window_of_the_next(tmp_path: Path) -> None:
    history = InitHistory()
    first = [_rank(tmp_path, 0, 0)]
    earlier = _Attempt(first, AUTO, history)
    _mark(first[0], "init_begin", 990.0)
    _mark(first[0], "init_end", 998.0)
    assert earlier.tick(1000.0) is None  # every rank returned: done
    assert (8.0,) == history.seconds()

    second = [_rank(tmp_path, 1, 0)]
    attempt = _Attempt(second, AUTO, history)
    _mark(second[0], "init_begin", 2000.0)
    assert attempt.tick(2079.0) is not None
    assert [] == attempt.killed
    assert attempt.tick(2081.0) is None
    [(rank, reason)] = attempt.killed
    assert (0, True) == (rank, "(--init-timeout auto allows 80 s)" in reason)


def test_the_runs_longest_init_from_the_driver_sets_the_window_on_a_node_that_saw_none(tmp_path: Path) -> None:
    """A driver that took the run over (its nodes' agents new, their history empty) hands on the
    longest init of the run's journal: a rank stopped in its init is found at auto's 60 s floor,
    not at 600 s."""
    specs = [_rank(tmp_path, 5, 0, longest_init_s=1.5)]
    attempt = _Attempt(specs, AUTO, InitHistory())
    _mark(specs[0], "init_begin", 1000.0)
    assert attempt.tick(1059.0) is not None
    assert [] == attempt.killed
    attempt.tick(1061.0)
    [(rank, reason)] = attempt.killed
    assert (0, True) == (rank, "(--init-timeout auto allows 60 s)" in reason)


def test_a_drain_kills_no_rank_in_its_init(tmp_path: Path) -> None:
    spec = _rank(tmp_path, 0, 0)
    attempt = _Attempt([spec], InitTimeout(5.0, auto=False), InitHistory())
    _mark(spec, "init_begin", 1000.0)
    attempt.watch.stop()

    assert attempt.tick(2000.0) is None
    assert [] == attempt.killed
