"""Each rank's warm successor (``--prewarm-memory``), asked for once the rank is past its start-up.

One of the jobs of the node's watcher thread (:mod:`elastic.node.watchers.watcher`).
For each rank of the attempt on this node it reads the rank's start-up file
(``ELASTIC_STARTUP_FILE``, only when it grew) and looks at its heartbeat file and
log, until :func:`elastic.core.launch.prewarm_due.successor_due` says the rank is
past its start-up; it then hands what the rank had imported by then to
``imported`` (the supervisor, which sends it to the spawner's pool), once a rank.
A rank's first training step does the same from the step watch
(:mod:`elastic.node.watchers.steps`); whichever comes first starts the successor,
the pool starts one a rank. The watch ends when every rank was handed on, or
when the attempt drains.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence

from elastic.core.launch.prewarm_due import successor_due
from elastic.core.launch.spec import WorkerSpec
from elastic.core.training.startup import RankImports, read_imports, read_marks
from elastic.node.watchers.watcher import Look
from elastic.worker.bootstrap.startup_marks import STARTUP_FILE_VAR
from elastic.worker.heartbeat import HEARTBEAT_FILE_VAR

__all__ = ["SuccessorWatch"]

_INTERVAL_S = 0.25
_QUIET_INTERVAL_S = 2.0  # once the ranks have run this long: they are slow to start, or show nothing
_QUIET_AFTER_S = 60.0
_MAX_READ = 64 * 1024  # a start-up file is a few dozen lines (:mod:`elastic.node.probes.startup`)


class _Rank:
    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.marks_path = spec.env.get(STARTUP_FILE_VAR, "")
        self.beat_path = spec.env.get(HEARTBEAT_FILE_VAR, "")
        self.read_size = -1  # the start-up file's size when last read
        self.text = ""


class SuccessorWatch:
    """Watches one attempt's ranks on this node until each is past its start-up, or it is stopped."""

    def __init__(
        self, specs: Sequence[WorkerSpec], imported: Callable[[WorkerSpec, RankImports], None],
        clock: Callable[[], float],
    ) -> None:
        """Call before the ranks start: what their heartbeat files hold now is no beat.
        ``clock``: the monotonic clock the watcher's ``now`` is on."""
        self._ranks = [_Rank(s) for s in specs if s.env.get(STARTUP_FILE_VAR)]
        self._imported = imported
        self._clock = clock
        before = Look()
        self._baseline = {r.spec.rank: before.signature(r.beat_path, heartbeat_file=True) for r in self._ranks}
        self._stopped = threading.Event()
        self._began = 0.0

    def start(self, now: float) -> float:
        self._began = now
        return _INTERVAL_S

    def stop(self) -> None:
        """A drain: its ranks are ending, no successor is asked for from now on."""
        self._stopped.set()

    def close(self) -> None:
        pass

    def tick(self, now: float, look: Look) -> float | None:
        """Hand on each rank now past its start-up; the seconds to the next look, or None: done."""
        if self._stopped.is_set():
            return None
        running = {w.spec.rank for w in look.workers()}
        for rank in list(self._ranks):
            if rank.spec.rank not in running:
                continue  # not started yet, or ended: its successor is not asked for
            imports = self._past_startup(rank, now, look)
            if imports is not None and not self._stopped.is_set():
                self._ranks.remove(rank)
                self._imported(rank.spec, imports)
        if not self._ranks:
            return None
        return _QUIET_INTERVAL_S if now - self._began > _QUIET_AFTER_S else _INTERVAL_S

    def _past_startup(self, rank: _Rank, now: float, look: Look) -> RankImports | None:
        """What the rank had imported, once it is past its start-up and said it; else None."""
        try:
            size = os.stat(rank.marks_path).st_size
        except OSError:
            return None
        if size != rank.read_size:
            try:
                with open(rank.marks_path, "rb") as marks:
                    rank.text = marks.read(_MAX_READ).decode("utf-8", errors="replace")
            except OSError:
                return None
            rank.read_size = size
        beat = look.signature(rank.beat_path, heartbeat_file=True) if rank.beat_path else None
        baseline = self._baseline.get(rank.spec.rank)
        beat_seen = beat is not None and (baseline is None or beat[0] != baseline[0])
        printed = look.signature(rank.spec.log_path, heartbeat_file=False) is not None
        if not successor_due(read_marks(rank.text), beat=beat_seen, printed=printed, ran_s=now - self._began):
            return None
        return read_imports(rank.text, before=float("inf"))
