"""What a failure's signature means for the run: which exits are read, and which are not retried. Pure.

The controller calls :func:`diagnose_exit` where it classifies a rank's exit, and the
restart policy asks :func:`not_retried` before charging a budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from elastic.core.diagnosis.signatures import BUILTIN_SIGNATURES, Diagnosis, FailureClass, Signature, diagnose
from elastic.core.failures import Failure, FailureKind, WorkerExit, decode_returncode

__all__ = ["DIAGNOSED_KINDS", "diagnose_exit", "diagnosed", "not_retried"]

# Ends a rank's own words can explain. Not a hang nor an exit hang (the launcher killed it,
# whatever it printed last), not a lost node or a launch failure (no output), not an exit 0.
DIAGNOSED_KINDS = frozenset(
    {FailureKind.EXITED, FailureKind.CRASHED, FailureKind.KILLED, FailureKind.TERMINATED, FailureKind.COLLATERAL}
)


def diagnose_exit(
    exit: WorkerExit, kind: FailureKind, *, started: bool, rules: Sequence[Signature] = BUILTIN_SIGNATURES
) -> Diagnosis | None:
    """The signature of a failed exit of ``kind``: its log tail, then its error file's message.

    ``started``: the attempt had reached a training step (start-up rules no longer apply).
    """
    if kind not in DIAGNOSED_KINDS or exit.returncode is None:
        return None
    lines: tuple[str, ...] = exit.log_tail
    if exit.error_message:
        lines = (*lines, *exit.error_message.splitlines())
    exit_code, signum = decode_returncode(exit.returncode)
    return diagnose(lines, exit_code=exit_code, signal=signum, started=started, rules=rules)


def diagnosed(failure: Failure, exit: WorkerExit, *, started: bool, rules: Sequence[Signature]) -> Failure:
    """``failure`` with its diagnosis, when it is one the run's decision reads (not collateral)."""
    if failure.kind is FailureKind.COLLATERAL:
        return failure
    diagnosis = diagnose_exit(exit, failure.kind, started=started, rules=rules)
    return failure if diagnosis is None else replace(failure, diagnosis=diagnosis)


def not_retried(cause: Failure) -> str | None:
    """Why ``cause`` stops the run without a restart, or ``None``: a deterministic signature."""
    diagnosis = cause.diagnosis
    if diagnosis is None or diagnosis.failure_class is not FailureClass.DETERMINISTIC:
        return None
    return f"{diagnosis.signature} is deterministic: a restart fails the same way, so it was not retried"
