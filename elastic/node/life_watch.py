"""An attempt's first sign of life on this node: the first output line or heartbeat of any rank.

How long a restart really costs is not the launcher's latency to the ranks running,
but the time until they do something: an interpreter, imports and a framework start
first. The watch looks at the ranks' log files (their first bytes) and heartbeat files
(their first write) until one shows life, reports it once, with the time it was
written (the file's mtime, on this node's clock), and ends.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence

from elastic.core.messages import SignOfLife
from elastic.core.launch_spec import WorkerSpec
from elastic.node.clock import Clock
from elastic.node.hang_watcher import signature
from elastic.worker.heartbeat import HEARTBEAT_FILE_VAR

__all__ = ["LifeWatch"]

# A look costs one stat (and a 256-byte read of a heartbeat file) per rank of the node.
# The time reported is the write's own (mtime), so the interval only delays the report.
_INTERVAL_S = 0.05
_QUIET_INTERVAL_S = 0.5  # once ranks have been silent this long: they may print nothing
_QUIET_AFTER_S = 120.0
_JOIN_TIMEOUT_S = 5.0


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
        attempt = specs[0].attempt if specs else -1
        self._thread = threading.Thread(target=self._watch, name=f"elastic-life-watch-{attempt}", daemon=True)

    def start(self) -> None:
        if self._specs:
            self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def join(self, timeout_s: float = _JOIN_TIMEOUT_S) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _watch(self) -> None:
        began = self._clock.monotonic()
        interval_s = _INTERVAL_S
        while not self._stopped.wait(interval_s):
            seen = self._look()
            if seen is not None:
                spec, source, written_wall = seen
                now, wall = self._clock.monotonic(), self._clock.time()
                at = now - min(max(0.0, wall - written_wall), now - began)  # never before the watch began
                self._report(SignOfLife(spec.attempt, spec.rank, self._node_id, source, at))
                return
            if self._clock.monotonic() - began > _QUIET_AFTER_S:
                interval_s = _QUIET_INTERVAL_S

    def _look(self) -> tuple[WorkerSpec, str, float] | None:
        """The earliest sign among the ranks now: (rank's spec, source, wall time written)."""
        found: list[tuple[float, int, str, WorkerSpec]] = []
        for spec in self._specs:
            try:
                log = os.stat(spec.log_path)
            except OSError:
                log = None
            if log is not None and log.st_size > 0:
                found.append((log.st_mtime, spec.rank, "output", spec))
            beat = signature(self._beats[spec.rank], heartbeat_file=True)
            baseline = self._baseline[spec.rank]
            if beat is not None and (baseline is None or beat[0] != baseline[0]):
                found.append((beat[1], spec.rank, "heartbeat", spec))
        if not found:
            return None
        written, _, source, spec = min(found, key=lambda f: (f[0], f[1]))
        return spec, source, written
