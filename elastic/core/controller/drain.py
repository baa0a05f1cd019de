"""Why the group is drained, how long ranks get between the stop signal and SIGKILL, where the run goes next, and the status it ends with. Pure.

A drain's cause decides its grace. After a failure the surviving ranks are
collateral: their collective is already broken (a distributed checkpoint needs
every rank, so they cannot save), and all they need is to flush and exit, so they
get ``--failure-grace`` (a few seconds), and only while a checkpoint write is under
way on their node: a survivor that will not exit on the signal is otherwise killed
as soon as that is clear (the node decides, by
:class:`elastic.core.failures.CheckpointWrite`). A stop asked of the launcher, a
scale-up at a checkpoint, a preemption notice and a run that ended let ranks finish
what they were told to do and get ``--grace-period``.
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass

from elastic.core.controller.machine import Phase
from elastic.core.failures import Failure, FailureKind
from elastic.core.messages import Outcome

__all__ = [
    "DEFAULT_FAILURE_GRACE_S", "STOP_TOOK_FAILURE_S", "DrainReason", "Draining", "Grace",
    "drain_grace", "exit_status", "failure_of_the_stop",
]

# A scheduler that ends a whole job (Slurm's scancel, requeue or preemption) signals every process
# of it at once: a rank can die (SIGKILLed as its node's processes go, or SIGTERMed) a moment
# before the launcher handles its own signal. A failure of that kind this close before the stop is
# taken as the stop's doing.
STOP_TOOK_FAILURE_S = 5.0
_STOP_KINDS = frozenset({FailureKind.KILLED, FailureKind.TERMINATED, FailureKind.PREEMPTED, FailureKind.NODE_LOST})


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


def failure_of_the_stop(draining: Draining | None, cause: Failure | None, stop_at: float) -> bool:
    """Whether a stop signal that comes while the run drains to end as failed makes it stopped:
    the drain's failure (``cause``) is a kill, a termination (or a preempted exit 0) or a lost node seen at most
    :data:`STOP_TOOK_FAILURE_S` before the stop, the way ranks die when their whole job is
    stopped, and the drain carries no status of its own (a crash loop, a lost backend)."""
    return (
        draining is not None
        and draining.outcome is Outcome.FAILED
        and draining.exit_status is None
        and cause is not None
        and cause.kind in _STOP_KINDS
        and 0.0 <= stop_at - cause.observed_at <= STOP_TOOK_FAILURE_S
    )


# Python exits on SIGTERM within a fraction of a second; a handler that flushes logs or
# writes an error file needs about a second more. 5 s covers that on a loaded machine,
# where the 30 s a checkpoint may need is lost on every restart. Survivors that never exit
# on SIGTERM (JAX's) wait it out only while a checkpoint write is under way on their node.
DEFAULT_FAILURE_GRACE_S = 5.0


@dataclass(frozen=True)
class Grace:
    """The seconds a drain waits, the option that set them, and why that one applies."""

    seconds: float
    option: str
    why: str
    collateral: bool = False  # --failure-grace: a survivor not writing a checkpoint need not wait it out

    def fields(self) -> dict[str, object]:
        """As the drain's ``phase_changed`` record holds it."""
        return {"grace_s": self.seconds, "grace_option": self.option, "grace_why": self.why}


_WHY = {
    DrainReason.SUCCEEDED: "the ranks' work is done",
    DrainReason.STOP_REQUESTED: "the launcher was asked to stop: ranks may save and exit",
    DrainReason.SCALE_UP: "the world grows at a checkpoint: ranks may save and exit",
    DrainReason.PREEMPTION: "a preemption (a notice, or a rank stopped by a signal from outside): ranks may save and exit",
    DrainReason.STRAGGLER: "a straggler's node is left out: ranks may save and exit",
}


def drain_grace(
    reason: DrainReason, *, grace_period_s: float, failure_grace_s: float, deadline_s: float | None = None
) -> Grace:
    """The grace of a drain for ``reason``: the notice's own deadline when it gave one,
    ``--failure-grace`` after a failure, else ``--grace-period``."""
    if deadline_s is not None:
        return Grace(deadline_s, "the notice's deadline", "a preemption notice: ranks may save until the node goes")
    if reason is DrainReason.FAILURE:
        return Grace(
            failure_grace_s, "--failure-grace",
            "after a failure the surviving ranks are collateral: their group is already broken "
            "(one that will not exit is killed at once unless a checkpoint write is under way)",
            collateral=True,
        )
    return Grace(grace_period_s, "--grace-period", _WHY.get(reason, f"drain for {reason.value}"))
