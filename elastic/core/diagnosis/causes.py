"""What a failure's signature means for the run: which exits are read, which failure is not retried,
and which rank a symptom was waiting for. Pure.

The controller reads each exit it classifies through :func:`read_exit`, and the restart
policy asks :func:`not_retried` before charging a budget.

Root cause versus symptom: a symptom (a collective's timeout, a peer's closed socket, the
coordinator's missing heartbeats) is never the root cause while another rank's failure
explains it (:func:`elastic.core.failures.root_cause`). When the first failure of an
attempt is a symptom, the ranks the drain then ends are read too, and the one that
explains it becomes the root cause (journaled ``root_cause_revised``): a rank whose own
last words are a failure that is no symptom (a CUDA error, a missing module: it failed and
had not exited yet), or, when none said anything, a rank that had gone silent: whose last
training step was the lowest, below the symptom's rank's, so that the others waited for
it in a collective until they timed out. It was hung, and is reported so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from elastic.core.diagnosis.signatures import (
    BUILTIN_SIGNATURES, Diagnosis, FailureClass, Signature, diagnose, uncaught_diagnosis,
)
from elastic.core.failures import Failure, FailureKind, WorkerExit, decode_returncode, to_failure

__all__ = [
    "DIAGNOSED_KINDS", "Read", "Silence", "diagnose_exit", "is_symptom", "not_retried", "read_exit", "silent_ranks",
]

# Ends a rank's own words can explain. Not a hang nor an exit hang (the launcher killed it,
# whatever it printed last), not a lost node or a launch failure (no output), not an exit 0.
DIAGNOSED_KINDS = frozenset(
    {FailureKind.EXITED, FailureKind.CRASHED, FailureKind.KILLED, FailureKind.TERMINATED, FailureKind.COLLATERAL}
)


def diagnose_exit(
    exit: WorkerExit, kind: FailureKind, *, started: bool, rules: Sequence[Signature] = BUILTIN_SIGNATURES,
    after_exit_0: bool = False,
) -> Diagnosis | None:
    """The signature of a failed exit of ``kind``: its log tail, then its error file's message;
    with no rule matched, the exception that ended it (:func:`uncaught_diagnosis`).

    ``started``: the rank was past its start-up (:func:`elastic.core.evidence.past_startup`:
    start-up rules no longer apply); ``after_exit_0``: a peer of the attempt had exited 0 (the
    teardown rule's condition).
    """
    if kind not in DIAGNOSED_KINDS or exit.returncode is None:
        return None
    lines: tuple[str, ...] = exit.log_tail
    if exit.error_message:
        lines = (*lines, *exit.error_message.splitlines())
    exit_code, signum = decode_returncode(exit.returncode)
    ending = exit.ending()
    found = diagnose(
        lines, exit_code=exit_code, signal=signum, started=started, rules=rules, after_exit_0=after_exit_0,
        oom_kill=exit.oom_killed, ending=ending, gpus=exit.gpus,
    )
    if found is None and ending is not None:
        return uncaught_diagnosis(ending)
    return found


def is_symptom(failure: Failure | None) -> bool:
    """Whether ``failure`` has a symptom's signature."""
    return (
        failure is not None and failure.diagnosis is not None
        and failure.diagnosis.failure_class is FailureClass.SYMPTOM
    )


@dataclass(frozen=True)
class Silence:
    """The ranks an attempt's symptom was likely waiting for, their last step, and the symptom's rank's."""

    ranks: frozenset[int] = frozenset()
    step: int | None = None
    waited: int | None = None


def silent_ranks(symptom: Failure, steps: Mapping[int, int], world_size: int | None = None) -> Silence:
    """The ranks whose last step is the lowest of the attempt and below the symptom's rank's own
    (none without the steps to tell: every rank of the ``world_size`` must have shown one, else a
    victim whose steps were never heard would be taken for silent). Computed once, when the
    symptom becomes the root cause."""
    theirs = steps.get(symptom.rank)
    if theirs is None or len(steps) < 2 or (world_size is not None and len(steps) < world_size):
        return Silence()
    lowest = min(steps.values())
    if lowest >= theirs:
        return Silence()
    return Silence(frozenset(rank for rank, step in steps.items() if step == lowest), lowest, theirs)


@dataclass(frozen=True)
class Read:
    """An exit as the controller records it: the failure (with its diagnosis when read), and
    why it is the root cause the attempt's symptom waited for (``None``: it is not)."""

    failure: Failure
    explains: str | None = None


def read_exit(
    exit: WorkerExit,
    kind: FailureKind,
    *,
    cause: Failure | None,
    silence: Silence,
    started: bool,
    rules: Sequence[Signature],
    may_read: bool,
    step: int | None = None,
    after_exit_0: bool = False,
    after_symptom: bool = False,
    ran_s: float | None = None,
    stepped: bool = False,
) -> Read | None:
    """Read a failed exit of ``kind``, given the attempt's root cause so far (``cause``); ``None``: not read.

    A failure that can be a root cause is always read. A collateral one only while the cause
    is a symptom and ``may_read`` (the controller bounds how many a drain reads), or when it
    is a rank of ``silence``; it then explains the symptom if it said it failed itself, or if
    it was silent and said nothing of the kind (it becomes a ``hung`` failure). ``step``: the
    rank's last training step seen, kept on the failure; ``after_exit_0``: a peer had exited 0;
    ``after_symptom``: the attempt's symptom was already explained (the cause was revised): a
    collateral exit is still read while ``may_read``, so that its own symptom is counted under the
    root cause, but it explains nothing; ``ran_s``: seconds from the attempt's launch, kept on the
    failure; ``stepped``: the attempt had shown a training step, kept on the failure. An exception
    no rule knows (class ``unknown``) explains no symptom: a rank the drain ended may raise anything
    on its way out.
    """
    collateral = kind is FailureKind.COLLATERAL
    if not collateral or (after_symptom and may_read and not is_symptom(cause)):  # read for its own symptom
        diagnosis = diagnose_exit(exit, kind, started=started, rules=rules, after_exit_0=after_exit_0 and not collateral)
        return Read(replace(to_failure(exit, kind), diagnosis=diagnosis, step=step, ran_s=ran_s, stepped=stepped))
    if not is_symptom(cause) or not (may_read or exit.rank in silence.ranks):
        return None  # what a drained rank said, past the few a drain reads: not read (8,000 cost nothing)
    assert cause is not None and cause.diagnosis is not None
    failure = replace(to_failure(exit, kind), step=step, ran_s=ran_s, stepped=stepped)
    diagnosis = diagnose_exit(exit, kind, started=started, rules=rules)
    if diagnosis is not None:
        failure = replace(failure, diagnosis=diagnosis)
        if diagnosis.failure_class not in (FailureClass.SYMPTOM, FailureClass.UNKNOWN):
            return Read(failure, f"its own failure ({diagnosis.signature}) explains the {cause.diagnosis.signature} "
                                 f"of rank {cause.rank}")
        return Read(failure)
    if exit.rank in silence.ranks:
        step, waited = silence.step, silence.waited
        why = (f"silent since step {step} while rank {cause.rank} reached step {waited} and ended in "
               f"{cause.diagnosis.signature}: it was hung")
        return Read(replace(failure, kind=FailureKind.HUNG, message=why),
                    f"it went silent (step {step}) while rank {cause.rank} waited for it "
                    f"({cause.diagnosis.signature})")
    return Read(failure)


def not_retried(cause: Failure) -> str | None:
    """Why ``cause`` stops the run without a restart, or ``None``: a deterministic signature."""
    diagnosis = cause.diagnosis
    if diagnosis is None or diagnosis.failure_class is not FailureClass.DETERMINISTIC:
        return None
    return f"{diagnosis.signature} is deterministic: a restart fails the same way, so it was not retried"
