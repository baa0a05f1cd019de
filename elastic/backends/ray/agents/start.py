"""The agents' life cycle on Ray: spawn a node-pinned agent per node, wait for it, register it.

Every Ray call goes through :mod:`elastic.backends.ray.calls`; a started agent
is kept by the :class:`~elastic.backends.ray.agents.roster.Roster`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from elastic.backends.protocol import NodeLaunchError
from elastic.backends.ray.calls import AgentFailed, NodeLost, Ok, RayLost, call, is_failed, submit
from elastic.backends.ray.agents.roster import AgentNode, Roster
from elastic.core.events import LogEvent
from elastic.core.launch.plan import NodeSlot

__all__ = ["AgentStarter", "agent_name"]

_log = structlog.get_logger("elastic.ray")


def agent_name(run_id: str, node_id: str) -> str:
    return f"elastic-{run_id}-{node_id[:16]}"


class AgentStarter:
    """Starts the agents of an attempt's nodes (``remote_agent`` is the ``ray.remote`` class).

    Slots come keyed by Ray's node id; each agent is told its node's name (``name_of``),
    which its ranks' exits, signs of life and ``ELASTIC_NODE``-named failures carry.
    """

    def __init__(
        self,
        remote_agent: Any,
        run_id: str,
        roster: Roster,
        clock: Callable[[], float],
        start_timeout_s: float,
        name_of: Callable[[str], str] = lambda node_id: node_id,
    ) -> None:
        self._remote_agent = remote_agent
        self._run_id = run_id
        self._roster = roster
        self._nodes = roster.nodes
        self._clock = clock
        self._start_timeout_s = start_timeout_s
        self._name_of = name_of

    def start(self, slots: Sequence[NodeSlot], node_gpus: Mapping[str, int]) -> tuple[NodeSlot, ...]:
        """An agent on each slot's node (reusing live ones); slots whose node died drop out.

        New actors are all created before any is waited on, so their start-ups
        overlap. An agent that cannot start (its own error, or no answer) is a
        launch failure of its node, raised once every other agent is registered.
        """
        spawned = {
            slot.node_id: self._spawn_actor(slot)
            for slot in slots
            if slot.node_id not in self._nodes or self._nodes[slot.node_id].dead
        }
        ready: list[NodeSlot] = []
        broken: NodeLaunchError | None = None
        first_rank = 0
        deadline_at = self._clock() + self._start_timeout_s  # one for all: they start together
        for slot in slots:
            if slot.node_id in spawned:
                budget_s = max(1.0, deadline_at - self._clock())
                try:
                    node = self._register_agent(slot, spawned[slot.node_id], node_gpus.get(slot.node_id, 0),
                                                first_rank, budget_s)
                except NodeLaunchError as error:
                    broken = broken or error
                    continue
                if node is None:
                    continue
            else:
                node = self._nodes[slot.node_id]
            node.first_rank = first_rank
            first_rank += slot.nproc
            description = node.description
            gpu_ids = description.gpu_ids or tuple(str(i) for i in range(node.gpus))
            ready.append(
                NodeSlot(slot.node_id, slot.address, slot.nproc, description.gpu_vendor, gpu_ids)
            )
        if broken is not None:
            raise broken
        return tuple(ready)

    def _spawn_actor(self, slot: NodeSlot) -> Any:
        """The new actor's handle, or the failure if Ray refused to create it."""
        options = self._remote_agent.options(
            num_cpus=0,
            num_gpus=0,
            max_restarts=0,
            max_concurrency=16,
            scheduling_strategy=NodeAffinitySchedulingStrategy(slot.node_id, soft=False),
            name=agent_name(self._run_id, slot.node_id),
        )
        return submit(options, self._name_of(slot.node_id))

    def _register_agent(
        self, slot: NodeSlot, actor: Any, gpus: int, first_rank: int, budget_s: float
    ) -> AgentNode | None:
        """Wait for a new agent to answer; ``None`` when its node is gone.

        Raises :class:`NodeLaunchError` naming the node and the agent's own
        error when it cannot start there (its ``__init__`` raised: the node's
        environment), or did not answer within the bound.
        """
        result = actor if is_failed(actor) else call(actor.describe, budget_s=budget_s)
        if isinstance(result, Ok):
            node = AgentNode(slot.node_id, slot.address, gpus, actor, result.value, first_rank=first_rank,
                             name=self._name_of(slot.node_id))
            self._roster.add(node)
            _log.info(LogEvent.AGENT_STARTED.value, node=node.name, ray_node_id=slot.node_id,
                      host=node.description.hostname, pid=node.description.pid)
            return node
        if isinstance(result, NodeLost | RayLost):
            if isinstance(result, RayLost):
                self._roster.lost_ray(result.error)
            _log.warning(LogEvent.AGENT_LOST.value, node=self._name_of(slot.node_id), error=result.error)
            return None
        if not is_failed(actor):
            self._roster.kill_quietly(actor)
        how = "could not start" if isinstance(result, AgentFailed) else f"did not answer within {budget_s:.0f} s"
        name = self._name_of(slot.node_id)
        _log.warning(LogEvent.AGENT_FAILED.value, node=name, error=result.error)
        raise NodeLaunchError(
            name, first_rank, f"the node agent on node {name} ({slot.address}) {how}: {result.error}",
        )
