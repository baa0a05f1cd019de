"""A rank's exit judged, in one place and in one readable order: success, finished, preempted, or
failed with its kind. Pure.

Every exit the controller hears goes through :func:`judge_exit`, which applies the rules in the
order below, each reading the typed evidence of how the rank ended
(:mod:`elastic.core.evidence`, carried on :class:`elastic.core.failures.WorkerExit`). Where the
evidence is missing or conflicts, the verdict takes the cheaper error, in this order of harm: a
false success is worse than rerunning a finished job, which is worse than stopping a run a
restart would fix, which is worse than one restart too many (docs/failures/verdicts.md).

1. **A launch that failed** is ``launch-failed``, whatever else: the command itself is broken.
2. **A stop handler that merely ran** is no stop: the rank trained
   :data:`elastic.core.rank_ends.STEPS_AFTER_STOP` steps or more after it caught the signal,
   counted from its first step report at or after the catch (with no report after it, it
   stopped) (:func:`elastic.core.rank_ends.trained_after_stop`); its stop sign is passed over.
3. **A crash on the way out after the work was done** is finished, no failure: the rank said it
   was done, or (``--exit-hang succeed``) a peer exited 0 within ``--exit-timeout`` before it
   (:func:`elastic.core.diagnosis.teardown.finished_in_teardown`).
4. **An exit 0** is a success, unless the rank was told to stop from outside and exited because of
   it (a stop sign the launcher did not cause, the job not said done): then ``preempted``
   (:func:`elastic.core.failures.classify`).
5. **Any other exit** is a failure of its kind: ``collateral`` once the launcher stopped the
   attempt or another rank failed first, else by how it ended (exited, crashed, killed,
   terminated, hung, node-lost).

Not here, because they are judged on what the node saw before a kill, not at an exit: a rank
killed as hung at exit is judged finished or not by :func:`elastic.core.rank_ends.judge_finished`;
why a failure happened (its signature) is :mod:`elastic.core.diagnosis`'.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from elastic.core.diagnosis.teardown import finished_in_teardown
from elastic.core.failures import FailureKind, WorkerExit, classify
from elastic.core.rank_ends import trained_after_stop

__all__ = ["ExitContext", "ExitVerdict", "judge_exit"]


@dataclass(frozen=True)
class ExitContext:
    """What the attempt knew when the exit came.

    ``stop_sent``: the launcher had sent its own stop (a drain); ``failure_seen``: another rank
    failed first; ``done_seen``: a rank of the attempt said the job was done; ``peer_exit_0_at``:
    when the attempt's first exit 0 came (None: none yet); ``exit_timeout_s``/``exit_hang_succeeds``:
    ``--exit-timeout`` and ``--exit-hang succeed``; ``steps_since``: the steps the rank reached after
    a moment that many seconds before its exit (None: its steps are not known).
    """

    stop_sent: bool = False
    failure_seen: bool = False
    done_seen: bool = False
    peer_exit_0_at: float | None = None
    exit_timeout_s: float | None = None
    exit_hang_succeeds: bool = False
    steps_since: Callable[[float], int | None] | None = None


@dataclass(frozen=True)
class ExitVerdict:
    """An exit judged: ``kind`` None for a success (or a finished crash on the way out, with
    ``finished`` saying why), else the failure's kind; ``not_stopped``: why a stop sign was passed
    over; ``exit``: the exit as judged (without the stop sign passed over)."""

    exit: WorkerExit
    kind: FailureKind | None
    finished: str | None = None
    not_stopped: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.kind is None


def judge_exit(exit: WorkerExit, context: ExitContext) -> ExitVerdict:
    """Judge one rank's exit by the rules of this module, in their order."""
    if exit.launch_error is not None:
        return ExitVerdict(exit, FailureKind.LAUNCH_FAILED)
    not_stopped = None
    if exit.stopped_by is not None and exit.account is not None and context.steps_since is not None:
        not_stopped = trained_after_stop(exit.account, context.steps_since)
        if not_stopped is not None:
            exit = replace(exit, stopped_by=None)
    finished = finished_in_teardown(
        exit, peer_exit_0_at=context.peer_exit_0_at, exit_timeout_s=context.exit_timeout_s,
        exit_hang_succeeds=context.exit_hang_succeeds,
    )
    if finished is not None:
        return ExitVerdict(exit, None, finished=finished, not_stopped=not_stopped)
    kind = classify(exit, stop_sent=context.stop_sent, failure_seen=context.failure_seen, done_seen=context.done_seen)
    return ExitVerdict(exit, kind, not_stopped=not_stopped)
