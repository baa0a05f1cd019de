"""The node's watch on distributed initialisations (``--init-timeout``): reads the marks, kills the hung.

One of the jobs of the node's watcher thread (:mod:`elastic.node.watchers.watcher`).
For each rank of the attempt on this node it reads the rank's start-up file
(``ELASTIC_STARTUP_FILE``, only when it grew) for the bootstrap's ``init_begin`` and
``init_end`` marks, and hands them, with the initialisations the node saw completed in
earlier attempts (:class:`InitHistory`), to :func:`elastic.core.training.init_hang.hung_in_init`.
A rank found hung has its node's stacks dumped and is killed as hung, as the hang
watch does (:func:`elastic.node.watchers.hang_kills.kill_blamed`); every rank in an
initialisation waits in ``torch.distributed``, so none is called a victim of another.
The watch fires once, and ends when every rank returned from its initialisation or
the attempt drains.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence

from elastic.core.launch.spec import WorkerSpec
from elastic.core.training.init_hang import InitTimeout, RankInit, hung_in_init
from elastic.core.training.startup import read_marks
from elastic.node.watchers.hang_kills import kill_blamed
from elastic.node.watchers.watcher import Look
from elastic.worker.bootstrap.startup_marks import STARTUP_FILE_VAR

__all__ = ["InitHistory", "InitWatch"]

_INTERVAL_S = 1.0
_MAX_READ = 64 * 1024  # a start-up file is a few dozen lines (:mod:`elastic.node.probes.startup`)


class InitHistory:
    """The seconds each distributed initialisation the node saw complete took, over the run's attempts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds: list[float] = []

    def add(self, seconds: float) -> None:
        with self._lock:
            self._seconds.append(seconds)

    def seconds(self) -> tuple[float, ...]:
        with self._lock:
            return tuple(self._seconds)


class _Rank:
    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.path = spec.env.get(STARTUP_FILE_VAR, "")
        self.read_size = -1
        self.init: RankInit | None = None


class InitWatch:
    """Watches one attempt's ranks on this node until each returned from its initialisation."""

    def __init__(
        self,
        specs: Sequence[WorkerSpec],
        policy: InitTimeout,
        history: InitHistory,
        *,
        kill_hung: Callable[[int, str, float, float], bool],
        clock: Callable[[], float],
        wall: Callable[[], float],
    ) -> None:
        self._ranks = [_Rank(s) for s in specs if s.env.get(STARTUP_FILE_VAR)]
        self._policy = policy
        self._history = history
        # The earlier attempts' seen here, and the run's longest from the driver (a driver that took
        # the run over, or another node's): this one's are added as they end.
        longest = next((s.longest_init_s for s in specs if s.longest_init_s is not None), None)
        self._earlier = (*history.seconds(), *(() if longest is None else (longest,)))
        self._kill_hung = kill_hung
        self._clock = clock
        self._wall = wall
        self._stopped = threading.Event()

    def start(self, now: float) -> float:
        return _INTERVAL_S

    def stop(self) -> None:
        """A drain: its ranks are ending, none is called hung from now on."""
        self._stopped.set()

    def close(self) -> None:
        pass

    def tick(self, now: float, look: Look) -> float | None:
        """Read the ranks' marks; kill the hung. The seconds to the next look, or None: done."""
        if self._stopped.is_set():
            return None
        workers = look.workers()
        if not workers:
            return None
        for rank in self._ranks:
            self._read(rank)
        if all(r.init is not None and r.init.ended_at is not None for r in self._ranks):
            return None
        running = {w.spec.rank: w for w in workers}
        began = [r.init for r in self._ranks if r.init is not None]
        hung = [h for h in hung_in_init(self._policy, began, self._earlier, self._wall()) if h.rank in running]
        if hung:
            kill_blamed(workers, [(running[h.rank], h.reason, h.waited_s) for h in hung],
                        what="hung in distributed initialisation", clock=self._clock,
                        detected_at=self._clock(), stopped=self._stopped, kill_hung=self._kill_hung,
                        by_blame=False)
            return None
        return _INTERVAL_S

    def _read(self, rank: _Rank) -> None:
        if rank.init is not None and rank.init.ended_at is not None:
            return
        try:
            size = os.stat(rank.path).st_size
            if size == rank.read_size:
                return
            with open(rank.path, "rb") as marks:
                text = marks.read(_MAX_READ).decode("utf-8", errors="replace")
        except OSError:
            return
        rank.read_size = size
        marks_read = read_marks(text)
        began = marks_read.get("init_begin")
        if began is None:
            return
        rank.init = RankInit(rank.spec.rank, began, marks_read.get("init_end"))
        if (seconds := rank.init.seconds) is not None:
            self._history.add(seconds)
