"""An identical failure twice is not a fluke: the same cause on two attempts in a row stops the run. Pure.

Two root causes are identical when they have the same signature (or, neither having one,
the same exit status), on the same rank, at the same training step (the last step the
launcher saw of that rank). With no step seen, both must have failed in their start-up
(:func:`elastic.core.evidence.past_startup`): a program whose progress lines the launcher
does not know may fail twice hours in, at different points, and that is no repeat. An
exit status alone with no step seen says too little (a script that exits 1 at start-up,
once for a missing file and once for a busy port) and never counts; nor do causes from
outside the program (a termination, a preemption, a lost node): they say nothing about
the next attempt.
"""

from __future__ import annotations

from elastic.core.evidence import past_startup
from elastic.core.failures import Failure, FailureKind

__all__ = ["identical_again", "identity"]

_FROM_OUTSIDE = frozenset({FailureKind.TERMINATED, FailureKind.PREEMPTED, FailureKind.NODE_LOST,
                           FailureKind.LAUNCH_FAILED})


def identity(failure: Failure) -> tuple[str, int, int | None] | None:
    """What makes two failures the same: (its signature or exit status, its rank, its step)."""
    if failure.kind in _FROM_OUTSIDE or (failure.diagnosis is None and failure.step is None):
        return None
    if failure.step is None and past_startup(step_seen=failure.stepped, ran_s=failure.ran_s,
                                             printed=bool(failure.log_tail)):
        return None  # no step of its own, and not in its start-up: where it failed is not known
    what = failure.diagnosis.signature if failure.diagnosis else f"exit status {failure.exit_status}"
    return what, failure.rank, failure.step


def identical_again(previous: Failure | None, cause: Failure) -> str | None:
    """Why ``cause`` stops the run, being the same as ``previous``, the root cause of the attempt
    just before; ``None`` when it is not."""
    if previous is None or previous.attempt != cause.attempt - 1:
        return None
    same = identity(cause)
    if same is None or same != identity(previous):
        return None
    what, rank, step = same
    where = "before any step" if step is None else f"at step {step}"
    return (f"identical to attempt {previous.attempt}'s failure ({what}, rank {rank}, {where}): "
            f"twice in a row is no fluke, so it was not retried")
