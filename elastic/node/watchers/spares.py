"""The warm spares of ``--spares``, started once every rank of the attempt on this node runs on
``elastic.worker.inplace``.

One of the jobs of the node's watcher thread (:mod:`elastic.node.watchers.watcher`). A spare
is the rank's own command with ``ELASTIC_INPLACE_SPARE=1``
(:mod:`elastic.core.launch.inplace_helpers`): only a script whose training loop runs on
:class:`elastic.worker.inplace.InPlace` waits as a spare should, for a lost rank's place; any
other would run its training without a rank. So the spares start only once each of the node's
ranks has written the ``inplace`` mark to its start-up file
(:data:`elastic.worker.bootstrap.startup_marks.INPLACE_MARK`, written as its generations
begin), and never for an attempt whose ranks do not: the job then looks every few seconds, at
the cost of a ``stat`` a rank, until the attempt ends.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence

from elastic.core.launch.spec import WorkerSpec
from elastic.core.training.startup import read_marks
from elastic.node.watchers.watcher import Look
from elastic.worker.bootstrap.startup_marks import INPLACE_MARK, STARTUP_FILE_VAR

__all__ = ["SpareStart"]

_INTERVAL_S = 0.1
_QUIET_INTERVAL_S = 2.0  # once the ranks have run this long without the mark: they likely never write it
_QUIET_AFTER_S = 60.0
_MAX_READ = 64 * 1024


class SpareStart:
    """Starts this node's spares (``start_spares``, once) when every rank of ``specs`` carries the mark."""

    def __init__(self, specs: Sequence[WorkerSpec], start_spares: Callable[[], None]) -> None:
        self._paths = {spec.rank: spec.env.get(STARTUP_FILE_VAR, "") for spec in specs}
        self._marked: set[int] = set()
        self._sizes: dict[int, int] = {}
        self._start_spares = start_spares
        self._stopped = threading.Event()
        self._began = 0.0

    def start(self, now: float) -> float:
        self._began = now
        return _INTERVAL_S

    def stop(self) -> None:
        """A drain: its ranks are ending, and no spare starts for them."""
        self._stopped.set()

    def close(self) -> None:
        pass

    def tick(self, now: float, look: Look) -> float | None:
        """Read the start-up files that grew; start the spares once all are marked (then done)."""
        if self._stopped.is_set() or not all(self._paths.values()):
            return None  # a rank with no start-up file can never say it runs in place
        for rank, path in self._paths.items():
            if rank not in self._marked and self._carries_mark(rank, path):
                self._marked.add(rank)
        if len(self._marked) == len(self._paths):
            if not self._stopped.is_set():
                self._start_spares()
            return None
        return _QUIET_INTERVAL_S if now - self._began > _QUIET_AFTER_S else _INTERVAL_S

    def _carries_mark(self, rank: int, path: str) -> bool:
        try:
            size = os.stat(path).st_size
        except OSError:
            return False
        if size == self._sizes.get(rank):
            return False
        self._sizes[rank] = size
        try:
            with open(path, "rb") as marks:
                text = marks.read(_MAX_READ).decode("utf-8", errors="replace")
        except OSError:
            return False
        return INPLACE_MARK in read_marks(text)
