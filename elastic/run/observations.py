"""What a backend reports, as the controller's observations: exits, notices, signs of life, faults.

The backend's sink (:data:`elastic.backends.protocol.ExitSink`) receives
:data:`elastic.backends.protocol.NodeReport` values from any thread; the
driver turns each into one :data:`elastic.core.messages.Observation` here and
queues it.
"""

from __future__ import annotations

from elastic.backends.protocol import BackendFault, NodeDraining, NodeReport
from elastic.core.messages import (
    BackendFailed,
    HelperEnded,
    Observation,
    PreemptionNoticed,
    SignOfLife,
    SparesStarted,
    StepsSeen,
    WorkerExited,
)
from elastic.core.controller.capacity import drain_source

__all__ = ["observation_of"]


def observation_of(exit: NodeReport, now: float) -> Observation:
    """The observation of one backend report; ``now``: when the driver received it (monotonic)."""
    if isinstance(exit, NodeDraining):  # a preemption notice for some nodes
        return PreemptionNoticed(
            drain_source(exit.node), now, exit.deadline_at,
            nodes=(exit.node,), attempt=exit.attempt, usable_nodes=exit.usable_nodes,
        )
    if isinstance(exit, (SignOfLife, StepsSeen, SparesStarted, HelperEnded)):
        return exit
    if isinstance(exit, BackendFault):
        return BackendFailed(exit.reason, exit.requeue, now)
    return WorkerExited(exit)
