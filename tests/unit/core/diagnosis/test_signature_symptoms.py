"""Root cause versus symptom: a collective's timeout is never the cause while another rank's failure explains it."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

from elastic.core.controller.attempts import COLLATERAL_LISTED
from elastic.core.controller.controller import Controller
from elastic.core.controller.settings import ControllerSettings
from elastic.core.diagnosis.signatures import Diagnosis, FailureClass
from elastic.core.events import EventName
from elastic.core.failures import Failure, FailureKind, GraceKill, Disposition, WorkerExit, root_cause
from elastic.core.messages import (
    AttemptLaunched, AttemptPlanned, FinishRun, Outcome, PlanAttempt, RankStep, RunStarted, StepsSeen, WorkerExited,
    WorkersStopped,
)
from elastic.core.options.config import RunConfig
from elastic.core.policy.restarts import RestartPolicy
from elastic.run.driver import Driver, RunResult
from elastic.run.records.journal import RunDirectory
from elastic.testing import FakeBackend, FakeClock
from elastic.views.report import summary_lines

WATCHDOG = ("[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
            "Timeout(ms)=600000) ran for 600060 milliseconds before timing out.",
            "terminate called after throwing an instance of 'c10::DistBackendError'")
ILLEGAL = ("RuntimeError: CUDA error: an illegal memory access was encountered",
           "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
           "might be incorrect.")
MISSING = ("Traceback (most recent call last):", '  File "/work/train.py", line 2, in <module>',
           "ModuleNotFoundError: No module named 'site_plugin'")


def exited(rank: int, returncode: int, tail: tuple[str, ...] = (), at: float = 1.0, **more: object) -> WorkerExited:
    return WorkerExited(WorkerExit(attempt=0, rank=rank, node=f"n{rank}", returncode=returncode, observed_at=at,
                                   log_tail=tail, **more))  # type: ignore[arg-type]


def running(world: int = 3, max_restarts: int = 3) -> Controller:
    c = Controller(RestartPolicy.create(max_restarts=max_restarts), ControllerSettings(grace_s=5.0))
    for observation in (RunStarted(0.0), AttemptPlanned(0, world, 0.05), AttemptLaunched(0, world, 0.1)):
        c.handle(observation)
    return c


def test_a_cuda_error_seen_in_the_drain_is_the_root_cause_of_the_timeouts_before_it() -> None:
    """Role beats time: rank 0's watchdog fired first, rank 1's own CUDA error explains it."""
    c = running()
    first = c.handle(exited(0, -signal.SIGABRT, WATCHDOG, at=1.0))
    assert EventName.RESTART_SCHEDULED in [r.event for r in first.records]
    step = c.handle(exited(1, -signal.SIGTERM, ILLEGAL, at=1.2))
    [revised] = [r for r in step.records if r.event is EventName.ROOT_CAUSE_REVISED]
    assert "its own failure (cuda-error) explains the nccl-timeout of rank 0" == revised.fields["reason"]
    assert "failures" == revised.fields["refunded"]
    cause = c.attempts[0].root_cause
    assert cause is not None and (1, "cuda-error") == (cause.rank, cause.diagnosis.signature)  # type: ignore[union-attr]
    assert "rank 1 on n1 failed (cuda-error), ended by the drain (SIGTERM, signal 15)" == cause.describe()
    assert [FailureKind.COLLATERAL, FailureKind.COLLATERAL] == [f.kind for f in c.attempts[0].failures]
    c.handle(exited(2, -signal.SIGTERM, WATCHDOG, at=1.3))
    assert (PlanAttempt(1),) == c.handle(WorkersStopped(0, 1.4)).commands
    assert 2 == c.policy.failures.remaining(2.0)  # charged once, not twice


def test_a_rank_that_went_silent_while_the_others_timed_out_is_the_root_cause_and_was_hung() -> None:
    """No rank said why: the one whose steps stopped first is the culprit, reported hung."""
    c = running()
    c.handle(StepsSeen(0, "n", (RankStep(0, 57, "heartbeat", 0.5), RankStep(1, 3, "heartbeat", 0.5),
                                RankStep(2, 57, "heartbeat", 0.5)), 0.5))
    c.handle(exited(0, -signal.SIGABRT, WATCHDOG, at=1.0))
    c.handle(exited(2, -signal.SIGABRT, WATCHDOG, at=1.1))  # a symptom too: not the culprit
    assert 0 == c.attempts[0].root_cause.rank  # type: ignore[union-attr]
    step = c.handle(exited(1, -signal.SIGTERM, (), at=1.2))
    assert EventName.ROOT_CAUSE_REVISED in [r.event for r in step.records]
    cause = c.attempts[0].root_cause
    assert cause is not None and (FailureKind.HUNG, 1) == (cause.kind, cause.rank)
    assert ("rank 1 on n1 hung (silent since step 3 while rank 0 reached step 57 and ended in nccl-timeout: "
            "it was hung)") == cause.describe()


def test_a_symptom_nothing_explains_stays_the_root_cause() -> None:
    """Every rank timed out alike and no steps tell them apart: the first symptom is all there is."""
    c = running()
    c.handle(exited(0, -signal.SIGABRT, WATCHDOG, at=1.0))
    c.handle(exited(1, -signal.SIGTERM, (), at=1.1))
    c.handle(exited(2, -signal.SIGABRT, WATCHDOG, at=1.2))
    cause = c.attempts[0].root_cause
    assert cause is not None and (0, "nccl-timeout") == (cause.rank, cause.diagnosis.signature)  # type: ignore[union-attr]


def test_a_deterministic_cause_found_in_the_drain_stops_the_run() -> None:
    """The restart the symptom had scheduled is taken back: the culprit's failure would recur."""
    c = running()
    c.handle(exited(0, -signal.SIGABRT, WATCHDOG, at=1.0))
    c.handle(exited(1, 1, MISSING, at=1.1))
    c.handle(exited(2, -signal.SIGTERM, (), at=1.2))
    finish = c.handle(WorkersStopped(0, 1.3)).commands[0]
    assert isinstance(finish, FinishRun) and Outcome.FAILED == finish.outcome
    assert finish.root_cause is not None and "import-error" == finish.root_cause.diagnosis.signature  # type: ignore[union-attr]
    assert 3 == c.policy.failures.remaining(2.0)


def test_a_real_error_first_makes_later_ranks_words_unread() -> None:
    """With a root cause that is no symptom, drained ranks are not read (8,000 of them cost nothing)."""
    c = running()
    c.handle(exited(0, 1, ILLEGAL, at=1.0))
    step = c.handle(exited(1, -signal.SIGTERM, MISSING, at=1.1))
    [failed] = [r for r in step.records if r.event is EventName.WORKER_FAILED]
    assert "diagnosis" not in failed.fields


def test_a_drain_reads_a_bounded_few_ranks() -> None:
    """Past the listed collateral, only ranks killed at the grace's end are read, and a bounded few of those."""
    world = COLLATERAL_LISTED + 4
    c = running(world)
    c.handle(exited(0, -signal.SIGABRT, WATCHDOG, at=1.0))
    for rank in range(1, COLLATERAL_LISTED + 1):
        c.handle(exited(rank, -signal.SIGTERM, WATCHDOG, at=1.1))
    step = c.handle(exited(COLLATERAL_LISTED + 1, -signal.SIGTERM, ILLEGAL, at=1.2))  # counted, not read
    assert [] == [r for r in step.records if r.event is EventName.ROOT_CAUSE_REVISED]
    kill = GraceKill(signal.SIGTERM, 5.0, Disposition.CAUGHT)
    step = c.handle(exited(COLLATERAL_LISTED + 2, -signal.SIGKILL, ILLEGAL, at=6.0, killed_at_grace=kill))
    assert EventName.ROOT_CAUSE_REVISED in [r.event for r in step.records]


def _failure(rank: int, at: float, signature: str | None, kind: FailureKind = FailureKind.EXITED) -> Failure:
    classes = {"nccl-timeout": FailureClass.SYMPTOM, "cuda-error": FailureClass.TRANSIENT}
    diagnosis = None if signature is None else Diagnosis(signature, classes[signature], "line")
    return Failure(kind, 0, rank, "n", at, exit_code=1, diagnosis=diagnosis)


def test_the_root_cause_rule_puts_symptoms_last_and_counts_a_drained_rank_that_said_why() -> None:
    """Earliest non-symptom first; a collateral rank with its own failure counts; a symptom only alone."""
    symptom, real = _failure(0, 1.0, "nccl-timeout"), _failure(1, 2.0, None)
    assert real == root_cause([symptom, real])
    drained = _failure(2, 3.0, "cuda-error", FailureKind.COLLATERAL)
    assert drained == root_cause([symptom, drained])
    assert symptom == root_cause([symptom, _failure(3, 0.5, "nccl-timeout", FailureKind.COLLATERAL)])
    assert real == root_cause([real, drained])  # earliest wins among causes


def test_report_json_lists_the_symptoms_under_the_root_cause(tmp_path: Path) -> None:
    """The fold agrees with the controller, and the report counts the symptoms, not as causes."""
    backend = FakeBackend(nodes=[], clock=FakeClock())
    from elastic.core.launch.plan import NodeSlot

    backend.nodes = [NodeSlot("n0", "127.0.0.1", 3)]
    config = RunConfig(command=("train",), run_id="r1", run_dir=tmp_path / "run", nproc_per_node=3, max_restarts=3)
    driver = Driver(config, backend, RunDirectory.create(config.run_dir), base_env={"HOME": "/h"}, clock=backend.clock)
    results: list[RunResult] = []
    thread = threading.Thread(target=lambda: results.append(driver.run()), daemon=True)
    thread.start()
    backend.wait_for_attempt(0)
    backend.tails = {1: WATCHDOG, 2: ILLEGAL}  # the drain ends rank 1, then rank 2
    backend.exit(0, -signal.SIGABRT, WATCHDOG)
    backend.wait_for_attempt(1)
    for rank in range(3):
        backend.exit(rank, 0)
    thread.join(10)
    assert not thread.is_alive() and Outcome.SUCCEEDED == results[0].outcome
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    row = report["attempts"][0]
    assert (2, "cuda-error") == (row["root_cause"]["rank"], row["root_cause"]["diagnosis"]["signature"])
    assert [{"signature": "nccl-timeout", "count": 2, "ranks": [0, 1]}] == row["symptoms"]
    lines = summary_lines(report, "run")
    assert "    2 ranks then failed as symptoms: nccl-timeout (ranks 0, 1)" in lines


def test_a_rank_is_taken_for_silent_only_when_every_rank_s_step_is_known() -> None:
    """Rank 1's steps were never heard: rank 2, whose last report lags rank 0's, is a victim, not
    the silent one; the culprit is not known. With every step known, the lowest is silent."""
    from elastic.core.diagnosis.causes import Silence, silent_ranks
    from elastic.core.failures import Failure, FailureKind

    symptom = Failure(FailureKind.CRASHED, 0, 0, "n", 1.0)
    assert Silence() == silent_ranks(symptom, {0: 80, 2: 50}, 3)
    assert Silence(frozenset({1}), 3, 80) == silent_ranks(symptom, {0: 80, 1: 3, 2: 50}, 3)
