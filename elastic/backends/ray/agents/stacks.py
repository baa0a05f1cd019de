"""``elastic stack`` on Ray: a live run's stacks, asked of its node agents from outside the run."""

from __future__ import annotations

from typing import Any

import ray

from elastic.backends.ray.agents.agent import NodeDescription
from elastic.backends.ray.agents.start import agent_name
from elastic.backends.ray.cluster.connect import NAMESPACE

__all__ = ["dump_stacks_via_agents"]


def dump_stacks_via_agents(address: str, run_id: str, timeout_s: float = 60.0) -> dict[str, dict[int, str]]:
    """Node (its name) -> rank -> stacks, asked of a live run's agents (for ``elastic stack``)."""
    ray.init(address=address, namespace=NAMESPACE, configure_logging=False, log_to_driver=False)
    try:
        prefix = agent_name(run_id, "")
        names = [
            entry["name"] if isinstance(entry, dict) else str(entry)
            for entry in ray.util.list_named_actors()
        ]
        agents = [ray.get_actor(name, namespace=NAMESPACE) for name in names if name.startswith(prefix)]
        calls: list[tuple[Any, Any]] = [(agent.describe.remote(), agent.dump_stacks.remote()) for agent in agents]
        dumps: dict[str, dict[int, str]] = {}
        for describe, stacks in calls:  # each agent knows its node's name, as the run's journal has it
            node: NodeDescription = ray.get(describe, timeout=timeout_s)
            dumps[node.node_id] = ray.get(stacks, timeout=timeout_s)
        return dumps
    finally:
        ray.shutdown()
