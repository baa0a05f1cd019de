"""The node agent as a Ray actor: a mailbox around :class:`NodeAgent`; no Ray import.

The Ray backend wraps :class:`RayNodeAgent` with ``ray.remote`` and pins one
per node. Exits and console lines queue up here and the driver long-polls
them with :meth:`RayNodeAgent.next_events`, so an exit reaches the driver one
RPC after it happens. The actor runs several calls at once: a stop is served
while a poll is waiting.
"""

from __future__ import annotations

import os
import queue
import socket
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from elastic.failures import WorkerExit
from elastic.gpus import detect_gpus
from elastic.node_agent import NodeAgent
from elastic.plan import GpuVendor, WorkerSpec
from elastic.supervisor import LaunchError

__all__ = ["AgentEvents", "LaunchFailure", "NodeDescription", "RayNodeAgent"]

_MAX_BATCH = 1000


@dataclass(frozen=True)
class NodeDescription:
    node_id: str
    hostname: str
    pid: int
    gpu_vendor: GpuVendor
    gpu_ids: tuple[str, ...]


@dataclass(frozen=True)
class LaunchFailure:
    """A :class:`LaunchError` as a value (exceptions do not cross actors cleanly)."""

    rank: int
    argv0: str
    returncode: int
    reason: str

    def to_error(self) -> LaunchError:
        return LaunchError(self.rank, self.argv0, self.returncode, self.reason)


@dataclass(frozen=True)
class AgentEvents:
    exits: tuple[WorkerExit, ...] = ()
    lines: tuple[tuple[int, str], ...] = ()


class RayNodeAgent:
    """One per node; the driver owns it and nothing restarts it but the driver."""

    def __init__(self, node_id: str) -> None:
        self._node_id = node_id
        self._events: queue.Queue[WorkerExit | tuple[int, str]] = queue.Queue()
        self._agent = NodeAgent(node_id, self._events.put, lambda rank, line: self._events.put((rank, line)))
        self._launched_attempts: set[int] = set()

    def describe(self) -> NodeDescription:
        # Ray hides every GPU from a num_gpus=0 actor through its own
        # CUDA_VISIBLE_DEVICES; what the node has is what the driver's ranks get.
        env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")}
        vendor, ids = detect_gpus(env)
        return NodeDescription(self._node_id, socket.gethostname(), os.getpid(), vendor, ids)

    def free_ports(self, host: str, count: int) -> list[int]:
        return self._agent.free_ports(host, count)

    def launch(self, specs: Sequence[WorkerSpec], echo_ranks: Collection[int] | None) -> LaunchFailure | None:
        """Start this node's ranks; idempotent per attempt, so a retried call is harmless."""
        if not specs or specs[0].attempt in self._launched_attempts:
            return None
        self._launched_attempts.add(specs[0].attempt)
        try:
            self._agent.launch(specs, echo_ranks)
        except LaunchError as error:
            return LaunchFailure(error.rank, error.argv0, error.returncode, error.reason)
        return None

    def next_events(self, timeout_s: float) -> AgentEvents:
        """Wait up to ``timeout_s`` for something to report, then return all there is."""
        try:
            first = self._events.get(timeout=timeout_s)
        except queue.Empty:
            return AgentEvents()
        batch = [first]
        while len(batch) < _MAX_BATCH:
            try:
                batch.append(self._events.get_nowait())
            except queue.Empty:
                break
        return AgentEvents(
            exits=tuple(e for e in batch if isinstance(e, WorkerExit)),
            lines=tuple(e for e in batch if isinstance(e, tuple)),
        )

    def stop(self, signum: int, grace_s: float) -> None:
        self._agent.stop(signum, grace_s)

    def kill(self) -> None:
        self._agent.kill()

    def kill_exit_hung(
        self, attempt: int, ranks: Sequence[int], reason: str, detected_at: float
    ) -> list[int]:
        return self._agent.kill_exit_hung(attempt, ranks, reason, detected_at)

    def live_pids(self) -> list[int]:
        return self._agent.live_pids()

    def dump_stacks(self) -> dict[int, str]:
        return self._agent.dump_stacks()

    def heartbeat_ages(self) -> dict[int, float]:
        return self._agent.heartbeat_ages()

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        self._agent.close()
