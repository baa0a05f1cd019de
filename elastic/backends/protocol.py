"""The seam between the driver and where workers run: one protocol, several backends."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from elastic.core.diagnosis.preflight import NodeCommand, NodeCommandResult
from elastic.core.exit_codes import ExitCode
from elastic.core.failures import WorkerExit
from elastic.core.labels import plural
from elastic.core.messages import HelperEnded, RankSilence, SignOfLife, SparesStarted, StepsSeen
from elastic.core.rank_ends import HungRank
from elastic.core.launch.spec import RankStarted, WorkerSpec
from elastic.core.launch.plan import NodeSlot
from elastic.core.inplace.reform import Reforming
from elastic.node.spawner.kept import AdoptedKeeper
from elastic.node.supervisor import LaunchError

__all__ = [
    "Adopting",
    "Backend",
    "BackendFault",
    "BackendUnavailable",
    "ExitSink",
    "NodeDraining",
    "NodeLaunchError",
    "NodeReport",
    "NotEnoughNodes",
    "ReformsInPlace",
]


@dataclass(frozen=True)
class BackendFault:
    """The backend can no longer report exits: its event pump died, or the driver lost Ray.

    ``requeue``: the cause is the infrastructure (worth requeueing the job),
    not a bug in elastic.
    """

    reason: str
    requeue: bool


@dataclass(frozen=True)
class NodeDraining:
    """A node running ranks of ``attempt`` is being drained: it goes at ``deadline_at`` (the
    driver's monotonic clock; ``None``: no deadline given). ``usable_nodes``: usable nodes
    without the ones being drained. A preemption notice (DESIGN §14); each node once."""

    node: str
    attempt: int
    deadline_at: float | None
    usable_nodes: int


# What a backend reports as it happens: worker exits, faults, each attempt's first
# sign of life on a node (output or heartbeat), its ranks' training steps, and
# nodes being drained.
NodeReport = WorkerExit | BackendFault | SignOfLife | StepsSeen | NodeDraining | SparesStarted | HelperEnded
ExitSink = Callable[[NodeReport], None]


class BackendUnavailable(Exception):
    """The backend cannot start (a cluster that cannot be reached); a one-line message."""


class NotEnoughNodes(Exception):
    """Fewer usable nodes than the minimum were there when the wait ran out."""

    def __init__(self, needed: int, seen: int) -> None:
        super().__init__(f"needed at least {plural(needed, 'node')}, {seen} available")
        self.needed = needed
        self.seen = seen


class NodeLaunchError(LaunchError):
    """A node cannot run ranks at all (its agent failed to start, or failed to launch).

    ``rank`` is the first rank of the node; the message names the node and the
    agent's own error.
    """

    def __init__(self, node: str, rank: int, reason: str) -> None:
        super().__init__(rank, "node agent", int(ExitCode.LAUNCH_NOT_EXECUTABLE), reason)
        self.node = node
        self.args = (reason,)


class Backend(Protocol):
    """What the driver needs from a backend; it never knows which one it drives.

    ``launch`` raises :class:`elastic.node.supervisor.LaunchError` when a command
    cannot run; ``acquire_nodes``, ``free_ports`` and ``launch`` raise
    :class:`NodeLaunchError` when a node's agent cannot start or run. Worker
    exits (and, from a backend that can see them, :class:`NodeDraining` notices)
    are pushed to the sink given to ``start`` as they happen, from any
    thread; a worker whose node died is reported as an exit with ``node_lost``
    set, exactly once. A backend that can no longer report exits pushes one
    :class:`BackendFault`. ``stop_workers`` returns only once the exit of every
    worker of the attempt has been pushed. A backend that watches for it pushes a
    :class:`elastic.core.messages.SignOfLife` when an attempt's ranks on a node
    first print or beat, and :class:`elastic.core.messages.StepsSeen` with their steps.
    """

    def start(self, on_exit: ExitSink) -> None:
        """Connect to wherever workers run."""
        ...

    def acquire_nodes(
        self,
        previous: Sequence[str],
        min_nodes: int,
        max_nodes: int,
        timeout_s: float,
        cancel: threading.Event,
        leave_out: Collection[str] = (),
    ) -> Sequence[NodeSlot]:
        """Wait (up to ``timeout_s``, or until ``cancel``) for ``min_nodes`` usable nodes.

        Returns at most ``max_nodes`` in a stable order (survivors of
        ``previous`` first), each with its node agent started, none of
        ``leave_out`` (stragglers' nodes: a backend that can tell nodes apart
        never places the run there again; one with a single node ignores it). Raises
        :class:`NotEnoughNodes` when the wait runs out or is cancelled.
        """
        ...

    def cluster_address(self) -> str | None:
        """Where tools reach this run's node agents (a Ray address), or ``None``."""
        ...

    def available_nodes(self) -> int:
        """How many usable nodes there are now (for growing the world); cheap to call."""
        ...

    def free_ports(self, node: NodeSlot, count: int) -> Sequence[int]:
        """Ports free on ``node`` now (master and coordinator of an attempt)."""
        ...

    def run_on_nodes(self, commands: Sequence[NodeCommand], timeout_s: float) -> tuple[NodeCommandResult, ...]:
        """Run each command on its node (``--preflight``), all at once, each for at most
        ``timeout_s``; one result per command, in order. Bounded: a node out of reach, or
        whose agent fails, gives a result with ``error`` set, never an exception."""
        ...

    def launch(self, specs: Sequence[WorkerSpec], helpers: Sequence[WorkerSpec] = ()) -> dict[int, RankStarted]:
        """Start every worker of an attempt on its node; returns each rank's process: its pid
        on its node and, for a rank handed to a warm interpreter (``--prewarm``,
        ``--prewarm-memory``), the resident memory (KiB) that interpreter held at the hand-off.
        ``helpers``: the processes that serve the ranks (``--spares``: the in-place store's host,
        started before them, and the warm spares; :mod:`elastic.core.launch.inplace_helpers`),
        supervised apart from them."""
        ...

    def stop_workers(self, signum: int, grace_s: float, *, collateral: bool = False) -> None:
        """Signal, wait ``grace_s``, SIGKILL and reap every worker; bounded. ``collateral``: a
        failure's survivors, each killed as soon as it clearly will not exit on the signal unless
        a checkpoint write is under way on its node (:meth:`elastic.node.agent.NodeAgent.stop`)."""
        ...

    def heartbeat_ages(self) -> Mapping[int, float]:
        """Seconds since each running rank's last sign of life, measured on its
        own node; ranks with none yet, or out of reach, are left out. Called on
        every metrics scrape and status refresh, from any thread: bounded and cheap."""
        ...

    def announce_preemption(self, attempt: int, notice: str) -> None:
        """Write ``notice`` (one JSON line) to the preemption file of every running rank of
        ``attempt`` (``ELASTIC_PREEMPTION_FILE``), before the stop signal is sent; bounded,
        and a node that cannot be reached is skipped (its ranks still get the signal)."""
        ...

    def silences(self, attempt: int) -> Sequence[RankSilence]:
        """How long each running rank of ``attempt`` has shown no sign of life (output,
        heartbeat file change, write in the checkpoint directory), measured on its own
        node, when an ``--exit-timeout`` check comes. Bounded; the ranks of a node that
        cannot be reached are left out (the check counts them as silent)."""
        ...

    def kill_exit_hung(
        self, attempt: int, ranks: Sequence[int], reason: str, detected_at: float
    ) -> tuple[HungRank, ...]:
        """Dump the stacks of these ranks of ``attempt`` still running, then SIGKILL them.

        Their exits are then reported with ``hung`` set to ``reason`` and where the
        stacks went. Returns what each rank's node saw of it just before the kill, the
        evidence that it had finished (:class:`elastic.core.rank_ends.HungRank`: whether it
        said so with ``elastic.heartbeat(done=True)``, where its stack was, its silence).
        Bounded (a stack dump is cut off after a few seconds); a rank already gone, or
        on a node out of reach, is left out.
        """
        ...

    def kill_workers(self) -> None:
        """SIGKILL every worker now; callable from a signal handler."""
        ...

    def close(self) -> None:
        """Release node agents and anything ``start`` started; idempotent."""
        ...


@runtime_checkable
class ReformsInPlace(Protocol):
    """A backend that can re-form a running world in place (``--spares``): the local backend.
    (Ray's node agents would each do their node's part: not built yet.)"""

    def reform(self, order: Reforming) -> dict[int, int]:
        """Have the nodes re-form the world as ``order`` says
        (:meth:`elastic.node.agent.NodeAgent.reform`): each survivor told its place, each lost
        place handed to a warm spare; returns the pid of each rank of the new attempt. Raises
        ``LookupError`` when a node cannot hand a place (its spares are gone)."""
        ...


@runtime_checkable
class Adopting(Protocol):
    """A backend that can take a dead driver's kept ranks over (``--orphan-lease``): the local
    backend. (On Ray the node agents must outlive the driver's job first: issue 38's Ray part.)"""

    def adopt(self, keeper: AdoptedKeeper, specs: Mapping[int, WorkerSpec]) -> dict[int, RankStarted]:
        """Make ``keeper`` (resumed under this driver's generation) the spawner of its node and
        supervise its ranks (``specs``, by pid) as a launch's, from now on; the ranks that ended
        while no driver was there are reported first, as exits dated to when they happened."""
        ...
