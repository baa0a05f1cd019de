"""An attempt's first sign of life on this node: the first output line or heartbeat of any rank.

How long a restart really costs is not the launcher's latency to the ranks running,
but the time until they do something: an interpreter, imports and a framework start
first. The watch looks at the ranks' log files (their first bytes) and heartbeat files
(their first write) until one shows life, reports it once, with the time it was
written (the file's mtime, on this node's clock), and ends. It is one of the jobs
of the node's watcher thread (:mod:`elastic.node.watchers.watcher`); a rank's exit
is reported only after one more look (:meth:`LifeWatch.flush`), so a rank that printed
and exited between two looks still has its sign of life, and it reaches the driver first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from elastic.core.messages import SignOfLife
from elastic.core.launch.spec import WorkerSpec
from elastic.node.clock import Clock
from elastic.node.watchers.watcher import Look, signature
from elastic.worker.heartbeat import HEARTBEAT_FILE_VAR

__all__ = ["LifeWatch"]

# A look costs one stat (and a 256-byte read of a heartbeat file) per rank of the node.
# The time reported is the write's own (mtime), so the interval only delays the report.
_INTERVAL_S = 0.05
_QUIET_INTERVAL_S = 0.5  # once ranks have been silent this long: they may print nothing
_QUIET_AFTER_S = 120.0


class LifeWatch:
    """Watches one attempt's ranks on this node until one shows life, or it is stopped."""

    def __init__(
        self, node_id: str, specs: Sequence[WorkerSpec], report: Callable[[SignOfLife], None], clock: Clock
    ) -> None:
        """Call before the ranks start: what their heartbeat files hold now is no sign."""
        self._node_id = node_id
        self._specs = list(specs)
        self._report = report
        self._clock = clock
        self._beats = {s.rank: s.env.get(HEARTBEAT_FILE_VAR, "") for s in specs}
        self._baseline = {rank: signature(path, heartbeat_file=True) for rank, path in self._beats.items()}
        self._stopped = threading.Event()
        self._lock = threading.Lock()  # one look at a time: the thread's, or a flush's
        self._reported = False
        self._began = 0.0

    @property
    def attempt(self) -> int:
        """The attempt whose ranks are watched (-1: none)."""
        return self._specs[0].attempt if self._specs else -1

    def start(self, now: float) -> float:
        """The ranks have started (``now``); the seconds to the first look."""
        self._began = now
        return _INTERVAL_S

    def stop(self) -> None:
        """What a draining attempt prints is no sign of its start: no report from now on."""
        self._stopped.set()

    def close(self) -> None:
        pass

    def tick(self, now: float, look: Look) -> float | None:
        """Look for a first sign; report it. The seconds to the next look, or None: done."""
        if not self._look_and_report(look):
            return None
        return _QUIET_INTERVAL_S if self._clock.monotonic() - self._began > _QUIET_AFTER_S else _INTERVAL_S

    def flush(self) -> None:
        """One more look now, before a rank's exit is reported: what it printed before it
        exited is its attempt's sign of life, and reaches the driver ahead of the exit."""
        self._look_and_report(Look())

    def _look_and_report(self, look: Look) -> bool:
        """Report the first sign if there is one; whether the watch goes on."""
        with self._lock:
            if self._reported or self._stopped.is_set() or not self._specs:
                return False
            seen = self._look(look)
            if seen is None:
                return True
            spec, source, written_wall = seen
            now, wall = self._clock.monotonic(), self._clock.time()
            at = now - min(max(0.0, wall - written_wall), now - self._began)  # never before the watch began
            self._report(SignOfLife(spec.attempt, spec.rank, self._node_id, source, at))
            self._reported = True
            return False

    def _look(self, look: Look) -> tuple[WorkerSpec, str, float] | None:
        """The earliest sign among the ranks now: (rank's spec, source, wall time written)."""
        found: list[tuple[float, int, str, WorkerSpec]] = []
        for spec in self._specs:
            log = look.signature(spec.log_path, heartbeat_file=False)  # None while the log is empty
            if log is not None:
                found.append((log[1], spec.rank, "output", spec))
            beat = look.signature(self._beats[spec.rank], heartbeat_file=True)
            baseline = self._baseline[spec.rank]
            if beat is not None and (baseline is None or beat[0] != baseline[0]):
                found.append((beat[1], spec.rank, "heartbeat", spec))
        if not found:
            return None
        written, _, source, spec = min(found, key=lambda f: (f[0], f[1]))
        return spec, source, written
