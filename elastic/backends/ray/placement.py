"""Which nodes of a Ray cluster an attempt may use, decided from the node table as values.

Pure: no Ray, no clock (``now`` is passed in), no logging. The backend reads
the table (``ray.nodes()`` rows: ``NodeID``, ``NodeManagerAddress``, ``Alive``,
``Resources``) and acts on what is decided here; the order of the chosen nodes
is :func:`elastic.core.launch.plan.order_nodes`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from elastic.core.launch.plan import NodeSlot

__all__ = ["Eligible", "Quarantine", "UNREACHABLE_QUARANTINE_S", "eligible_nodes", "resource_wanted"]

# A node whose agent could not be reached to stop its ranks is left out of new
# attempts for this long, unless Ray forgets it first: Ray itself may take tens
# of seconds to declare a vanished machine dead, and an agent placed there
# would wait that long to fail.
UNREACHABLE_QUARANTINE_S = 60.0


@dataclass(frozen=True)
class Eligible:
    """The nodes an attempt may use, in table order, and each one's GPU count."""

    slots: tuple[NodeSlot, ...]
    gpus: Mapping[str, int]


@dataclass
class Quarantine:
    """Nodes left out of placement until a time on the caller's clock (a straggler's node:
    for ever, ``for_s`` infinite)."""

    until: dict[str, float] = field(default_factory=dict)

    def add(self, node_id: str, now: float, for_s: float = UNREACHABLE_QUARANTINE_S) -> None:
        """Out until ``now + for_s``, or longer if it already was."""
        self.until[node_id] = max(self.until.get(node_id, now), now + for_s)

    def holds(self, node_id: str, now: float) -> bool:
        return self.until.get(node_id, 0.0) > now


def resource_wanted(alive: Sequence[Mapping[str, Any]], asked: str | None) -> str | None:
    """The resource a node must have: the one asked for, else GPU when any alive node has GPUs."""
    if asked is None and any(n["Resources"].get("GPU", 0) > 0 for n in alive):
        return "GPU"
    return asked


def eligible_nodes(
    table: Sequence[Mapping[str, Any]],
    *,
    resource: str | None,
    nproc_per_node: int | None,
    quarantine: Quarantine,
    now: float,
    draining: Collection[str] = (),
) -> Eligible:
    """Alive nodes with the resource wanted, not quarantined, not being drained (Ray takes
    them away soon); each runs ``nproc_per_node`` ranks, or one per GPU (at least one)
    when that is not given."""
    alive = [n for n in table if n.get("Alive")]
    wanted = resource_wanted(alive, resource)  # a drained GPU node does not make CPU nodes eligible
    alive = [n for n in alive if n["NodeID"] not in draining]
    slots: list[NodeSlot] = []
    gpus: dict[str, int] = {}
    for info in alive:
        if wanted is not None and info["Resources"].get(wanted, 0) <= 0:
            continue
        if quarantine.holds(info["NodeID"], now):
            continue
        node_gpus = int(info["Resources"].get("GPU", 0))
        gpus[info["NodeID"]] = node_gpus
        slots.append(NodeSlot(info["NodeID"], info["NodeManagerAddress"], nproc_per_node or max(1, node_gpus)))
    return Eligible(tuple(slots), gpus)
