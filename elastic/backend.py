"""The seam between the driver and where workers run: one protocol, several backends."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from elastic.failures import WorkerExit
from elastic.plan import NodeSlot, WorkerSpec

__all__ = ["Backend", "ExitSink"]

ExitSink = Callable[[WorkerExit], None]


class Backend(Protocol):
    """What the driver needs from a backend; it never knows which one it drives.

    ``launch`` raises :class:`elastic.supervisor.LaunchError` when a command
    cannot run. Worker exits are pushed to the sink given to ``start`` as they
    happen, from any thread.
    """

    def start(self, on_exit: ExitSink) -> Sequence[NodeSlot]:
        """Connect, find the nodes to run on, and start their node agents."""
        ...

    def free_ports(self, node: NodeSlot, count: int) -> Sequence[int]:
        """Ports free on ``node`` now (master and coordinator of an attempt)."""
        ...

    def launch(self, specs: Sequence[WorkerSpec]) -> None:
        """Start every worker of an attempt on its node."""
        ...

    def stop_workers(self, signum: int, grace_s: float) -> None:
        """Signal, wait ``grace_s``, SIGKILL and reap every worker; bounded."""
        ...

    def kill_workers(self) -> None:
        """SIGKILL every worker now; callable from a signal handler."""
        ...

    def close(self) -> None:
        """Release node agents and anything ``start`` started; idempotent."""
        ...
