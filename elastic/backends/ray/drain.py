"""The drain watch: Ray nodes being drained (a preemption coming) that run this run's ranks.

Ray's autoscaler and KubeRay drain a node before they take it (Ray's ``DrainNode``,
reason preemption, with a deadline); Ray itself leaves it running until then. Ray
publishes no event a driver can wait on, so the watch looks at Ray's draining
table (:func:`elastic.backends.ray.calls.draining_nodes`, one small GCS call) once
every :data:`DRAIN_POLL_S`, in a thread of its own so that a slow GCS never delays
the pump's exits. A drained node that holds live ranks is reported once, as
:class:`elastic.backends.protocol.NodeDraining`, with its deadline on the driver's
clock; what follows is the controller's (:mod:`elastic.core.controller.capacity`).
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable

import structlog

from elastic.backends.protocol import NodeDraining
from elastic.backends.ray.calls import Ok, draining_nodes
from elastic.backends.ray.agents.roster import Roster
from elastic.core.events import LogEvent

__all__ = ["DRAIN_POLL_S", "DrainWatch"]

DRAIN_POLL_S = 1.0  # how often the draining table is read: a notice gives tens of seconds
_FAILURES_LOGGED_EVERY_S = 30.0

_log = structlog.get_logger("elastic.ray")


class DrainWatch:
    """Reads Ray's draining nodes every :data:`DRAIN_POLL_S`; keeps the latest for placement."""

    def __init__(
        self,
        roster: Roster,
        report: Callable[[NodeDraining], None],
        usable_nodes: Callable[[], int],
        *,
        clock: Callable[[], float],
        wall: Callable[[], float] = time.time,
        closed: threading.Event,
        poll_s: float = DRAIN_POLL_S,
    ) -> None:
        self._roster = roster
        self._report = report
        self._usable_nodes = usable_nodes
        self._clock = clock
        self._wall = wall
        self._closed = closed
        self._poll_s = poll_s
        self._lock = threading.Lock()
        self._draining: dict[str, int] = {}  # node -> deadline (Unix ms, 0: none), as last read
        self._reported: set[str] = set()
        self._failure_logged_at = float("-inf")
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        context = contextvars.copy_context()  # what the starter bound (run_id) is logged too
        self._thread = threading.Thread(
            target=lambda: context.run(self._run), name="elastic-ray-drain-watch", daemon=True
        )
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout_s)

    def draining(self) -> dict[str, int]:
        """Nodes being drained, fresh from Ray when it answers, else as last read."""
        table = draining_nodes()
        if isinstance(table, Ok):
            with self._lock:
                self._draining = table.value
        with self._lock:
            return dict(self._draining)

    def _run(self) -> None:
        while not self._closed.wait(self._poll_s):
            try:
                self.look()
            except Exception as error:  # noqa: BLE001 - a watch that dies would miss every notice
                self._note_failure(f"{type(error).__name__}: {error}")

    def look(self) -> None:
        """One look: report each newly drained node that runs ranks of this run."""
        table = draining_nodes()
        if not isinstance(table, Ok):
            self._note_failure(table.error)  # the pump hears of a Ray that is gone for good
            return
        with self._lock:
            self._draining = table.value
        for node_id, deadline_ms in table.value.items():
            if node_id in self._reported:
                continue
            with self._roster.lock:
                node = self._roster.nodes.get(node_id)
                attempts = set(node.live_ranks.values()) if node is not None and not node.dead else set()
            if not attempts:
                continue  # not ours, or between attempts: placement leaves it out
            self._reported.add(node_id)
            deadline_at = None if deadline_ms <= 0 else self._clock() + (deadline_ms / 1000 - self._wall())
            assert node is not None
            self._report(NodeDraining(node.name, max(attempts), deadline_at, self._usable_nodes()))

    def _note_failure(self, error: str) -> None:
        if self._clock() - self._failure_logged_at >= _FAILURES_LOGGED_EVERY_S:
            self._failure_logged_at = self._clock()
            _log.warning(LogEvent.DRAIN_WATCH_FAILED.value, error=error)
