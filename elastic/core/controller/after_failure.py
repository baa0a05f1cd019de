"""The decision after an attempt's root cause: restart (charged to which budget) or end. Pure.

One function, :func:`decide_after`, serves both a first failure and a root cause
revised later (a lost node that explains its peers' failures).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from elastic.core.controller.drain import DrainReason, Draining
from elastic.core.events import EventName
from elastic.core.failures import Failure, FailureKind, WorkerExit
from elastic.core.controller.machine import Phase
from elastic.core.messages import Outcome
from elastic.core.policy.restarts import BudgetName, RestartPolicy

__all__ = ["AfterFailure", "as_consequences", "decide_after", "node_loss_explains"]

# Failures a healthy rank shows when a peer's machine vanishes mid-collective.
_PEER_FAILURE_KINDS = frozenset(
    {FailureKind.EXITED, FailureKind.CRASHED, FailureKind.KILLED, FailureKind.TERMINATED}
)


@dataclass(frozen=True)
class AfterFailure:
    """A restart decision as the controller applies it: the policy after charging, the
    budget charged, what to journal and where the drain leads."""

    policy: RestartPolicy
    restart: bool
    charged: BudgetName | None
    event: EventName  # restart_scheduled, budget_exhausted or restart_refused
    fields: dict[str, object]
    next_phase: Phase
    outcome: Outcome | None
    detail: str
    # A preempted rank's peers may save as on a notice (--grace-period, no crash-loop count).
    reason: DrainReason = DrainReason.FAILURE

    def draining(self) -> Draining:
        """The drain this decision begins."""
        return Draining(self.reason, self.next_phase, self.outcome, self.detail)

    def redirect(self, draining: Draining) -> Draining:
        """A drain already under way, sent where this decision leads."""
        return replace(draining, next_phase=self.next_phase, outcome=self.outcome, detail=self.detail)


def decide_after(policy: RestartPolicy, cause: Failure, now: float, *, refused: str | None = None) -> AfterFailure:
    """Charge ``cause`` to the policy and say what follows; ``refused``: why it is not retried
    whatever the policy (the same failure as the attempt before's: elastic.core.diagnosis.repeats)."""
    if refused is not None:
        return AfterFailure(
            policy, False, None, EventName.RESTART_REFUSED, {"reason": refused, "budget": None},
            Phase.DONE, Outcome.FAILED, f"{cause.describe()}; {refused}",
        )
    decision, policy = policy.decide(cause, now)
    budget = decision.budget
    if decision.restart:
        return AfterFailure(
            policy, True, budget, EventName.RESTART_SCHEDULED,
            {
                "reason": decision.reason,
                "budget": budget.value if budget else None,
                "remaining": policy.budget(budget).remaining(now) if budget else None,
            },
            Phase.PENDING, None, cause.describe(),
            DrainReason.PREEMPTION if cause.kind is FailureKind.PREEMPTED else DrainReason.FAILURE,
        )
    return AfterFailure(
        policy, False, None,
        EventName.BUDGET_EXHAUSTED if budget is not None else EventName.RESTART_REFUSED,
        {"reason": decision.reason, "budget": budget.value if budget else None},
        Phase.DONE, Outcome.FAILED, f"{cause.describe()}; {decision.reason}",
    )


def node_loss_explains(cause: Failure | None, exit: WorkerExit, draining: Draining | None) -> bool:
    """Whether a node found lost while draining explains the failure that began it.

    A machine that vanishes is noticed late (Ray declares it dead only after
    its health checks fail), while its peers fail at once, when their
    collective breaks. Those peers' failures were the consequence.

    Never in a final drain (a stop, a backend fault): the revision would send a run
    the launcher was told to end to a relaunch, and after a backend fault the
    nodes reported lost are only ranks whose exits could no longer be heard.
    """
    return (
        exit.node_lost is not None
        and draining is not None
        and draining.reason is DrainReason.FAILURE
        and not draining.final
        and cause is not None
        and cause.kind in _PEER_FAILURE_KINDS
        and cause.node != exit.node
    )


def as_consequences(failures: list[Failure]) -> list[Failure]:
    """The attempt's failures so far, each now collateral to a cause found later."""
    return [
        f if f.kind is FailureKind.COLLATERAL else replace(f, kind=FailureKind.COLLATERAL)
        for f in failures
    ]
