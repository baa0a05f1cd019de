"""The thread that, while a run could still grow, looks for nodes that joined (DESIGN §7)."""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable

import structlog

from elastic.core.events import LogEvent
from elastic.core.messages import Observation, ScaleCheck
from elastic.core.launch.plan import AttemptPlan
from elastic.node.clock import Clock
from elastic.core.checkpoints.selection import Checkpoint

__all__ = ["SCALE_CHECK_S", "ScaleWatch"]

# How often a run below its --nnodes MAX looks for nodes that joined.
SCALE_CHECK_S = 2.0


class ScaleWatch:
    """Queues a :class:`ScaleCheck` every :data:`SCALE_CHECK_S` while an attempt is planned;
    the controller decides whether the nodes seen are worth a restart."""

    def __init__(
        self,
        observations: queue.SimpleQueue[Observation],
        stop_requested: threading.Event,
        *,
        available_nodes: Callable[[], int],
        current_plan: Callable[[], AttemptPlan | None],
        latest_checkpoint: Callable[[], Checkpoint | None],
        clock: Clock,
        run_id: str,
    ) -> None:
        self._observations = observations
        self._stop_requested = stop_requested
        self._available_nodes = available_nodes
        self._current_plan = current_plan
        self._latest_checkpoint = latest_checkpoint
        self._clock = clock
        self._log = structlog.get_logger("elastic").bind(run_id=run_id)
        self._watching = threading.Event()

    def start(self) -> None:
        self._watching.set()
        threading.Thread(target=contextvars.copy_context().run, args=(self._watch,),  # run_id bound
                         name="elastic-scale-watch", daemon=True).start()

    def stop(self) -> None:
        self._watching.clear()

    def _watch(self) -> None:
        while self._watching.is_set() and not self._stop_requested.wait(SCALE_CHECK_S):
            plan = self._current_plan()
            if plan is None or not self._watching.is_set():
                continue
            try:
                available = self._available_nodes()
            except Exception as error:  # a look that failed is only a missed look
                self._log.info(LogEvent.SCALE_CHECK_FAILED.value, error=repr(error))
                continue
            checkpoint = self._latest_checkpoint()
            self._observations.put(
                ScaleCheck(
                    plan.attempt,
                    available,
                    checkpoint.step if checkpoint else None,
                    self._clock.monotonic(),
                )
            )
