"""The node agents the driver holds, and the end of each of their ranks, reported exactly once.

A rank ends when its agent reports its exit, or when its node is lost (at any
moment: before launch, during it, between placement and launch, while
draining). Whichever comes first claims the rank; the other finds it claimed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from elastic.backends.protocol import BackendFault
from elastic.backends.ray.agents.agent import NodeDescription
from elastic.core.events import LogEvent
from elastic.core.failures import WorkerExit
from elastic.core.messages import SignOfLife, StepsSeen

__all__ = ["AgentNode", "Roster"]

_RECHECK_S = 0.5  # a drain waiting on exits looks this often whether they can still come

_log = structlog.get_logger("elastic.ray")


@dataclass
class AgentNode:
    """A node agent the driver holds, and the ranks of the current attempt on it: its node
    by Ray's id and by the name the driver and people know it by."""

    node_id: str
    address: str
    gpus: int
    actor: Any
    description: NodeDescription
    live_ranks: dict[int, int] = field(default_factory=dict)  # rank -> attempt, until its end is reported
    poll: Any = None  # the outstanding next_events ObjectRef
    dead: bool = False
    # (rank, attempt) whose end is being reported, by the pump (an exit) or a node loss.
    claimed: set[tuple[int, int]] = field(default_factory=set)
    first_rank: int = 0  # of the attempt placed on it, for launch failures of the node
    name: str = ""  # the node's name (elastic.core.labels.name_nodes); its Ray id where empty

    def __post_init__(self) -> None:
        self.name = self.name or self.node_id


class Roster:
    """The agents, under one lock; reports rank ends and faults to the driver's sink."""

    def __init__(
        self,
        report: Callable[[WorkerExit | BackendFault | SignOfLife | StepsSeen], None],
        kill_actor: Callable[[Any], None],
        clock: Callable[[], float],
        closed: threading.Event,
    ) -> None:
        self._report = report
        self._kill_actor = kill_actor
        self._clock = clock
        self._closed = closed
        self.lock = threading.Condition()
        self.nodes: dict[str, AgentNode] = {}
        self.fault: BackendFault | None = None

    def add(self, node: AgentNode) -> None:
        with self.lock:
            self.nodes[node.node_id] = node
            self.lock.notify_all()

    def alive(self) -> list[AgentNode]:
        with self.lock:
            return [n for n in self.nodes.values() if not n.dead]

    def assign(self, node: AgentNode, ranks: dict[int, int]) -> None:
        """The ranks (rank -> attempt) about to start on ``node``: live until their end is reported."""
        with self.lock:
            node.live_ranks = dict(ranks)
            node.claimed.clear()
            node.first_rank = min(ranks, default=0)

    def unassign(self, node: AgentNode, ranks: Iterable[int]) -> None:
        """Ranks that will never start (their launch failed): no end to wait for."""
        with self.lock:
            for rank in ranks:
                node.live_ranks.pop(rank, None)
            self.lock.notify_all()

    # -- ends of ranks ---------------------------------------------------------------

    def exited(self, node: AgentNode, exits: Sequence[WorkerExit]) -> None:
        """Report the exits of live ranks not already reported (lost with their node)."""
        with self.lock:
            claimed = self._claim(node, [(e.rank, e.attempt) for e in exits])
        for exit in exits:
            if (exit.rank, exit.attempt) in claimed:
                self._report(exit)
        with self.lock:
            self._release(node, claimed)

    def signs_of_life(self, signs: Sequence[SignOfLife | StepsSeen]) -> None:
        """Attempts' first signs of life and ranks' steps, passed on as they come: they end
        nothing, claim nothing."""
        for sign in signs:
            self._report(sign)

    def node_died(self, node: AgentNode, reason: str) -> None:
        """Mark the node lost (once) and report each of its live ranks lost with it (once).

        A node already marked lost can still hold ranks (placed before it was
        seen dead): they are reported all the same.
        """
        with self.lock:
            first = not node.dead
            node.dead = True
        if first:
            _log.warning(LogEvent.NODE_LOST.value, node=node.name, ray_node_id=node.node_id, reason=reason)
            self.kill_quietly(node.actor)  # if alive somewhere, it must not keep ranks running
        self.report_lost(node, reason)

    def report_lost(self, node: AgentNode, reason: str) -> None:
        """Report the node's live ranks as lost, each once.

        The exits are reported before the ranks stop counting as live, so a
        drain waiting on them returns only after they are queued.
        """
        with self.lock:
            lost = self._claim(node, list(node.live_ranks.items()))
        now = self._clock()
        for rank, attempt in sorted(lost):
            self._report(
                WorkerExit(
                    attempt=attempt,
                    rank=rank,
                    node=node.name,
                    returncode=None,
                    observed_at=now,
                    node_lost=reason,
                )
            )
        with self.lock:
            self._release(node, lost)

    def retire(self, node: AgentNode) -> None:
        """A broken agent: dropped with its ranks (it is killed, they die with it)."""
        with self.lock:
            node.dead = True
            node.live_ranks.clear()
            node.claimed.clear()
            self.lock.notify_all()
        self.kill_quietly(node.actor)

    def await_ends(self, deadline_at: float, hearing: Callable[[], bool]) -> None:
        """Return once every rank's end was reported; a silent node counts as lost.

        ``hearing``: whether exits can still arrive (the pump is alive); once
        not, the silent ranks are reported without waiting.
        """
        with self.lock:
            while any(n.live_ranks for n in self.nodes.values()) and hearing():
                remaining_s = deadline_at - self._clock()
                if remaining_s <= 0:
                    break
                self.lock.wait(min(remaining_s, _RECHECK_S))
            silent = [n for n in self.nodes.values() if n.live_ranks]
        for node in silent:
            if hearing():
                self.node_died(node, "its agent did not report the exits of its ranks")
            else:  # stopped by its agent, but its exit can no longer be heard
                self.report_lost(node, "its exit could not be heard (the event pump stopped)")

    # -- faults ----------------------------------------------------------------------

    def lost_ray(self, error: str) -> None:
        self.raise_fault(BackendFault(f"the driver lost its connection to Ray ({error})", requeue=True))

    def raise_fault(self, fault: BackendFault) -> None:
        """Tell the driver, once, that exits can no longer be heard."""
        with self.lock:
            if self.fault is not None or self._closed.is_set():
                return
            self.fault = fault
            self.lock.notify_all()
        self._report(fault)  # the driver journals and logs it (backend_failed)

    def kill_quietly(self, actor: Any) -> None:
        try:
            self._kill_actor(actor)
        except Exception:  # noqa: BLE001 - an agent already gone is what we expect
            pass

    # -- under the lock --------------------------------------------------------------

    def _claim(self, node: AgentNode, ended: Sequence[tuple[int, int]]) -> set[tuple[int, int]]:
        """Of these (rank, attempt), those live and not yet being reported; now claimed."""
        mine = {e for e in ended if node.live_ranks.get(e[0]) == e[1] and e not in node.claimed}
        node.claimed |= mine
        return mine

    def _release(self, node: AgentNode, reported: set[tuple[int, int]]) -> None:
        """Claimed ends now reported: the ranks stop counting as live."""
        for rank, attempt in reported:
            if node.live_ranks.get(rank) == attempt:
                del node.live_ranks[rank]
        node.claimed -= reported
        self.lock.notify_all()
