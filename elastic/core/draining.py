"""Why the group is drained, where the run goes next, and the status it ends with. Pure."""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass

from elastic.core.failures import Failure
from elastic.core.machine import Phase
from elastic.core.messages import Outcome

__all__ = ["DrainReason", "Draining", "exit_status"]


class DrainReason(enum.Enum):
    SUCCEEDED = "succeeded"
    FAILURE = "failure"
    STOP_REQUESTED = "stop_requested"
    SCALE_UP = "scale_up"
    PREEMPTION = "preemption"  # a preemption notice: the launcher's notice signal, a drained node
    STRAGGLER = "straggler"  # --on-straggler restart: the next attempt runs without a straggler's node


@dataclass(frozen=True)
class Draining:
    """Why the group is being drained and where the run goes next."""

    reason: DrainReason
    next_phase: Phase
    outcome: Outcome | None
    detail: str
    stop_signal: int | None = None
    exit_status: int | None = None  # overrides the root cause's status
    grace_s: float | None = None  # overrides the controller's grace (a notice's deadline)
    # The launcher was told to end the run (a stop, a backend fault, a notice with no nodes left
    # to relaunch on): no root cause revised later may send it to a relaunch.
    final: bool = False


def exit_status(outcome: Outcome, cause: Failure | None, stop_signal: int | None) -> int:
    """DESIGN §10: 0; 128+N when stopped by signal N; else the root cause's own status."""
    if outcome is Outcome.SUCCEEDED:
        return 0
    if outcome is Outcome.STOPPED:
        return 128 + (stop_signal or signal.SIGTERM)
    return cause.exit_status if cause is not None else 1
