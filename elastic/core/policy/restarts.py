"""Restart policy: the kind-to-action table, windowed budgets and the restart decision."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace


from elastic.core.diagnosis.causes import not_retried
from elastic.core.diagnosis.signatures import BUILTIN_SIGNATURES, FailureClass, Signature
from elastic.core.failures import Failure, FailureKind
from elastic.core.labels import plural
from elastic.core.policy.rules import ExitRule, RuleAction, match_rule

__all__ = [
    "DEFAULT_ACTIONS",
    "DEFAULT_MAX_PREEMPTIONS",
    "DEFAULT_PREEMPTION_WINDOW_S",
    "DEFAULT_EXIT_TIMEOUT_S",
    "Action",
    "Backoff",
    "Budget",
    "BudgetName",
    "Decision",
    "ExitHang",
    "KindAction",
    "RestartPolicy",
    "ScaleUp",
]


# Preemptions are not capped in number, only in rate (DESIGN §5): more than
# this many in one window is a loop (something keeps killing the ranks), not
# the weather of a preemptible pool, and ends the run.
DEFAULT_MAX_PREEMPTIONS = 10
DEFAULT_PREEMPTION_WINDOW_S = 60.0


# How long ranks still running may outlive a peer's exit 0 before they are exit-hung.
DEFAULT_EXIT_TIMEOUT_S = 300.0


class ExitHang(enum.Enum):
    """What an exit hang of ranks that never said they finished amounts to (``--exit-hang``)."""

    RESTART = "restart"  # a failure: charged to --max-restarts, the group restarts
    SUCCEED = "succeed"  # a peer's exit 0 is evidence enough that the job finished


class Action(enum.Enum):
    RESTART = "restart"
    FAIL = "fail"
    IGNORE = "ignore"


class BudgetName(enum.Enum):
    FAILURES = "failures"
    PREEMPTIONS = "preemptions"


@dataclass(frozen=True)
class KindAction:
    action: Action
    budget: BudgetName | None


DEFAULT_ACTIONS: dict[FailureKind, KindAction] = {
    FailureKind.EXITED: KindAction(Action.RESTART, BudgetName.FAILURES),
    FailureKind.CRASHED: KindAction(Action.RESTART, BudgetName.FAILURES),
    FailureKind.KILLED: KindAction(Action.RESTART, BudgetName.FAILURES),
    FailureKind.TERMINATED: KindAction(Action.RESTART, BudgetName.PREEMPTIONS),
    FailureKind.HUNG: KindAction(Action.RESTART, BudgetName.FAILURES),
    FailureKind.EXIT_HUNG: KindAction(Action.RESTART, BudgetName.FAILURES),
    FailureKind.PREEMPTED: KindAction(Action.RESTART, BudgetName.PREEMPTIONS),
    FailureKind.NODE_LOST: KindAction(Action.RESTART, BudgetName.PREEMPTIONS),
    FailureKind.LAUNCH_FAILED: KindAction(Action.FAIL, None),
    FailureKind.COLLATERAL: KindAction(Action.IGNORE, None),
}


@dataclass(frozen=True)
class Budget:
    """Restart intensity in the Erlang/OTP sense: at most ``limit`` charges per window.

    ``limit=None`` is unlimited; ``window_s=None`` counts over the whole run.
    Immutable: :meth:`charge` returns the budget after one more restart.
    """

    name: BudgetName
    limit: int | None
    window_s: float | None = None
    charges: tuple[float, ...] = ()

    def used(self, now: float) -> int:
        if self.window_s is None:
            return len(self.charges)
        return sum(1 for at in self.charges if at > now - self.window_s)

    def remaining(self, now: float) -> int | None:
        if self.limit is None:
            return None
        return max(0, self.limit - self.used(now))

    def allows(self, now: float) -> bool:
        remaining = self.remaining(now)
        return remaining is None or remaining > 0

    def charge(self, now: float) -> Budget:
        return replace(self, charges=self.charges + (now,))

    def refund(self) -> Budget:
        """The budget without its latest charge (a restart charged to the wrong source)."""
        return replace(self, charges=self.charges[:-1])


@dataclass(frozen=True)
class Decision:
    """What to do after an attempt's root cause: restart or not, and why."""

    restart: bool
    reason: str
    budget: BudgetName | None = None


@dataclass(frozen=True)
class Backoff:
    """Waits between restarts: exponential from ``initial_s``, jittered, capped at ``max_s``.

    The jitter, up to half of ``initial_s``, is ``rng()`` (uniform in [0, 1)) scaled:
    the randomness is injected (the driver passes ``random.random``; the core draws
    none, so the default is no jitter), and the driver does the waiting.
    """

    initial_s: float = 1.0
    max_s: float = 60.0
    rng: Callable[[], float] = field(default=lambda: 0.0, repr=False, compare=False)

    def delay_s(self, failures_in_a_row: int) -> float:
        """The wait before restart number ``failures_in_a_row`` with no progress between."""
        if failures_in_a_row < 1 or self.max_s == 0:
            return 0.0
        try:
            exponential = min(self.max_s, self.initial_s * 2.0 ** (failures_in_a_row - 1))
        except OverflowError:
            exponential = self.max_s
        return min(self.max_s, exponential + self.rng() * self.initial_s / 2)


@dataclass(frozen=True)
class RestartPolicy:
    """Pure restart decisions over per-source budgets, user rules and backoff."""

    failures: Budget
    preemptions: Budget
    rules: tuple[ExitRule, ...] = ()
    backoff: Backoff = field(default_factory=Backoff)
    # The failure signatures the controller reads exits with: --signature rules, then the built-ins.
    signatures: tuple[Signature, ...] = BUILTIN_SIGNATURES

    @classmethod
    def create(
        cls,
        *,
        max_restarts: int,
        restart_window_s: float | None = None,
        max_preemptions: int | None = DEFAULT_MAX_PREEMPTIONS,
        preemption_window_s: float | None = DEFAULT_PREEMPTION_WINDOW_S,
        rules: Sequence[ExitRule] = (),
        backoff: Backoff | None = None,
        signatures: Sequence[Signature] = (),
    ) -> RestartPolicy:
        """``signatures``: the user's own (``--signature``), tried before the built-ins."""
        return cls(
            failures=Budget(BudgetName.FAILURES, max_restarts, restart_window_s),
            preemptions=Budget(BudgetName.PREEMPTIONS, max_preemptions, preemption_window_s),
            rules=tuple(rules),
            backoff=backoff or Backoff(),
            signatures=(*signatures, *BUILTIN_SIGNATURES),
        )

    def with_charges(self, failures: Sequence[float], preemptions: Sequence[float]) -> RestartPolicy:
        """The policy with restarts already charged (a resumed run keeps its counts)."""
        return replace(
            self,
            failures=replace(self.failures, charges=tuple(failures)),
            preemptions=replace(self.preemptions, charges=tuple(preemptions)),
        )

    def budget(self, name: BudgetName) -> Budget:
        return self.failures if name is BudgetName.FAILURES else self.preemptions

    def refunded(self, name: BudgetName) -> RestartPolicy:
        """The policy with the latest charge to ``name`` taken back."""
        if name is BudgetName.FAILURES:
            return replace(self, failures=self.failures.refund())
        return replace(self, preemptions=self.preemptions.refund())

    def decide(self, cause: Failure, now: float) -> tuple[Decision, RestartPolicy]:
        """Decide on a root cause; returns the decision and the policy after charging.

        The first matching ``--on-exit`` rule wins; then a deterministic signature stops the
        run (:func:`elastic.core.diagnosis.causes.not_retried`); otherwise the kind's default.
        """
        user_rule = match_rule(self.rules, cause)
        refusal = not_retried(cause) if user_rule is None else None
        if refusal is not None:
            return Decision(False, refusal), self
        if user_rule is not None:
            if user_rule.action is RuleAction.FAIL:
                return Decision(False, f"--on-exit {user_rule.spec}"), self
            if user_rule.action is RuleAction.RESTART_FREE:
                return Decision(True, f"--on-exit {user_rule.spec}: restart, not counted"), self
            rule = KindAction(Action.RESTART, BudgetName.FAILURES)
        elif cause.diagnosis is not None and cause.diagnosis.failure_class is FailureClass.NODE:
            # The node is at fault: charged like a lost node (its ranks' code is not).
            rule = KindAction(Action.RESTART, BudgetName.PREEMPTIONS)
        elif cause.kind is FailureKind.COLLATERAL and cause.diagnosis is not None:
            # A rank ended by the drain whose own words explain the failure that began it.
            rule = KindAction(Action.RESTART, BudgetName.FAILURES)
        else:
            rule = DEFAULT_ACTIONS[cause.kind]
        if rule.action is not Action.RESTART or rule.budget is None:
            return Decision(False, f"{cause.kind.value} is never restarted"), self
        budget = self.budget(rule.budget)
        if not budget.allows(now):
            reason = f"{rule.budget.value} budget exhausted ({plural(budget.limit or 0, 'restart')}"
            reason += " in the run)" if budget.window_s is None else f" per {budget.window_s:g}s)"
            return Decision(False, reason, rule.budget), self
        charged = budget.charge(now)
        policy = (
            replace(self, failures=charged)
            if rule.budget is BudgetName.FAILURES
            else replace(self, preemptions=charged)
        )
        what = cause.diagnosis.signature if cause.kind is FailureKind.COLLATERAL and cause.diagnosis else cause.kind.value
        return Decision(True, f"{what}: restart", rule.budget), policy


@dataclass(frozen=True)
class ScaleUp:
    """When to grow the world (DESIGN §7): at a checkpoint boundary, at most once per interval."""

    enabled: bool = True
    interval_s: float = 300.0
    max_nodes: int = 1

    def should_grow(
        self,
        *,
        now: float,
        nodes: int,
        available: int,
        new_checkpoint: bool,
        last_grown_at: float | None,
    ) -> bool:
        """More usable nodes than in use, room below MAX, a fresh checkpoint, interval passed."""
        if not self.enabled or not new_checkpoint:
            return False
        if nodes >= self.max_nodes or available <= nodes:
            return False
        return last_grown_at is None or now - last_grown_at >= self.interval_s
