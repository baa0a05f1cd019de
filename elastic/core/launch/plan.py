"""The world of one attempt: which nodes it uses and the ranks each node runs. Pure.

What each rank is then started with (its command line and environment) is
:mod:`elastic.core.launch.spec`.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "AttemptPlan",
    "GpuVendor",
    "NodeSlot",
    "RankAssignment",
    "World",
    "assign_ranks",
    "order_nodes",
    "plan_attempt",
]

class GpuVendor(enum.Enum):
    NONE = "none"
    CUDA = "cuda"
    ROCM = "rocm"


@dataclass(frozen=True)
class NodeSlot:
    """A node the attempt runs on, as the backend found it.

    ``node_id`` is the node as the launcher names it, the one name people and ranks see
    (``ELASTIC_NODE``, the journal, the summary): its host name, with a short id where
    nodes share a host (:func:`elastic.core.labels.name_nodes`). ``backend_id`` is the
    backend's own id for it where that is another (Ray's node id), journaled with the
    plan so a later driver of the run gives the node the same name.
    """

    node_id: str
    address: str
    nproc: int
    gpu_vendor: GpuVendor = GpuVendor.NONE
    gpu_ids: tuple[str, ...] = ()
    backend_id: str = ""


@dataclass(frozen=True)
class RankAssignment:
    rank: int
    local_rank: int
    group_rank: int
    node_id: str
    local_world_size: int


@dataclass(frozen=True)
class World:
    """The world an attempt ran on: its nodes in rank order and its size (ELASTIC_WORLD_CHANGED)."""

    node_ids: tuple[str, ...]
    world_size: int


@dataclass(frozen=True)
class AttemptPlan:
    """Everything the driver decided for one attempt, before anything starts."""

    run_id: str
    attempt: int
    max_restarts: int
    nodes: tuple[NodeSlot, ...]
    ranks: tuple[RankAssignment, ...]
    master_addr: str
    master_port: int
    coordinator_port: int
    world_changed: bool = False
    checkpoint_dir: str | None = None
    resume_from: str | None = None  # the latest complete checkpoint, absent on a fresh start
    resume_step: int | None = None
    cache_dir: str | None = None  # --cache-dir, absolute; None: --cache-dir none
    torchelastic_run_id: str | None = None  # the ranks' TORCHELASTIC_RUN_ID where not run_id (--rdzv-id)
    # host:port of the process-group store hosted apart from the ranks for in-place restarts
    # (--spares); None: off
    inplace_store: str | None = None

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    @property
    def world(self) -> World:
        return World(tuple(n.node_id for n in self.nodes), self.world_size)

    def node(self, node_id: str) -> NodeSlot:
        return self._nodes_by_id[node_id]

    @functools.cached_property
    def _nodes_by_id(self) -> dict[str, NodeSlot]:
        """Each node by id: a lookup per rank must not scan 1,000 nodes."""
        return {n.node_id: n for n in self.nodes}



def order_nodes(
    previous: Sequence[str], available: Sequence[NodeSlot], max_nodes: int
) -> tuple[NodeSlot, ...]:
    """The nodes of the next attempt, at most ``max_nodes``, in a stable order.

    Survivors of the previous attempt come first in their old order, so they
    keep their group rank where possible (node 0 stays node 0 unless it was
    lost); newcomers follow, ordered by address and id so every driver would
    pick the same ones.
    """
    by_id = {node.node_id: node for node in available}
    survivors = [by_id[node_id] for node_id in previous if node_id in by_id]
    kept = {node.node_id for node in survivors}
    newcomers = sorted(
        (node for node in available if node.node_id not in kept),
        key=lambda node: (node.address, node.node_id),
    )
    return tuple((survivors + newcomers)[:max_nodes])


def assign_ranks(nodes: Sequence[NodeSlot]) -> tuple[RankAssignment, ...]:
    """Global ranks in node order, then local rank: node 0 holds ranks 0..n-1."""
    ranks: list[RankAssignment] = []
    for group_rank, node in enumerate(nodes):
        for local_rank in range(node.nproc):
            ranks.append(
                RankAssignment(
                    rank=len(ranks),
                    local_rank=local_rank,
                    group_rank=group_rank,
                    node_id=node.node_id,
                    local_world_size=node.nproc,
                )
            )
    return tuple(ranks)


def plan_attempt(
    *,
    run_id: str,
    attempt: int,
    max_restarts: int,
    nodes: Sequence[NodeSlot],
    master_addr: str | None,
    master_port: int,
    coordinator_port: int,
    previous: AttemptPlan | World | None = None,
    checkpoint_dir: str | None = None,
    resume_from: str | None = None,
    resume_step: int | None = None,
    cache_dir: str | None = None,
    torchelastic_run_id: str | None = None,
    inplace_store_port: int | None = None,
) -> AttemptPlan:
    """The plan of an attempt; ``master_addr`` defaults to the first node's address, and so does
    the in-place store's host (``inplace_store_port``, with ``--spares``; None: no store)."""
    ranks = assign_ranks(nodes)
    if isinstance(previous, AttemptPlan):
        previous = previous.world
    world_changed = previous is not None and previous != World(
        tuple(n.node_id for n in nodes), len(ranks)
    )
    return AttemptPlan(
        run_id=run_id,
        attempt=attempt,
        max_restarts=max_restarts,
        nodes=tuple(nodes),
        ranks=ranks,
        master_addr=master_addr or nodes[0].address,
        master_port=master_port,
        coordinator_port=coordinator_port,
        world_changed=world_changed,
        checkpoint_dir=checkpoint_dir,
        resume_from=resume_from,
        resume_step=resume_step,
        cache_dir=cache_dir,
        torchelastic_run_id=torchelastic_run_id,
        inplace_store=None if inplace_store_port is None else f"{nodes[0].address}:{inplace_store_port}",
    )
