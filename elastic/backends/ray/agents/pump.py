"""The event pump: one long poll per node agent; exits to the driver ahead of console lines.

It runs supervised: if it dies, the driver hears of it as a fault at once,
never waits for exits that can no longer come.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import structlog

from elastic.backends.protocol import BackendFault
from elastic.backends.ray.agents.agent import PENDING_LINES_BYTES, AgentEvents
from elastic.backends.ray.calls import (
    AgentFailed,
    NodeLost,
    Ok,
    RayLost,
    failed,
    is_failed,
    result_of,
    submit,
    wait_any,
)
from elastic.backends.ray.agents.roster import AgentNode, Roster
from elastic.core.events import LogEvent
from elastic.core.labels import without_own_prefix
from elastic.core.messages import StepsSeen

__all__ = ["EventPump"]

_POLL_S = 5.0  # long-poll length of one next_events call
_WAIT_S = 0.5  # how long one look at the outstanding polls waits
_DROPS_LOGGED_EVERY_S = 5.0  # console lines dropped are logged at most this often
_UNREACHABLE_BREATH_S = 0.1  # before polling again an agent that was briefly unreachable

_log = structlog.get_logger("elastic.ray")


class EventPump:
    """Keeps one ``next_events`` call outstanding per live agent and hands what returns on."""

    def __init__(
        self,
        roster: Roster,
        *,
        echo: Callable[[str], None] | None,
        group_rank: Callable[[str], int | None],
        clock: Callable[[], float],
        closed: threading.Event,
    ) -> None:
        self._roster = roster
        self._echo = echo
        self._group_rank = group_rank
        self._clock = clock
        self._closed = closed
        self._drops: dict[str, int] = {}  # console lines dropped, by node, not yet logged
        self._drops_logged_at = float("-inf")
        self._context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=lambda: self._context.run(self._supervise), name="elastic-ray-pump", daemon=True
        )

    def start(self) -> None:
        self._context = contextvars.copy_context()  # what the starter bound (run_id) is logged too
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    @property
    def hearing(self) -> bool:
        """Whether exits can still reach the driver."""
        return self._roster.fault is None and self._thread.is_alive()

    def count_drops(self, node: str, count: int) -> None:
        """Console lines a node's agent dropped, to be logged by :meth:`log_drops`."""
        if count:
            self._drops[node] = self._drops.get(node, 0) + count

    def log_drops(self, *, now: bool = False) -> None:
        """Console lines dropped on the agents (a console slower than its ranks' output)."""
        if not self._drops or (not now and self._clock() - self._drops_logged_at < _DROPS_LOGGED_EVERY_S):
            return
        drops, self._drops = self._drops, {}
        self._drops_logged_at = self._clock()
        for node_id, count in drops.items():
            _log.warning(LogEvent.CONSOLE_LINES_DROPPED.value, node=node_id, count=count,
                         detail=f"the console fell more than {PENDING_LINES_BYTES >> 20} MiB of lines behind this node's ranks; "
                                "the ranks' logs have every line")

    def _supervise(self) -> None:
        try:
            self._pump()
        except Exception as error:  # noqa: BLE001 - whatever it was, the driver must hear
            if self._closed.is_set():
                return
            if failed(error) is not None:  # Ray's own failure under the driver
                self._roster.lost_ray(f"{type(error).__name__}: {error}")
                return
            _log.exception(LogEvent.EVENT_PUMP_FAILED.value)
            self._roster.raise_fault(
                BackendFault(
                    f"the Ray backend's event pump failed ({type(error).__name__}: {error}); "
                    "ranks' exits can no longer be heard",
                    requeue=False,
                )
            )

    def _pump(self) -> None:
        roster = self._roster
        while not self._closed.is_set() and roster.fault is None:
            polls = self._arm_polls()
            if not polls:
                with roster.lock:
                    roster.lock.wait(_WAIT_S)
                continue
            unreachable = False
            for ref in wait_any(list(polls), _WAIT_S):
                node = polls[ref]
                node.poll = None
                result = result_of(ref)
                if self._closed.is_set():
                    return  # agents die at close by design: teardown, not loss
                if isinstance(result, Ok):
                    self._deliver(node, result.value)
                elif isinstance(result, NodeLost):
                    roster.node_died(node, result.error)
                elif isinstance(result, RayLost):
                    roster.lost_ray(result.error)
                    return
                elif isinstance(result, AgentFailed):
                    raise RuntimeError(f"the agent on node {node.name} failed: {result.error}")
                else:  # briefly unreachable: poll again, after a breath (no busy loop)
                    unreachable = True
            self.log_drops()
            if unreachable:
                self._closed.wait(_UNREACHABLE_BREATH_S)

    def _arm_polls(self) -> dict[Any, AgentNode]:
        nodes = self._roster.alive()
        for node in nodes:
            if node.poll is None:
                poll = submit(node.actor.next_events, _POLL_S)
                if isinstance(poll, RayLost):
                    self._roster.lost_ray(poll.error)
                elif isinstance(poll, NodeLost):
                    self._roster.node_died(node, poll.error)
                elif not is_failed(poll):
                    node.poll = poll
        return {n.poll: n for n in nodes if n.poll is not None}

    def deliver_signs(self, events: AgentEvents, now: float) -> None:
        """Pass on an agent's signs of life and steps, received at ``now`` (the driver's clock)."""
        # A sign of life or a step keeps its age (measured on the agent's clock) on the driver's clock.
        self._roster.signs_of_life(
            [
                sign.shifted(now - events.sent_at) if isinstance(sign, StepsSeen)
                else replace(sign, at=now - max(0.0, events.sent_at - sign.at))
                for sign in events.alive
            ]
        )

    def _deliver(self, node: AgentNode, events: AgentEvents) -> None:
        """Signs of life and steps, then exits, then the node's console lines: a rank's last
        steps and its attempt's first sign come before its exit (the agent sent them first),
        and an exit never waits behind lines."""
        # An agent stamps exits with its own node's monotonic clock, which means
        # nothing here: restamp on arrival (one RPC later) on the driver's clock.
        now = self._clock()
        self.deliver_signs(events, now)
        self._roster.exited(node, [replace(exit, observed_at=now) for exit in events.exits])
        self.count_drops(node.name, events.lines_dropped)
        if self._echo is not None:
            group = self._group_rank(node.node_id)
            label = "?" if group is None else group
            for rank, line in events.lines:
                self._echo(f"[node {label} rank {rank}] {without_own_prefix(rank, line)}")
