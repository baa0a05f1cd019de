"""Which nodes of a Ray cluster an attempt may use, decided from the node table as values.

Pure: no Ray, no clock (``now`` is passed in), no logging. The backend reads
the table (``ray.nodes()`` rows: ``NodeID``, ``NodeManagerAddress``,
``NodeManagerHostname``, ``Alive``, ``Resources``) and acts on what is decided here;
the order of the chosen nodes is :func:`elastic.core.launch.plan.order_nodes`.
Ray's node id is the backend's identity of a node (placement, drains, losses);
:class:`NodeNames` keeps the name people and ranks see for each.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from elastic.core.labels import name_nodes
from elastic.core.launch.plan import NodeSlot

__all__ = ["Eligible", "NodeNames", "Quarantine", "UNREACHABLE_QUARANTINE_S", "eligible_nodes", "resource_wanted"]

# A node whose agent could not be reached to stop its ranks is left out of new
# attempts for this long, unless Ray forgets it first: Ray itself may take tens
# of seconds to declare a vanished machine dead, and an agent placed there
# would wait that long to fail.
UNREACHABLE_QUARANTINE_S = 60.0


@dataclass(frozen=True)
class Eligible:
    """The nodes an attempt may use, in table order (keyed by Ray's node id), each one's
    GPU count and host name (empty where Ray gives none)."""

    slots: tuple[NodeSlot, ...]
    gpus: Mapping[str, int]
    hosts: Mapping[str, str] = field(default_factory=dict)


class NodeNames:
    """Ray's node id <-> the node's name (:func:`elastic.core.labels.name_nodes`), given once
    for the run: ``named`` holds those an earlier driver of the run journaled."""

    def __init__(self, named: Mapping[str, str] | None = None) -> None:
        self._names: dict[str, str] = dict(named or {})
        self._ids = {name: node_id for node_id, name in self._names.items()}

    def name(self, hosts: Mapping[str, str]) -> None:
        """Name the nodes of ``hosts`` (Ray's node id -> host name) not named yet."""
        if all(node_id in self._names for node_id in hosts):
            return  # the usual look at the table: nothing new
        for node_id, name in name_nodes(self._names, hosts).items():
            self._names[node_id] = name
            self._ids[name] = node_id

    def of(self, node_id: str) -> str:
        """A node's name; its Ray id where it has none (never seen in the node table)."""
        return self._names.get(node_id, node_id)

    def id_of(self, name: str) -> str:
        """The Ray node id of a name; the name itself where it is none (a bare Ray id, as
        journals written before nodes had names hold)."""
        return self._ids.get(name, name)

    def named(self, slot: NodeSlot) -> NodeSlot:
        """The slot as the driver sees it: named, with Ray's id as its backend id."""
        return replace(slot, node_id=self.of(slot.node_id), backend_id=slot.node_id)


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
    hosts: dict[str, str] = {}
    for info in alive:
        if wanted is not None and info["Resources"].get(wanted, 0) <= 0:
            continue
        if quarantine.holds(info["NodeID"], now):
            continue
        node_gpus = int(info["Resources"].get("GPU", 0))
        gpus[info["NodeID"]] = node_gpus
        hosts[info["NodeID"]] = str(info.get("NodeManagerHostname") or "")
        slots.append(NodeSlot(info["NodeID"], info["NodeManagerAddress"], nproc_per_node or max(1, node_gpus)))
    return Eligible(tuple(slots), gpus, hosts)
