"""One machine, no Ray: the node agent runs inside the driver process."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Collection, Mapping, Sequence

from elastic.backends.protocol import ExitSink
from elastic.core.diagnosis.preflight import NodeCommand, NodeCommandResult
from elastic.node.agent import NodeAgent
from elastic.node.spawner.kept import AdoptedKeeper, KeepTerms
from elastic.core.launch.spec import RankStarted, WorkerSpec
from elastic.core.labels import without_own_prefix
from elastic.core.messages import RankSilence
from elastic.core.rank_ends import HungRank
from elastic.core.launch.plan import GpuVendor, NodeSlot
from elastic.core.inplace.reform import Reforming

__all__ = ["LocalBackend"]

LOOPBACK = "127.0.0.1"


class LocalBackend:
    """Runs every rank on this host through one in-process :class:`NodeAgent`."""

    def __init__(
        self,
        nproc: int,
        *,
        gpu_vendor: GpuVendor = GpuVendor.NONE,
        gpu_ids: tuple[str, ...] = (),
        address: str = LOOPBACK,
        echo: Callable[[str], None] | None = None,
        echo_ranks: Collection[int] | None = None,
        keep: KeepTerms | None = None,
    ) -> None:
        """``keep`` (``--orphan-lease``): the ranks outlive a driver that dies without closing
        the backend (SIGKILL included) for the lease, kept by their spawner, then are drained."""
        self._keep = keep
        self._node = NodeSlot(
            node_id=socket.gethostname() or f"pid-{os.getpid()}",
            address=address,
            nproc=nproc,
            gpu_vendor=gpu_vendor,
            gpu_ids=gpu_ids,
        )
        self._echo = echo
        self._echo_ranks = echo_ranks
        self._agent: NodeAgent | None = None

    def start(self, on_exit: ExitSink) -> None:
        echo = self._echo
        on_output = None if echo is None else (
            lambda rank, line: echo(f"[rank {rank}] {without_own_prefix(rank, line)}")
        )
        self._agent = NodeAgent(self._node.node_id, on_exit, on_output, on_alive=on_exit, keep=self._keep)

    def acquire_nodes(
        self,
        previous: Sequence[str],
        min_nodes: int,
        max_nodes: int,
        timeout_s: float,
        cancel: threading.Event,
        leave_out: Collection[str] = (),
    ) -> Sequence[NodeSlot]:
        # One node: ``leave_out`` cannot apply (the controller never restarts for a straggler
        # here: without its node no world is left, so a straggler is only warned of).
        return (self._node,)

    def cluster_address(self) -> str | None:
        return None

    def available_nodes(self) -> int:
        return 1

    def free_ports(self, node: NodeSlot, count: int) -> Sequence[int]:
        return self._require_agent().free_ports(node.address, count)

    def run_on_nodes(self, commands: Sequence[NodeCommand], timeout_s: float) -> tuple[NodeCommandResult, ...]:
        agent = self._require_agent()
        return tuple(agent.run_command(command, timeout_s) for command in commands)

    def launch(self, specs: Sequence[WorkerSpec], helpers: Sequence[WorkerSpec] = ()) -> dict[int, RankStarted]:
        return self._require_agent().launch(specs, self._echo_ranks, helpers)

    def reform(self, order: Reforming) -> dict[int, int]:
        """Re-form the world in place on this host (:meth:`elastic.node.agent.NodeAgent.reform`;
        :class:`elastic.backends.protocol.ReformsInPlace`)."""
        return self._require_agent().reform(order, self._echo_ranks)

    def adopt(self, keeper: AdoptedKeeper, specs: Mapping[int, WorkerSpec]) -> dict[int, RankStarted]:
        """Take over a dead driver's kept ranks on this host (:meth:`elastic.node.agent.NodeAgent.adopt`;
        :class:`elastic.backends.protocol.Adopting`)."""
        return self._require_agent().adopt(keeper, specs, self._echo_ranks)

    def stop_workers(self, signum: int, grace_s: float, *, collateral: bool = False) -> None:
        self._require_agent().stop(signum, grace_s, collateral=collateral)

    def announce_preemption(self, attempt: int, notice: str) -> None:
        self._require_agent().announce_preemption(attempt, notice)

    def silences(self, attempt: int) -> Sequence[RankSilence]:
        return tuple(self._require_agent().silences(attempt))

    def kill_exit_hung(
        self, attempt: int, ranks: Sequence[int], reason: str, detected_at: float
    ) -> tuple[HungRank, ...]:
        return tuple(self._require_agent().kill_exit_hung(attempt, ranks, reason, detected_at))

    def kill_workers(self) -> None:
        if self._agent is not None:
            self._agent.kill()

    def heartbeat_ages(self) -> dict[int, float]:
        agent = self._agent
        return agent.heartbeat_ages() if agent is not None else {}

    def close(self) -> None:
        agent, self._agent = self._agent, None
        if agent is not None:
            agent.close()

    def _require_agent(self) -> NodeAgent:
        if self._agent is None:
            raise RuntimeError("LocalBackend.start() has not been called")
        return self._agent
