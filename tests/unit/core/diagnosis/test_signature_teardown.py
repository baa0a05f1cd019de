"""The end of a run: a crash on the way out, the work done, is finished; otherwise it is the teardown signature."""

from __future__ import annotations

import signal

from elastic.core.controller.controller import Controller
from elastic.core.controller.settings import ControllerSettings
from elastic.core.diagnosis.teardown import finished_in_teardown
from elastic.core.events import EventName
from elastic.core.failures import WorkerExit
from elastic.core.messages import (
    AttemptLaunched, AttemptPlanned, FinishRun, Outcome, PlanAttempt, RunStarted, WorkerExited, WorkersStopped,
)
from elastic.core.policy.restarts import ExitHang, RestartPolicy

TERMINATE = ("terminate called without an active exception",)


def ended(rank: int, returncode: int, at: float, *, done: bool = False, attempt: int = 0) -> WorkerExited:
    return WorkerExited(WorkerExit(attempt=attempt, rank=rank, node="n", returncode=returncode, observed_at=at,
                                   log_tail=TERMINATE if returncode else (), declared_done=done))


def running(exit_hang: ExitHang = ExitHang.RESTART) -> Controller:
    c = Controller(RestartPolicy.create(max_restarts=1), ControllerSettings(grace_s=5.0, exit_timeout_s=300.0, exit_hang=exit_hang))
    for observation in (RunStarted(0.0), AttemptPlanned(0, 2, 0.05), AttemptLaunched(0, 2, 0.1)):
        c.handle(observation)
    return c


def test_a_rank_that_said_done_then_crashed_is_finished_and_the_run_succeeds() -> None:
    """heartbeat(done=True), then SIGABRT in teardown: no failure; the journal keeps how it ended."""
    c = running()
    step = c.handle(ended(1, -signal.SIGABRT, 1.0, done=True))
    [record] = [r for r in step.records if r.event is EventName.WORKER_EXITED]
    assert {"rank": 1, "node": "n", "exit_code": None, "signal": "SIGABRT",
            "finished": "it said it was done (elastic.heartbeat(done=True)), then ended by SIGABRT on its way out"
            } == dict(record.fields)
    c.handle(ended(0, 0, 1.1))
    finish = c.handle(WorkersStopped(0, 1.2)).commands[0]
    assert isinstance(finish, FinishRun) and (Outcome.SUCCEEDED, 0) == (finish.outcome, finish.exit_status)


def test_with_exit_hang_succeed_a_crash_after_a_peer_s_exit_0_is_finished() -> None:
    """--exit-hang succeed: a peer's exit 0 is evidence enough, within --exit-timeout."""
    c = running(ExitHang.SUCCEED)
    c.handle(ended(0, 0, 1.0))
    c.handle(ended(1, -signal.SIGSEGV, 2.0))
    finish = c.handle(WorkersStopped(0, 2.1)).commands[0]
    assert isinstance(finish, FinishRun) and Outcome.SUCCEEDED == finish.outcome


def test_by_default_a_crash_after_a_peer_s_exit_0_is_the_teardown_signature_and_restarted() -> None:
    """No word from the rank that it finished: restarted, named teardown."""
    c = running()
    c.handle(ended(0, 0, 1.0))
    step = c.handle(ended(1, -signal.SIGABRT, 2.0))
    [failed] = [r for r in step.records if r.event is EventName.WORKER_FAILED]
    assert {"signature": "teardown", "class": "transient",
            "line": "terminate called without an active exception"} == failed.fields["diagnosis"]
    assert (PlanAttempt(1),) == c.handle(WorkersStopped(0, 2.1)).commands


def test_what_is_never_finished_in_teardown() -> None:
    """An exit 0, a lost node, a hang, a crash too long after the peer, a termination: not this rule's."""
    def exit(returncode: int | None, at: float = 1.0, **more: object) -> WorkerExit:
        return WorkerExit(attempt=0, rank=1, node="n", returncode=returncode, observed_at=at, **more)  # type: ignore[arg-type]

    kw = {"peer_exit_0_at": 0.5, "exit_timeout_s": 300.0, "exit_hang_succeeds": True}
    assert finished_in_teardown(exit(0), **kw) is None  # type: ignore[arg-type]
    assert finished_in_teardown(exit(None, node_lost="gone", declared_done=True), **kw) is None  # type: ignore[arg-type]
    assert finished_in_teardown(exit(-9, hung="no heartbeat", declared_done=True), **kw) is None  # type: ignore[arg-type]
    assert finished_in_teardown(exit(-6, at=400.0), **kw) is None  # type: ignore[arg-type]
    assert finished_in_teardown(exit(-15), **kw) is None  # type: ignore[arg-type]
    assert finished_in_teardown(exit(-6), **kw) is not None  # type: ignore[arg-type]
    assert finished_in_teardown(exit(1, declared_done=True), **{**kw, "exit_hang_succeeds": False}) is not None  # type: ignore[arg-type]
