"""An identical failure twice is not a fluke: the same cause on two attempts in a row stops the run."""

from __future__ import annotations

import signal
from dataclasses import replace

from elastic.core.controller.controller import Controller
from elastic.core.controller.settings import ControllerSettings
from elastic.core.diagnosis.repeats import identical_again
from elastic.core.diagnosis.signatures import Diagnosis, FailureClass
from elastic.core.events import EventName
from elastic.core.failures import Failure, FailureKind, WorkerExit
from elastic.core.messages import (
    AttemptLaunched, AttemptPlanned, FinishRun, Outcome, PlanAttempt, RankStep, RunStarted, StepsSeen, WorkerExited,
    WorkersStopped,
)
from elastic.core.policy.restarts import RestartPolicy

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.22 GiB. GPU 0 has a total capacity of "
       "15.69 GiB of which 3.71 GiB is free.",)
OOM_DIAGNOSIS = Diagnosis("cuda-oom", FailureClass.TRANSIENT, OOM[0])


def failure(attempt: int, *, rank: int = 1, step: int | None = 5, diagnosis: Diagnosis | None = OOM_DIAGNOSIS,
            kind: FailureKind = FailureKind.EXITED, exit_code: int = 1, ran_s: float | None = 3.0) -> Failure:
    return Failure(kind, attempt, rank, "n", 1.0, exit_code=exit_code, diagnosis=diagnosis, step=step, ran_s=ran_s,
                   log_tail=OOM)


def test_the_same_signature_rank_and_step_twice_in_a_row_is_identical() -> None:
    """The reason names what repeated and says it was not retried."""
    assert ("identical to attempt 0's failure (cuda-oom, rank 1, at step 5): twice in a row is no fluke, so it "
            "was not retried") == identical_again(failure(0), failure(1))


def test_a_different_step_rank_or_signature_is_not_identical() -> None:
    """Progress between them, another rank, another cause: each may be a fluke."""
    assert identical_again(failure(0), failure(1, step=7)) is None
    assert identical_again(failure(0), failure(1, rank=2)) is None
    assert identical_again(failure(0), failure(1, diagnosis=None)) is None


def test_without_a_signature_the_exit_status_and_step_make_it_identical() -> None:
    """No rule matched either: the same exit status of the same rank at the same step."""
    assert identical_again(failure(0, diagnosis=None), failure(1, diagnosis=None)) is not None
    assert identical_again(failure(0, diagnosis=None), failure(1, diagnosis=None, exit_code=2)) is None


def test_an_exit_status_alone_before_any_step_says_too_little() -> None:
    """Exit 1 at start-up twice, no signature, no step: not taken as identical (budgets decide)."""
    assert identical_again(failure(0, diagnosis=None, step=None), failure(1, diagnosis=None, step=None)) is None
    assert identical_again(failure(0, step=None), failure(1, step=None)) is not None  # a signature says more


def test_with_no_step_only_two_failures_in_start_up_are_identical() -> None:
    """A program whose progress lines are not known: the same NaN hours in at two different points
    is no repeat; nor is a failure whose time from launch is not known (the cheaper error)."""
    hours_in = 3 * 3600.0
    assert identical_again(failure(0, step=None, ran_s=hours_in), failure(1, step=None, ran_s=hours_in)) is None
    assert identical_again(failure(0, step=None, ran_s=None), failure(1, step=None, ran_s=None)) is None
    assert identical_again(failure(0, step=None, ran_s=2.0), failure(1, step=None, ran_s=hours_in)) is None


def test_causes_from_outside_and_attempts_not_in_a_row_never_count() -> None:
    """A termination says nothing of the next attempt; nor does a failure two attempts back."""
    assert identical_again(failure(0, kind=FailureKind.TERMINATED), failure(1, kind=FailureKind.TERMINATED)) is None
    assert identical_again(failure(0), failure(2)) is None
    assert identical_again(None, failure(1)) is None


def _attempt(c: Controller, number: int, step: int, at: float) -> tuple:  # type: ignore[type-arg]
    c.handle(AttemptPlanned(number, 2, at))
    c.handle(AttemptLaunched(number, 2, at + 0.1))
    c.handle(StepsSeen(number, "n", (RankStep(1, step, "heartbeat", at + 0.2),), at + 0.2))
    failed = c.handle(WorkerExited(WorkerExit(attempt=number, rank=1, node="n", returncode=1, observed_at=at + 0.3,
                                              log_tail=OOM)))
    c.handle(WorkerExited(WorkerExit(attempt=number, rank=0, node="n", returncode=-signal.SIGTERM,
                                     observed_at=at + 0.4)))
    return failed.records, c.handle(WorkersStopped(number, at + 0.5)).commands


def test_the_controller_stops_at_the_second_identical_failure_with_budget_left() -> None:
    """An out-of-memory at step 5 twice: stopped after two attempts, not four."""
    c = Controller(RestartPolicy.create(max_restarts=3), ControllerSettings(grace_s=5.0))
    c.handle(RunStarted(0.0))
    _, commands = _attempt(c, 0, 5, 1.0)
    assert (PlanAttempt(1),) == commands
    records, commands = _attempt(c, 1, 5, 2.0)
    [refused] = [r for r in records if r.event is EventName.RESTART_REFUSED]
    assert "identical to attempt 0's failure (cuda-oom, rank 1, at step 5)" in str(refused.fields["reason"])
    [worker_failed] = [r for r in records if r.event is EventName.WORKER_FAILED]
    assert 5 == worker_failed.fields["step"]
    finish = commands[0]
    assert isinstance(finish, FinishRun) and (Outcome.FAILED, 1) == (finish.outcome, finish.exit_status)
    assert "twice in a row is no fluke" in finish.reason


def test_the_controller_restarts_when_the_step_moved() -> None:
    """The same error at a later step: the run made progress between them; restart."""
    c = Controller(RestartPolicy.create(max_restarts=3), ControllerSettings(grace_s=5.0))
    c.handle(RunStarted(0.0))
    _attempt(c, 0, 5, 1.0)
    _, commands = _attempt(c, 1, 9, 2.0)
    assert [2] == [command.attempt for command in commands if isinstance(command, PlanAttempt)]


def test_a_dead_driver_s_last_root_cause_counts_as_the_attempt_before() -> None:
    """Recovery: the taken-over run's last cause and the new driver's first are two in a row."""
    from elastic.core.messages import Resumed

    c = Controller(RestartPolicy.create(max_restarts=3), ControllerSettings(grace_s=5.0, first_attempt=1))
    c.handle(RunStarted(0.0, Resumed(no_progress_streak=1, last_cause=failure(0))))
    records, commands = _attempt(c, 1, 5, 2.0)
    assert EventName.RESTART_REFUSED in [r.event for r in records]
    assert isinstance(commands[0], FinishRun)


NOT_FOUND = ("Traceback (most recent call last):", '  File "train.py", line 80, in <module>',
             "FileNotFoundError: [Errno 2] No such file or directory: '/nfs/data/shard-0193.bin'")
NAN = ("epoch 3 iter 1500 loss nan",)


def _no_step_attempt(c: Controller, number: int, at: float, ran_s: float, tail: tuple[str, ...]) -> tuple:  # type: ignore[type-arg]
    """An attempt of a program whose progress lines elastic does not know: rank 1 fails ``ran_s`` in."""
    c.handle(AttemptPlanned(number, 2, at))
    c.handle(AttemptLaunched(number, 2, at))
    failed = c.handle(WorkerExited(WorkerExit(attempt=number, rank=1, node="n", returncode=1,
                                              observed_at=at + ran_s, log_tail=tail)))
    c.handle(WorkerExited(WorkerExit(attempt=number, rank=0, node="n", returncode=-signal.SIGTERM,
                                     observed_at=at + ran_s + 0.1)))
    return failed.records, c.handle(WorkersStopped(number, at + ran_s + 0.2)).commands


def test_a_missing_file_hours_into_a_run_with_unknown_progress_lines_is_restarted() -> None:
    """No step is ever seen, but the rank ran for hours and printed: past its start-up, so the
    FileNotFoundError (a shard briefly invisible on NFS) is no deterministic file-not-found; at
    start-up it is."""
    c = Controller(RestartPolicy.create(max_restarts=3), ControllerSettings(grace_s=5.0))
    c.handle(RunStarted(0.0))
    records, commands = _no_step_attempt(c, 0, 1.0, 3 * 3600.0, NOT_FOUND)
    assert (PlanAttempt(1),) == commands
    [failed] = [r for r in records if r.event is EventName.WORKER_FAILED]
    assert failed.fields["diagnosis"]["signature"] == "exception:FileNotFoundError"  # type: ignore[index]

    early = Controller(RestartPolicy.create(max_restarts=3), ControllerSettings(grace_s=5.0))
    early.handle(RunStarted(0.0))
    _, commands = _no_step_attempt(early, 0, 1.0, 2.0, NOT_FOUND)
    assert isinstance(commands[0], FinishRun) and "file-not-found is deterministic" in commands[0].reason


def test_two_nan_losses_at_different_points_of_a_run_with_unknown_progress_lines_are_not_identical() -> None:
    """Hours in, twice, no step known: where each failed is not known, so it is no repeat."""
    c = Controller(RestartPolicy.create(max_restarts=3), ControllerSettings(grace_s=5.0))
    c.handle(RunStarted(0.0))
    _no_step_attempt(c, 0, 1.0, 2 * 3600.0, NAN)
    _, commands = _no_step_attempt(c, 1, 3 * 3600.0, 5 * 3600.0, NAN)
    assert [2] == [command.attempt for command in commands if isinstance(command, PlanAttempt)]


def test_a_failure_with_no_step_of_its_own_in_an_attempt_that_trained_is_no_repeat_of_one_before_any_step() -> None:
    """A rank that prints no step (rank 0 prints them), or one that ended while no driver watched
    (its step was never read), in an attempt that had trained: not "before any step", so the same
    signature as the last attempt's start-up failure is no repeat (the cheaper error: a restart)."""
    before_any_step = failure(0, step=None, ran_s=2.0)
    assert identical_again(before_any_step, failure(1, step=None, ran_s=2.0)) is not None
    assert identical_again(before_any_step, replace(failure(1, step=None, ran_s=2.0), stepped=True)) is None


def _start_up_oom(c: Controller, number: int, at: float, *, peer_step: bool) -> list:  # type: ignore[type-arg]
    """Attempt ``number``: rank 1, which prints no step, fails with a CUDA OOM 0.3 s in; rank 0
    showed a training step first when ``peer_step``. The commands after the drain."""
    c.handle(AttemptPlanned(number, 2, at))
    c.handle(AttemptLaunched(number, 2, at + 0.1))
    if peer_step:
        c.handle(StepsSeen(number, "n", (RankStep(0, 1, "output", at + 0.2, first_step=1),), at + 0.2))
    c.handle(WorkerExited(WorkerExit(attempt=number, rank=1, node="n", returncode=1, observed_at=at + 0.4,
                                     log_tail=OOM)))
    c.handle(WorkerExited(WorkerExit(attempt=number, rank=0, node="n", returncode=-signal.SIGTERM,
                                     observed_at=at + 0.5)))
    return list(c.handle(WorkersStopped(number, at + 0.6)).commands)


def test_through_the_controller_a_peers_step_makes_a_stepless_ranks_failure_no_repeat_of_a_start_up_one() -> None:
    """The same OOM of rank 1 in two attempts in a row, each 0.3 s in, with no step of rank 1's
    own: a repeat of a start-up failure, so not retried; but when rank 0 had shown a step in the
    second attempt, rank 1's failure is at an unknown place, no repeat, and the run restarts."""
    for peer_step, restarted in ((False, False), (True, True)):
        c = Controller(RestartPolicy.create(max_restarts=3), ControllerSettings(grace_s=1.0))
        c.handle(RunStarted(0.0))
        _start_up_oom(c, 0, 0.0, peer_step=False)
        commands = _start_up_oom(c, 1, 10.0, peer_step=peer_step)
        assert restarted == any(isinstance(command, PlanAttempt) for command in commands), (peer_step, commands)
