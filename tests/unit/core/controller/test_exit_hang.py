"""Exit hangs decided by the controller, replayed on scripts of observations; and the driver's
timer over a FakeBackend. No processes."""

from __future__ import annotations

import argparse
import json
import signal
import threading
from datetime import datetime
from pathlib import Path

import pytest

from elastic.cli.grammar import apply_settings, build_parsers
from elastic.core.options.config import ConfigError, parse_timeout
from elastic.worker.heartbeat import Beacon, declared_done
from elastic.cli.layering import env_settings

from elastic.core.options.config import RunConfig
from elastic.core.controller.controller import Controller
from elastic.core.controller.settings import ControllerSettings
from elastic.run.driver import Driver, RunResult
from elastic.core.events import EventName
from elastic.core.controller.exit_hangs import silent_enough
from elastic.core.failures import Failure, FailureKind, WorkerExit
from elastic.run.records.journal import RunDirectory, read_journal
from elastic.core.controller.machine import Phase
from elastic.core.messages import (
    AttemptLaunched,
    AttemptPlanned,
    ExitHungKilled,
    ExitTimeoutPassed,
    FinishRun,
    KillExitHung,
    Outcome,
    PlanAttempt,
    RankSilence,
    RankStep,
    RunStarted,
    StepsSeen,
    StartExitTimer,
    StopWorkers,
    WorkerExited,
    WorkersStopped,
)
from elastic.core.policy.restarts import ExitHang, RestartPolicy
from elastic.core.rank_ends import HungRank
from elastic.views.status import describe_exit_wait, describe_journal
from elastic.testing import FakeBackend, FakeClock, capture_events

REASON = "still running 300 s after rank 0 exited 0 and silent for 300 s"


def controller(
    max_restarts: int = 0, exit_timeout_s: float | None = 300.0, exit_hang: ExitHang = ExitHang.RESTART
) -> Controller:
    return Controller(
        RestartPolicy.create(max_restarts=max_restarts),
        ControllerSettings(grace_s=5.0, exit_timeout_s=exit_timeout_s, exit_hang=exit_hang),
    )


def exited(rank: int, returncode: int, at: float, *, attempt: int = 0, hung: str | None = None) -> WorkerExited:
    return WorkerExited(
        WorkerExit(attempt=attempt, rank=rank, node="n0", returncode=returncode, observed_at=at, hung=hung)
    )


def killed_hung(rank: int, at: float) -> WorkerExited:
    return exited(rank, -signal.SIGKILL, at, hung=f"{REASON}; stacks in /run/attempt-0/stacks")


def seen(ranks: tuple[int, ...], done: set[int] | frozenset[int] = frozenset()) -> tuple[HungRank, ...]:
    """What the nodes saw of ranks killed as hung at exit: those of ``done`` had said they finished;
    no other evidence (no stack, no checkpoint)."""
    return tuple(HungRank(rank, declared_done=rank in done) for rank in ranks)


def running(c: Controller, world: int = 2) -> None:
    for observation in (RunStarted(0.0), AttemptPlanned(0, world, 0.05), AttemptLaunched(0, world, 0.1)):
        c.handle(observation)


def past_the_deadline(c: Controller, world: int = 2) -> KillExitHung:
    """Rank 0 exits 0 at 10 s; the others are still running 300 s later."""
    running(c, world)
    assert (StartExitTimer(0, 310.0),) == c.handle(exited(0, 0, 10.0)).commands
    [kill] = c.handle(ExitTimeoutPassed(0, 310.0)).commands
    assert isinstance(kill, KillExitHung)
    return kill


def test_the_first_clean_exit_starts_the_exit_timer() -> None:
    """Rank 0's exit 0 while rank 1 runs asks for a timer at --exit-timeout after it, once."""
    c = controller(exit_timeout_s=300.0)
    running(c, world=3)
    decision = c.handle(exited(0, 0, 10.0))
    assert (StartExitTimer(0, 310.0),) == decision.commands
    [record] = decision.records[1:]
    assert (EventName.EXIT_TIMER_STARTED, 0, 2) == (
        record.event, record.fields["rank"], record.fields["still_running"]
    )
    assert () == c.handle(exited(1, 0, 11.0)).commands


def test_the_wait_under_way_names_the_peer_and_the_ranks_still_running_until_they_end() -> None:
    """What the driver says on the console when the wait lasts: rank 0's exit 0 began it, ranks 1
    and 2 still run; rank 1's exit leaves rank 2; the last one's ends it."""
    c = controller(exit_timeout_s=300.0)
    running(c, world=3)
    assert None is c.exit_wait
    c.handle(exited(0, 0, 10.0))
    assert (0, None, (1, 2)) == c.exit_wait
    c.handle(exited(1, 0, 11.0))
    assert (0, None, (2,)) == c.exit_wait
    c.handle(exited(2, 0, 12.0))
    assert None is c.exit_wait


def test_without_exit_timeout_no_timer_is_asked_for() -> None:
    """--exit-timeout none: a peer's exit 0 starts nothing (today's behaviour)."""
    c = controller(exit_timeout_s=None)
    running(c)
    assert () == c.handle(exited(0, 0, 10.0)).commands


def test_ranks_still_running_at_the_deadline_are_killed_as_exit_hung() -> None:
    """At the deadline every rank still alive is named, with the peer and the timeout."""
    c = controller()
    kill = past_the_deadline(c, world=4)
    assert KillExitHung(0, (1, 2, 3), REASON, 310.0) == kill
    assert Phase.RUNNING == c.phase


def test_a_hung_rank_that_said_it_finished_makes_a_success_without_restart() -> None:
    """done=True is the evidence: the run succeeds, exit status 0, and names the killed rank."""
    c = controller(max_restarts=3)
    past_the_deadline(c)
    assert () == c.handle(ExitHungKilled(0, (1,), seen((1,), done={1}), 310.5)).commands
    drain = c.handle(killed_hung(1, 310.0))
    assert (StopWorkers(0, signal.SIGTERM, 5.0),) == drain.commands
    finish = c.handle(WorkersStopped(0, 311.0)).commands
    assert (FinishRun(Outcome.SUCCEEDED, 0, None, "finished; rank 1 hung at exit and was killed, judged finished: it said so (elastic.heartbeat(done=True))"),) == finish
    [attempt] = c.attempts
    assert not attempt.restarted
    assert [FailureKind.EXIT_HUNG] == [f.kind for f in attempt.failures]
    assert attempt.root_cause is not None and 137 == attempt.root_cause.exit_status


def test_a_hung_rank_that_never_said_it_finished_restarts_charged_to_failures() -> None:
    """Default --exit-hang restart: a failure like any other, the group restarts."""
    c = controller(max_restarts=1)
    past_the_deadline(c)
    c.handle(ExitHungKilled(0, (1,), seen((1,)), 310.5))
    decision = c.handle(killed_hung(1, 310.0))
    scheduled = [r for r in decision.records if r.event is EventName.RESTART_SCHEDULED]
    assert ["failures"] == [r.fields["budget"] for r in scheduled]
    assert (PlanAttempt(1),) == c.handle(WorkersStopped(0, 311.0)).commands
    assert c.attempts[0].restarted


def test_an_exit_hang_without_budget_fails_with_sigkill_status() -> None:
    """No restarts left: the run fails with 137 and the exit-hung rank as root cause."""
    c = controller(max_restarts=0)
    past_the_deadline(c)
    c.handle(ExitHungKilled(0, (1,), seen((1,)), 310.5))
    c.handle(killed_hung(1, 310.0))
    [finish] = c.handle(WorkersStopped(0, 311.0)).commands
    assert isinstance(finish, FinishRun) and finish.root_cause is not None
    assert (Outcome.FAILED, 137, FailureKind.EXIT_HUNG, 1) == (
        finish.outcome, finish.exit_status, finish.root_cause.kind, finish.root_cause.rank
    )


def test_exit_hang_succeed_takes_a_peers_clean_exit_as_the_evidence() -> None:
    """--exit-hang succeed: no done=True needed; the reason says what was taken as proof."""
    c = controller(exit_hang=ExitHang.SUCCEED)
    past_the_deadline(c, world=3)
    c.handle(ExitHungKilled(0, (1, 2), seen((1, 2), done={2}), 310.5))
    assert () == c.handle(killed_hung(1, 310.0)).commands  # rank 2 is not reaped yet
    c.handle(killed_hung(2, 310.0))
    [finish] = c.handle(WorkersStopped(0, 311.0)).commands
    assert FinishRun(
        Outcome.SUCCEEDED, 0, None,
        "finished (--exit-hang succeed: rank 0 exited 0); ranks 1, 2 hung at exit and were killed",
    ) == finish


def test_one_unfinished_rank_among_finished_ones_is_a_restart() -> None:
    """Success needs every exit-hung rank's word; one without it is a failure."""
    c = controller(max_restarts=1)
    past_the_deadline(c, world=3)
    c.handle(ExitHungKilled(0, (1, 2), seen((1, 2), done={1}), 310.5))
    c.handle(killed_hung(1, 310.0))
    c.handle(killed_hung(2, 310.0))
    assert Phase.DRAINING == c.phase
    assert c.draining is not None and Phase.PENDING == c.draining.next_phase
    assert c.draining.detail.startswith("rank 2 still running")


def test_a_rank_that_exits_0_before_the_kill_lands_is_a_plain_success() -> None:
    """The kill raced a clean exit: nothing was hung, every worker exited 0."""
    c = controller()
    past_the_deadline(c)
    c.handle(ExitHungKilled(0, (1,), seen((1,)), 310.5))
    assert (StopWorkers(0, signal.SIGTERM, 5.0),) == c.handle(exited(1, 0, 310.2)).commands
    [finish] = c.handle(WorkersStopped(0, 311.0)).commands
    assert FinishRun(Outcome.SUCCEEDED, 0, None, "every worker exited 0") == finish


def test_a_rank_lost_with_its_node_while_its_peer_was_reaped_as_hung_restarts_the_group() -> None:
    """Ranks 1 and 2 are killed as hung; rank 1 is reaped, rank 2's node is lost instead. The
    verdict no longer waits for a reap that never comes: the node loss is decided (a restart
    charged to preemptions, so even with --max-restarts 0) and the group relaunches."""
    c = controller(max_restarts=0)
    past_the_deadline(c, world=3)
    c.handle(ExitHungKilled(0, (1, 2), seen((1, 2), done={1}), 310.5))
    c.handle(killed_hung(1, 310.0))
    lost = WorkerExited(WorkerExit(attempt=0, rank=2, node="n1", returncode=None, observed_at=311.0,
                                   node_lost="node died"))
    decision = c.handle(lost)
    assert (StopWorkers(0, signal.SIGTERM, 5.0, collateral=True),) == decision.commands
    failed = [r.fields["kind"] for r in decision.records if r.event is EventName.WORKER_FAILED]
    scheduled = [r.fields["budget"] for r in decision.records if r.event is EventName.RESTART_SCHEDULED]
    assert (["node-lost"], ["preemptions"]) == (failed, scheduled)
    assert (PlanAttempt(1),) == c.handle(WorkersStopped(0, 312.0)).commands


def test_a_rank_that_fails_on_its_own_before_the_kill_ends_the_attempt_in_either_order() -> None:
    """Rank 2 exits 1 just before the kill reaches it (no hung mark): its failure stands, and the
    run ends the same whether rank 1's reap as hung is heard before or after it."""
    finishes = []
    for rank_1_reaped_first in (True, False):
        c = controller(max_restarts=0)
        past_the_deadline(c, world=3)
        c.handle(ExitHungKilled(0, (1, 2), seen((1, 2), done={1, 2}), 310.5))
        ends = [killed_hung(1, 310.0), exited(2, 1, 310.2)]
        for end in ends if rank_1_reaped_first else ends[::-1]:
            c.handle(end)
        assert Phase.DRAINING == c.phase
        [finish] = c.handle(WorkersStopped(0, 311.0)).commands
        finishes.append(finish)
    assert finishes[0] == finishes[1]
    assert isinstance(finishes[0], FinishRun) and Outcome.FAILED == finishes[0].outcome
    assert finishes[0].reason.startswith("rank 2 on n0 exited (exit code 1)")


def test_a_failure_before_the_deadline_wins_and_the_timer_is_ignored() -> None:
    """A rank that fails after a peer's exit 0 is a failure; the timer then does nothing."""
    c = controller(max_restarts=1)
    running(c)
    c.handle(exited(0, 0, 10.0))
    c.handle(exited(1, 3, 20.0))
    assert () == c.handle(ExitTimeoutPassed(0, 310.0)).commands
    assert FailureKind.EXITED == c.attempts[0].root_cause.kind  # type: ignore[union-attr]


def test_a_timer_of_an_earlier_attempt_is_ignored() -> None:
    """The deadline of attempt 0 arriving during attempt 1 kills nothing."""
    c = controller(max_restarts=1)
    running(c)
    c.handle(exited(0, 0, 10.0))
    c.handle(exited(1, 1, 11.0))
    c.handle(WorkersStopped(0, 12.0))
    c.handle(AttemptPlanned(1, 2, 12.1))
    c.handle(AttemptLaunched(1, 2, 12.2))
    assert () == c.handle(ExitTimeoutPassed(0, 310.0)).commands


# -- a rank still working is not hung ------------------------------------------------------


def test_a_rank_with_a_recent_sign_of_life_is_left_running_and_looked_at_again() -> None:
    """Rank 1 printed 0.4 s before the deadline: nothing is killed, the record says why, and the
    next check comes when it could first have been silent for the whole timeout."""
    c = controller()
    running(c)
    c.handle(exited(0, 0, 10.0))
    decision = c.handle(ExitTimeoutPassed(0, 310.0, (RankSilence(1, 0.4, "output"),)))
    assert (StartExitTimer(0, 609.6),) == decision.commands
    [spared] = decision.records
    assert EventName.EXIT_HANG_SPARED == spared.event
    assert "rank 1 still working 300 s after rank 0 exited 0: output 0.4 s ago" == spared.fields["reason"]
    assert ([1], {"1": {"sign": "output", "silent_s": 0.4}}, 299.6) == (
        spared.fields["ranks"], spared.fields["signs"], spared.fields["recheck_in_s"]
    )
    assert Phase.RUNNING == c.phase


def test_a_spared_rank_that_goes_silent_is_killed_at_the_next_check_naming_the_whole_wait() -> None:
    """Its upload done, rank 1 hangs: silent 300 s at the second check, it is killed then, and
    the reason says how long after the peer's exit 0 that was."""
    c = controller()
    running(c)
    c.handle(exited(0, 0, 10.0))
    c.handle(ExitTimeoutPassed(0, 310.0, (RankSilence(1, 0.4, "checkpoint write"),)))
    [kill] = c.handle(ExitTimeoutPassed(0, 609.6, (RankSilence(1, 300.0, "checkpoint write"),))).commands
    assert KillExitHung(0, (1,), "still running 600 s after rank 0 exited 0 and silent for 300 s", 609.6) == kill


def test_a_spared_rank_that_then_exits_0_is_a_plain_success() -> None:
    """Rank-0-only work after training (a save, an upload) ends the run as it should: a success."""
    c = controller()
    running(c)
    c.handle(exited(1, 0, 10.0))
    c.handle(ExitTimeoutPassed(0, 310.0, (RankSilence(0, 0.6, "output"),)))
    assert (StopWorkers(0, signal.SIGTERM, 5.0),) == c.handle(exited(0, 0, 400.0)).commands
    [finish] = c.handle(WorkersStopped(0, 401.0)).commands
    assert FinishRun(Outcome.SUCCEEDED, 0, None, "every worker exited 0") == finish


def test_a_silent_rank_is_killed_while_a_working_one_is_waited_for_before_the_verdict() -> None:
    """Rank 1 is silent and killed at the deadline; rank 2 still uploads. The attempt is
    decided only once rank 2 has ended too: done=True from rank 1 makes it a success."""
    c = controller()
    running(c, world=3)
    c.handle(exited(0, 0, 10.0))
    decision = c.handle(ExitTimeoutPassed(0, 310.0, (RankSilence(1, 305.0, "heartbeat"), RankSilence(2, 1.0, "output"))))
    assert (KillExitHung(0, (1,), REASON, 310.0), StartExitTimer(0, 609.0)) == decision.commands
    assert () == c.handle(ExitHungKilled(0, (1,), seen((1,), done={1}), 310.5)).commands
    assert () == c.handle(killed_hung(1, 310.6)).commands  # rank 2 still works: no verdict yet
    assert Phase.RUNNING == c.phase
    assert (StopWorkers(0, signal.SIGTERM, 5.0),) == c.handle(exited(2, 0, 500.0)).commands
    [finish] = c.handle(WorkersStopped(0, 501.0)).commands
    assert FinishRun(Outcome.SUCCEEDED, 0, None, "finished; rank 1 hung at exit and was killed, judged finished: it said so (elastic.heartbeat(done=True))") == finish


def test_a_rank_whose_stack_is_at_interpreter_exit_is_finished_and_the_reason_says_why() -> None:
    """No done=True, but the stack dump showed the main thread in an at-exit handler: success, no
    restart, and the journaled judgement and the reason name the evidence."""
    c = controller(max_restarts=3)
    past_the_deadline(c)
    frame = "is at interpreter exit (in the at-exit handler or finalizer hang (site.py:5))"
    hung = HungRank(1, at_exit="in the at-exit handler or finalizer hang (site.py:5)", frame=frame)
    [record] = c.handle(ExitHungKilled(0, (1,), (hung,), 310.5)).records
    assert {"1": {"finished": True, "evidence": "at_exit", "frame": frame, "error": None,
                  "why": "its main thread was at interpreter exit (in the at-exit handler or finalizer hang (site.py:5))"}
            } == record.fields["judged"]
    c.handle(killed_hung(1, 310.0))
    [finish] = c.handle(WorkersStopped(0, 311.0)).commands
    assert FinishRun(
        Outcome.SUCCEEDED, 0, None,
        "finished; rank 1 hung at exit and was killed, judged finished: its main thread was at interpreter exit "
        "(in the at-exit handler or finalizer hang (site.py:5))",
    ) == finish


def test_a_rank_silent_since_a_checkpoint_before_its_peers_exit_is_finished() -> None:
    """Rank 0 exited 0 at 10 s, the kill was decided at 310 s; the last checkpoint write was 305 s
    before (at 5 s) and rank 1 silent for 306 s: finished. Written at 15 s instead: no evidence."""
    c = controller()
    past_the_deadline(c)
    c.handle(ExitHungKilled(0, (1,), (HungRank(1, silent_s=306.0, checkpoint_s=305.0),), 310.5))
    c.handle(killed_hung(1, 310.0))
    assert c.draining is not None and Outcome.SUCCEEDED == c.draining.outcome
    c = controller()
    past_the_deadline(c)
    c.handle(ExitHungKilled(0, (1,), (HungRank(1, silent_s=306.0, checkpoint_s=295.0),), 310.5))
    c.handle(killed_hung(1, 310.0))
    assert c.draining is not None and Outcome.FAILED == c.draining.outcome


def test_a_restart_from_a_checkpoint_holding_the_last_step_reached_is_warned_of() -> None:
    """No evidence, a restart; the drain's checkpoint is the last step seen: workers_stopped warns."""
    c = controller(max_restarts=1)
    running(c)
    c.handle(StepsSeen(0, "n0", (RankStep(0, 20, "output", 5.0),), 5.0))
    c.handle(exited(0, 0, 10.0))
    c.handle(ExitTimeoutPassed(0, 310.0))
    c.handle(ExitHungKilled(0, (1,), seen((1,)), 310.5))
    c.handle(killed_hung(1, 310.0))
    stopped = [r for r in c.handle(WorkersStopped(0, 311.0, 20)).records if r.event is EventName.WORKERS_STOPPED]
    assert "restarted from checkpoint step 20, which holds the last step attempt 0 reached (20)" in (
        stopped[0].fields["rerun_warning"]
    )


def test_driver_journals_the_evidence_and_status_and_the_report_show_it(tmp_path: Path) -> None:
    """Over the fake backend: a rank whose stack was at interpreter exit; the report's attempt row
    and `elastic status` say it was judged finished and why."""
    at_exit = "waiting for non-daemon threads to end: saver"
    backend = FakeBackend(clock=FakeClock(), seen_at_kill={1: HungRank(1, at_exit=at_exit, frame="is at interpreter exit")})
    thread, results = start_driver(tmp_path, backend, exit_timeout_s=0.2, max_restarts=0)
    backend.wait_for_attempt(0)
    backend.exit(0, 0)
    thread.join(10)
    assert not thread.is_alive()
    assert (Outcome.SUCCEEDED, 0) == (results[0].outcome, results[0].exit_status)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    line = f"rank 1 hung at exit, judged finished: its main thread was at interpreter exit ({at_exit})"
    assert [line] == report["attempts"][0]["exit_hung_description"]
    assert (1, "at_exit") == (report["attempts"][0]["exit_hung"][0]["rank"], report["attempts"][0]["exit_hung"][0]["evidence"])
    status = "\n".join(describe_journal(read_journal(tmp_path / "run" / "journal.jsonl").events))
    assert f"attempt 0: {line}" in status, status


def test_a_rank_killed_at_a_later_check_joins_those_killed_before() -> None:
    """Two checks kill one rank each; the verdict needs both kills' reports and both reaps."""
    c = controller(max_restarts=1)
    running(c, world=3)
    c.handle(exited(0, 0, 10.0))
    c.handle(ExitTimeoutPassed(0, 310.0, (RankSilence(1, 300.0, "start"), RankSilence(2, 100.0, "output"))))
    c.handle(ExitHungKilled(0, (1,), seen((1,), done={1}), 310.1))
    c.handle(killed_hung(1, 310.2))
    [kill] = c.handle(ExitTimeoutPassed(0, 510.0, (RankSilence(2, 300.0, "output"),))).commands
    assert isinstance(kill, KillExitHung) and (2,) == kill.ranks
    c.handle(ExitHungKilled(0, (2,), seen((2,)), 510.1))
    decision = c.handle(killed_hung(2, 510.2))
    assert Phase.DRAINING == c.phase and c.draining is not None and Phase.PENDING == c.draining.next_phase
    assert ["failures"] == [r.fields["budget"] for r in decision.records if r.event is EventName.RESTART_SCHEDULED]


def test_a_rank_its_node_did_not_measure_counts_as_silent() -> None:
    """No word from a rank's node (out of reach): it is killed as before; the measured one is not."""
    c = controller()
    running(c, world=3)
    c.handle(exited(0, 0, 10.0))
    [kill, timer] = c.handle(ExitTimeoutPassed(0, 310.0, (RankSilence(2, 2.0, "heartbeat"),))).commands
    assert (KillExitHung(0, (1,), REASON, 310.0), StartExitTimer(0, 608.0)) == (kill, timer)


@pytest.mark.parametrize(
    ("silence", "hung"),
    [(None, True), (RankSilence(1, 300.0, "output"), True), (RankSilence(1, 299.9, "output"), False)],
)
def test_a_rank_is_silent_enough_from_the_timeout_on(silence: RankSilence | None, hung: bool) -> None:
    """The rule: silent for the whole timeout (or not measured) is hung at exit."""
    assert hung == silent_enough(silence, 300.0)


def test_exit_hung_reads_like_the_issue_says() -> None:
    """The failure's line names the rank, the wait, the peer, and where the stacks are."""
    failure = Failure(
        FailureKind.EXIT_HUNG, 0, 1, "host-a", 1.0, signal=9,
        message=f"{REASON}; stacks in /run/attempt-0/stacks",
    )
    assert (
        "rank 1 still running 300 s after rank 0 exited 0 and silent for 300 s "
        "(exit-hung on host-a; stacks in /run/attempt-0/stacks)"
        == failure.describe()
    )


# -- the driver's timer, over the fake backend ---------------------------------------------


def start_driver(tmp_path: Path, backend: FakeBackend, **config: object) -> tuple[threading.Thread, list[RunResult]]:
    run_config = RunConfig(command=("train",), run_id="r1", run_dir=tmp_path / "run", nproc_per_node=2,
                           **config)  # type: ignore[arg-type]
    driver = Driver(run_config, backend, RunDirectory.create(run_config.run_dir), base_env={},
                    clock=backend.clock)
    results: list[RunResult] = []
    thread = threading.Thread(target=lambda: results.append(driver.run()), daemon=True)
    thread.start()
    return thread, results


def test_driver_kills_an_exit_hung_rank_through_the_backend_and_succeeds_on_done(tmp_path: Path) -> None:
    """The driver's own deadline fires, the backend kills the rank, the journal and
    status tell the story, and the run succeeds because the rank said it finished."""
    backend = FakeBackend(clock=FakeClock(), finished={1})
    thread, results = start_driver(tmp_path, backend, exit_timeout_s=0.2, max_restarts=0)
    backend.wait_for_attempt(0)
    backend.exit(0, 0)
    thread.join(10)
    assert not thread.is_alive()
    assert (Outcome.SUCCEEDED, 0) == (results[0].outcome, results[0].exit_status)
    assert [(0, (1,), "still running 0.2 s after rank 0 exited 0 and silent for 0.2 s")] == backend.exit_hung_kills
    journal = read_journal(tmp_path / "run" / "journal.jsonl").events
    names = [e["event"] for e in journal]
    for name in ("exit_timer_started", "exit_hang_detected", "exit_hung_killed"):
        assert name in names
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert "finished; rank 1 hung at exit and was killed, judged finished: it said so (elastic.heartbeat(done=True))" == report["reason"]
    assert "exit-hung" == report["attempts"][0]["root_cause"]["kind"]
    status = "\n".join(describe_journal(journal))
    assert "rank 1 still running 0.2 s after rank 0 exited 0" in status, status


def test_driver_says_once_which_ranks_it_waits_for_when_the_wait_lasts(tmp_path: Path) -> None:
    """Rank 1 still runs 2 s after rank 0's exit 0: the driver says so once (ranks 1 awaited, with
    --exit-timeout), before the deadline's check."""
    backend = FakeBackend(clock=FakeClock(), finished={1})
    with capture_events() as events:
        thread, results = start_driver(tmp_path, backend, exit_timeout_s=2.5, max_restarts=0)
        backend.wait_for_attempt(0)
        backend.exit(0, 0)
        thread.join(20)
    assert not thread.is_alive() and Outcome.SUCCEEDED is results[0].outcome
    [awaited] = [e for e in events if e["event"] == "ranks_awaited"]
    assert (0, 0, [1], 2.5) == (awaited["attempt"], awaited["rank"], awaited["ranks"], awaited["exit_timeout_s"])
    assert awaited["waited_s"] >= 2.0


def test_driver_asks_the_backend_how_long_ranks_were_silent_and_spares_a_working_one(tmp_path: Path) -> None:
    """The backend says rank 1 printed 0.05 s ago: the driver's checks kill nothing, journal why,
    and rank 1's own exit 0 later ends the run in success."""
    backend = FakeBackend(clock=FakeClock(), silent={1: (0.05, "output")})
    thread, results = start_driver(tmp_path, backend, exit_timeout_s=0.2, max_restarts=0)
    backend.wait_for_attempt(0)
    backend.exit(0, 0)
    journal_path = tmp_path / "run" / "journal.jsonl"

    def spared() -> list[dict[str, object]]:
        return [e for e in read_journal(journal_path).events if e["event"] == "exit_hang_spared"]

    for _ in range(200):  # bounded: 10 s
        if spared():
            break
        threading.Event().wait(0.05)
    backend.exit(1, 0)
    thread.join(10)
    assert not thread.is_alive()
    assert (Outcome.SUCCEEDED, 0) == (results[0].outcome, results[0].exit_status)
    assert [] == backend.exit_hung_kills
    assert "rank 1 still working 0.2 s after rank 0 exited 0: output 0.1 s ago" == spared()[0]["reason"]


# -- the options and the worker's word ----------------------------------------------------


def parse_run(tmp_path: Path, toml: str, env: dict[str, str], argv: list[str],
              monkeypatch: pytest.MonkeyPatch) -> argparse.Namespace:
    path = tmp_path / "c.toml"
    path.write_text(toml)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    parser, run = build_parsers()
    options = ["run", "--config", str(path), *argv]
    apply_settings(run, options[1:])
    return parser.parse_args(options)


def test_exit_timeout_defaults_to_300_and_none_turns_it_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Default 300 s and restart; the file, ELASTIC_EXIT_TIMEOUT and the flag layer as for every option."""
    monkeypatch.delenv("ELASTIC_EXIT_TIMEOUT", raising=False)
    monkeypatch.delenv("ELASTIC_EXIT_HANG", raising=False)
    args = parse_run(tmp_path, "", {}, [], monkeypatch)
    assert (300.0, "restart") == (args.exit_timeout, args.exit_hang)
    args = parse_run(tmp_path, "exit-timeout = 'none'\nexit-hang = 'succeed'\n", {}, [], monkeypatch)
    assert (None, "succeed") == (args.exit_timeout, args.exit_hang)
    args = parse_run(tmp_path, "exit-timeout = 60\n", {"ELASTIC_EXIT_TIMEOUT": "30"}, [], monkeypatch)
    assert 30.0 == args.exit_timeout
    args = parse_run(tmp_path, "", {"ELASTIC_EXIT_TIMEOUT": "30"}, ["--exit-timeout", "none"], monkeypatch)
    assert None is args.exit_timeout


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf"])
def test_a_bad_exit_timeout_names_the_flag_and_what_is_allowed(value: str) -> None:
    """--exit-timeout takes seconds > 0 and <= 1e9, or 'none'; anything else is a one-line usage error."""
    with pytest.raises(ValueError, match="seconds > 0 and <= 1e9, or 'none'"):
        parse_timeout(value)
    with pytest.raises(ConfigError, match="ELASTIC_EXIT_TIMEOUT: .*seconds > 0 and <= 1e9, or 'none'.*same as --exit-timeout"):
        env_settings({"ELASTIC_EXIT_TIMEOUT": value})


def test_done_is_written_at_once_and_kept(tmp_path: Path) -> None:
    """heartbeat(done=True) skips the rate limit; later beats keep saying done."""
    clock = FakeClock(start=0.0)
    path = tmp_path / "rank-0.heartbeat"
    beacon = Beacon(str(path), clock=clock.monotonic, wall=clock.time)
    beacon.beat(9)
    assert not declared_done(str(path))
    beacon.beat(10, done=True)  # same instant: a plain beat would be dropped
    assert {"step": 10, "done": True} == {k: v for k, v in json.loads(path.read_text()).items()
                                          if k in ("step", "done")}
    clock.advance(1.0)
    beacon.beat(11)
    beacon.close()
    assert declared_done(str(path))


@pytest.mark.parametrize(
    ("content", "done"),
    [
        ('{"done": true}\n', True),  # echo '{"done": true}' > "$ELASTIC_HEARTBEAT_FILE"
        ('{"step": 3, "time": 1.0, "pid": 7, "done": true}', True),
        ('{"step": 3, "time": 1.0, "pid": 7}\n', False),
        ('{"done": "yes"}', False),
        ("done\n", False),
        ("", False),
    ],
)
def test_only_a_json_done_true_line_says_finished(tmp_path: Path, content: str, done: bool) -> None:
    """The documented line for other languages counts; anything else does not."""
    path = tmp_path / "rank-0.heartbeat"
    path.write_text(content)
    assert done == declared_done(str(path))
    assert not declared_done(str(tmp_path / "missing"))


def test_status_lists_the_ranks_of_the_attempt_by_state_during_the_wait() -> None:
    """From the journal alone: who exited 0, who failed, who still runs, and since when."""
    at = "2026-01-01T00:00:00.000000+00:00"
    events = [
        {"event": "attempt_started", "attempt": 1, "time": at, "nproc_per_node": [2, 2]},
        {"event": "worker_exited", "attempt": 1, "time": at, "rank": 0, "exit_code": 0},
        {"event": "exit_timer_started", "attempt": 1, "time": at, "rank": 0, "exit_timeout_s": 300.0},
        {"event": "worker_exited", "attempt": 1, "time": at, "rank": 2, "exit_code": 0},
    ]
    now_wall = datetime.fromisoformat(at).timestamp() + 42.0
    assert [
        "ranks of attempt 1: exited 0: 0, 2; still running: 1, 3",
        "  rank 0 exited 0 42 s ago: ranks still running after it and silent for 300 s are exit-hung "
        "(--exit-timeout)",
    ] == describe_exit_wait(events, now_wall)
    assert [] == describe_exit_wait(events[:2], now_wall)  # no exit 0 timer yet: nothing to say
    spared = {"event": "exit_hang_spared", "attempt": 1, "time": at, "ranks": [1],
              "reason": "rank 1 still working 300 s after rank 0 exited 0: output 0.4 s ago"}
    assert "  checked 42 s ago, left running: rank 1 still working 300 s after rank 0 exited 0: output 0.4 s ago" \
        == describe_exit_wait([*events, spared], now_wall)[-1]


def test_status_says_which_rank_still_ran_after_a_peers_exit_0_when_the_run_was_stopped() -> None:
    """A stop during the wait is no failure, but status names the rank left running and for how
    long after the exit 0; and a rank left running because it worked is named too."""
    def at(s: float) -> str:
        return f"2026-01-01T00:00:{s:06.3f}+00:00"

    events = [
        {"event": "run_started", "attempt": 0, "time": at(0), "run_id": "r", "journal_version": 2},
        {"event": "attempt_started", "attempt": 0, "time": at(0), "world_size": 2, "nproc_per_node": [2]},
        {"event": "phase_changed", "attempt": 0, "time": at(1), "source": "launching", "dest": "running"},
        {"event": "worker_exited", "attempt": 0, "time": at(2), "rank": 1, "exit_code": 0},
        {"event": "exit_timer_started", "attempt": 0, "time": at(2), "rank": 1, "exit_timeout_s": 3.0},
        {"event": "exit_hang_spared", "attempt": 0, "time": at(5), "ranks": [0],
         "reason": "rank 0 still working 3 s after rank 1 exited 0: output 0.5 s ago"},
        {"event": "phase_changed", "attempt": 0, "time": at(14.3), "source": "running", "dest": "draining",
         "reason": "launcher received SIGTERM"},
        {"event": "worker_failed", "attempt": 0, "time": at(14.5), "rank": 0, "node": "n", "kind": "collateral",
         "signal": "SIGTERM"},
    ]
    lines = describe_journal(events)
    at_exit = lines.index("after a peer's exit 0 (--exit-timeout):")
    assert [
        "  attempt 0: left running: rank 0 still working 3 s after rank 1 exited 0: output 0.5 s ago",
        "  attempt 0: rank 0 still running 12.3 s after rank 1 exited 0 (launcher received SIGTERM)",
    ] == lines[at_exit + 1:at_exit + 3]
