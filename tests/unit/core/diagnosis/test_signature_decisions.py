"""What a signature decides: a deterministic root cause is not retried, a transient one is; where it shows."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

from elastic.core.controller.controller import Controller
from elastic.core.controller.settings import ControllerSettings
from elastic.core.events import EventName
from elastic.core.failures import WorkerExit
from elastic.core.messages import (
    AttemptLaunched, AttemptPlanned, FinishRun, Outcome, PlanAttempt, RunStarted, StepsSeen, RankStep, WorkerExited,
    WorkersStopped,
)
from elastic.core.options.config import RunConfig
from elastic.core.policy.restarts import RestartPolicy
from elastic.core.policy.rules import parse_exit_rule
from elastic.run.driver import Driver, RunResult
from elastic.run.records.journal import RunDirectory
from elastic.testing import FakeBackend, FakeClock
from elastic.views.report import summary_lines

MISSING = ("Traceback (most recent call last):", '  File "train.py", line 1, in <module>',
           "ModuleNotFoundError: No module named 'flash_attn_does_not_exist'")
FULL_DISK = ("Traceback (most recent call last):", "OSError: [Errno 28] No space left on device")


def started(c: Controller, world: int = 2) -> None:
    for observation in (RunStarted(0.0), AttemptPlanned(0, world, 0.05), AttemptLaunched(0, world, 0.1)):
        c.handle(observation)


def failed(rank: int, returncode: int, tail: tuple[str, ...], at: float = 1.0, attempt: int = 0) -> WorkerExited:
    return WorkerExited(WorkerExit(attempt=attempt, rank=rank, node="n0", returncode=returncode, observed_at=at,
                                   log_tail=tail))


def test_a_deterministic_root_cause_is_not_retried_and_exits_with_the_rank_s_status() -> None:
    """A missing module at start-up stops the run at once, budget left or not, with its exit status."""
    c = Controller(RestartPolicy.create(max_restarts=3), ControllerSettings(grace_s=5.0))
    started(c)
    step = c.handle(failed(0, 1, MISSING))
    refused = [r for r in step.records if r.event is EventName.RESTART_REFUSED]
    assert ["import-error is deterministic: a restart fails the same way, so it was not retried"] == [
        r.fields["reason"] for r in refused
    ]
    c.handle(failed(1, -signal.SIGTERM, (), at=1.1))
    finish = c.handle(WorkersStopped(0, 1.2)).commands[0]
    assert isinstance(finish, FinishRun)
    assert (Outcome.FAILED, 1) == (finish.outcome, finish.exit_status)
    assert finish.root_cause is not None and finish.root_cause.diagnosis is not None
    assert "import-error" == finish.root_cause.diagnosis.signature
    assert 3 == c.policy.failures.remaining(2.0)  # nothing charged


def test_a_transient_root_cause_restarts_as_before() -> None:
    """A full disk may be freed (old checkpoints rotated): the group restarts, charged as usual."""
    c = Controller(RestartPolicy.create(max_restarts=3), ControllerSettings(grace_s=5.0))
    started(c)
    step = c.handle(failed(0, 1, FULL_DISK))
    [worker_failed] = [r for r in step.records if r.event is EventName.WORKER_FAILED]
    assert {"signature": "disk-full", "class": "transient",
            "line": "OSError: [Errno 28] No space left on device"} == worker_failed.fields["diagnosis"]
    assert EventName.RESTART_SCHEDULED in [r.event for r in step.records]
    c.handle(failed(1, -signal.SIGTERM, (), at=1.1))
    assert (PlanAttempt(1),) == c.handle(WorkersStopped(0, 1.2)).commands


def test_a_start_up_signature_no_longer_applies_after_the_first_step() -> None:
    """An import error after training began restarts: the attempt had shown a step."""
    c = Controller(RestartPolicy.create(max_restarts=3), ControllerSettings(grace_s=5.0))
    started(c)
    c.handle(StepsSeen(0, "n0", (RankStep(0, 5, "heartbeat", 0.5),), 0.5))
    step = c.handle(failed(0, 1, MISSING))
    assert EventName.RESTART_SCHEDULED in [r.event for r in step.records]


def test_an_on_exit_rule_still_wins_over_a_signature() -> None:
    """``--on-exit 1=restart`` is the user's word about exit 1: it beats the built-in class."""
    policy = RestartPolicy.create(max_restarts=3, rules=[parse_exit_rule("1=restart")])
    c = Controller(policy, ControllerSettings(grace_s=5.0))
    started(c)
    step = c.handle(failed(0, 1, MISSING))
    assert EventName.RESTART_SCHEDULED in [r.event for r in step.records]


def test_collateral_ranks_are_not_read() -> None:
    """A drained rank's words are no decision's business (and cost nothing at 8,000 ranks)."""
    c = Controller(RestartPolicy.create(max_restarts=3), ControllerSettings(grace_s=5.0))
    started(c)
    c.handle(failed(0, 1, FULL_DISK))
    step = c.handle(failed(1, -signal.SIGTERM, MISSING, at=1.1))
    [collateral] = [r for r in step.records if r.event is EventName.WORKER_FAILED]
    assert "diagnosis" not in collateral.fields


def _run(tmp_path: Path, backend: FakeBackend) -> tuple[threading.Thread, list[RunResult]]:
    config = RunConfig(command=("train",), run_id="r1", run_dir=tmp_path / "run", nproc_per_node=2, max_restarts=3)
    driver = Driver(config, backend, RunDirectory.create(config.run_dir), base_env={"HOME": "/h"},
                    clock=backend.clock)
    results: list[RunResult] = []
    thread = threading.Thread(target=lambda: results.append(driver.run()), daemon=True)
    thread.start()
    return thread, results


def test_report_json_and_the_summary_carry_the_root_cause_s_signature_and_line(tmp_path: Path) -> None:
    """Each failure and root cause in report.json has its diagnosis; the summary says it and why no retry."""
    backend = FakeBackend(clock=FakeClock())
    thread, results = _run(tmp_path, backend)
    backend.wait_for_attempt(0)
    backend.exit(0, 1, MISSING)
    thread.join(10)
    assert not thread.is_alive() and Outcome.FAILED == results[0].outcome
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    expected = {"signature": "import-error", "class": "deterministic",
                "line": "ModuleNotFoundError: No module named 'flash_attn_does_not_exist'"}
    assert expected == report["root_cause"]["diagnosis"]
    assert expected == report["attempts"][0]["root_cause"]["diagnosis"]
    assert [expected, None] == [f["diagnosis"] for f in report["attempts"][0]["failures"]]
    assert (1, 1) == (report["exit_status"], len(report["attempts"]))
    lines = summary_lines(report, "run")
    assert ("  signature: import-error (deterministic): ModuleNotFoundError: No module named "
            "'flash_attn_does_not_exist'") in lines
    assert any(line.startswith("  why it stopped: ") and "so it was not retried" in line for line in lines)


NO_GPU = ("Traceback (most recent call last):", '  File "train.py", line 4, in <module>',
          "    torch.cuda.set_device(local_rank)", "RuntimeError: No CUDA GPUs are available")


def test_no_gpu_from_a_rank_given_one_restarts_charged_like_a_lost_node_and_from_one_given_none_stops() -> None:
    """The plan gave rank 0 a GPU and it finds none: its node lost it (fallen off the bus), so the run
    restarts, charged to the preemption budget as a node's fault is; a rank given none (a CPU
    machine) asks CUDA of a machine without it: deterministic, stopped at once with the gloo hint."""
    for gpus, event, diagnosed in ((1, EventName.RESTART_SCHEDULED, "node"),
                                   (0, EventName.RESTART_REFUSED, "deterministic")):
        c = Controller(RestartPolicy.create(max_restarts=0), ControllerSettings(grace_s=5.0))
        started(c)
        step = c.handle(WorkerExited(WorkerExit(attempt=0, rank=0, node="n0", returncode=1, observed_at=1.0,
                                                log_tail=NO_GPU, gpus=gpus)))
        [worker_failed] = [r for r in step.records if r.event is EventName.WORKER_FAILED]
        assert ("no-gpu", diagnosed) == (worker_failed.fields["diagnosis"]["signature"],  # type: ignore[index]
                                         worker_failed.fields["diagnosis"]["class"]), gpus  # type: ignore[index]
        [decided] = [r for r in step.records if r.event in (EventName.RESTART_SCHEDULED, EventName.RESTART_REFUSED)]
        assert event is decided.event, decided.fields
        if gpus:
            assert "preemptions" == decided.fields["budget"]
