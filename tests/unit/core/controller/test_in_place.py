"""In-place restarts (--spares) as the controller decides them: a failure repaired in place is
the next attempt, begun without a drain; whatever cannot be repaired falls back to a full restart
with its reason; the journal's fold reads a re-formed attempt as any other."""

from __future__ import annotations

import signal
from datetime import datetime, timedelta, timezone

from elastic.core.controller.controller import Controller
from elastic.core.controller.machine import Phase
from elastic.core.controller.settings import ControllerSettings
from elastic.core.events import EventName, Record
from elastic.core.failures import WorkerExit
from elastic.core.inplace.reform import Reform
from elastic.core.journal.fold import RunFold
from elastic.core.messages import (
    AttemptLaunched, AttemptPlanned, FinishRun, HelperEnded, Outcome, PlanAttempt, RankStep, ReformFailed, ReformWorld,
    ReformDeadlinePassed, RunStarted, SparesStarted, StepsSeen, StopWorkers, WatchReform, WorkerExited, WorkersStopped,
    WorldReformed,
)
from elastic.core.policy.restarts import RestartPolicy

PLAN = {"world_size": 2, "nodes": ["n0"], "node_addresses": ["127.0.0.1"], "nproc_per_node": [2],
        "master_addr": "127.0.0.1", "master_port": 29500, "world_changed": False, "checkpoint_dir": None,
        "resume_from": None, "resume_step": None}
IDENTICAL = Reform(1, 2, ((0, 0),), (1,))


def running(spares: int = 1, max_restarts: int = 3, *, in_place: bool = True) -> tuple[Controller, list[Record]]:
    """A controller with attempt 0 of 2 ranks on one node running; its spare started when ``in_place``."""
    c = Controller(RestartPolicy.create(max_restarts=max_restarts), ControllerSettings(grace_s=5.0, spares=spares))
    journal: list[Record] = []
    for seen in (RunStarted(0.0), AttemptPlanned(0, 2, 0.05, plan=PLAN), AttemptLaunched(0, 2, 0.1)):
        journal += c.handle(seen).records
    if in_place:
        journal += c.handle(SparesStarted(0, "n0", (4242,), 0.5)).records
    journal += c.handle(StepsSeen(0, "n0", (RankStep(0, 5, "output", 1.0), RankStep(1, 5, "output", 1.0)), 1.0)).records
    return c, journal


def killed(attempt: int, rank: int, at: float, returncode: int = -signal.SIGKILL) -> WorkerExited:
    return WorkerExited(WorkerExit(attempt=attempt, rank=rank, node="n0", returncode=returncode, observed_at=at))


def journaled(record: Record) -> dict[str, object]:
    """The record as the driver journals it (its time on the wall clock, from 2026-01-01 UTC)."""
    wall = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=record.at)
    return {"event": record.event.value, "time": wall.isoformat(), "run_id": "r", "attempt": record.attempt,
            **record.fields}


def events(records: list[Record], name: EventName) -> list[dict[str, object]]:
    return [dict(r.fields) for r in records if r.event is name]


def test_a_killed_rank_with_a_spare_at_hand_is_repaired_in_place_without_a_drain() -> None:
    c, journal = running()
    decided = c.handle(killed(0, 1, 2.0))
    assert (ReformWorld(0, IDENTICAL),) == decided.commands
    assert Phase.RUNNING == c.phase and c.reforms(0)
    assert [{"generation": 1, "lost": [1], "survivors": [[0, 0]], "joiners": [1], "identical": True}] == events(
        list(decided.records), EventName.WORLD_REFORMED)
    [charged] = events(list(decided.records), EventName.RESTART_SCHEDULED)  # charged as any restart
    assert (True, "failures") == (charged["in_place"], charged["budget"])

    reformed = c.handle(WorldReformed(0, 2.1, {0: 100, 1: 4242}))
    assert (WatchReform(1, 60.0),) == reformed.commands  # --reform-timeout's default
    assert (1, Phase.RUNNING, 2) == (c.attempt, c.phase, c.ranks_alive)
    assert c.attempts[0].restarted and 1 == c.restarts
    phases = [(r.attempt, r.fields["source"], r.fields["dest"], r.fields["trigger"])
              for r in reformed.records if r.event is EventName.PHASE_CHANGED]
    assert [(0, "running", "launching", "reform"), (1, "launching", "running", "launched")] == phases
    [started] = events(list(reformed.records), EventName.ATTEMPT_STARTED)
    assert (0, 1, 2) == (started["reformed_from"], started["generation"], started["world_size"])
    [ended] = events(list(reformed.records), EventName.WORKERS_STOPPED)
    assert 1 == ended["reformed_as"]

    # The re-formed attempt ends as any: both ranks exit 0, the run succeeds.
    ending = c.handle(killed(1, 0, 5.0, 0)).records + c.handle(killed(1, 1, 5.1, 0)).records
    finish = c.handle(WorkersStopped(1, 5.2))
    assert isinstance(finish.commands[-1], FinishRun) and Outcome.SUCCEEDED is finish.commands[-1].outcome

    fold = RunFold()
    for record in journal + list(decided.records) + list(reformed.records) + list(ending) + list(finish.records):
        fold.apply(journaled(record))
    assert fold.attempts[0].restarted and fold.attempts[0].stopped
    assert fold.attempts[1].launched_s is not None and not fold.attempts[1].restarted


def test_a_second_loss_before_the_reformed_world_steps_falls_back_to_a_full_restart() -> None:
    c, _ = running()
    c.handle(killed(0, 1, 2.0))
    c.handle(WorldReformed(0, 2.1, {0: 100, 1: 4242}))
    c.handle(SparesStarted(1, "n0", (4343,), 2.2))
    decided = c.handle(killed(1, 0, 2.5))
    assert [{"reason": "rank 0 lost while generation 1 was still forming"}] == events(
        list(decided.records), EventName.INPLACE_FELL_BACK)
    assert isinstance(decided.commands[0], StopWorkers) and Phase.DRAINING == c.phase


def test_without_a_spare_or_the_mark_or_the_store_the_run_restarts_as_without_spares_and_says_why() -> None:
    no_spare, _ = running()
    no_spare.handle(HelperEnded(0, "n0", "spare", 4242, -9, 1.5))
    not_in_place, _ = running(in_place=False)
    no_store, _ = running()
    no_store.handle(HelperEnded(0, "n0", "store", 4141, 1, 1.5))
    reasons = []
    for c in (no_spare, not_in_place, no_store):
        decided = c.handle(killed(0, 1, 2.0))
        assert isinstance(decided.commands[0], StopWorkers) and Phase.DRAINING == c.phase
        assert [False] == [e["in_place"] for e in events(list(decided.records), EventName.RESTART_SCHEDULED)]
        [fell] = events(list(decided.records), EventName.INPLACE_FELL_BACK)
        reasons.append(fell["reason"])
    assert [
        "1 ranks survived and 0 spares are at hand: 1 is fewer than the 2 the run needs",
        "rank 0 cannot re-form in place: not running on elastic.worker.inplace",
        "the in-place store's host (pid 4141) ended with 1",
    ] == reasons


def test_a_node_that_cannot_hand_the_place_falls_back_to_the_restart_the_policy_decided() -> None:
    c, _ = running()
    c.handle(killed(0, 1, 2.0))
    fell = c.handle(ReformFailed(0, 2.1, "1 places to hand and 0 spares on node n0"))
    assert [{"reason": "1 places to hand and 0 spares on node n0"}] == events(list(fell.records), EventName.INPLACE_FELL_BACK)
    assert isinstance(fell.commands[0], StopWorkers) and fell.commands[0].collateral
    assert not c.reforms(0)
    c.handle(killed(0, 0, 2.2, -signal.SIGTERM))
    assert (PlanAttempt(1),) == c.handle(WorkersStopped(0, 2.3)).commands
    assert not c.handle(WorldReformed(0, 2.4, {})).records  # a late answer changes nothing


def test_a_loss_heard_while_the_reforming_is_carried_out_falls_back() -> None:
    c, _ = running()
    c.handle(killed(0, 1, 2.0))
    decided = c.handle(killed(0, 0, 2.01, 1))
    assert Phase.DRAINING == c.phase and not c.reforms(0)
    [fell] = events(list(decided.records), EventName.INPLACE_FELL_BACK)
    assert "while the world was being re-formed in place" in str(fell["reason"])


def test_without_spares_nothing_is_repaired_in_place_and_nothing_is_said_of_it() -> None:
    c, _ = running(spares=0, in_place=False)
    decided = c.handle(killed(0, 1, 2.0))
    assert isinstance(decided.commands[0], StopWorkers)
    assert [] == events(list(decided.records), EventName.INPLACE_FELL_BACK)


def test_a_failure_the_policy_refuses_is_never_repaired_in_place() -> None:
    c, _ = running(max_restarts=0)
    decided = c.handle(killed(0, 1, 2.0))
    assert isinstance(decided.commands[0], StopWorkers) and Phase.DRAINING == c.phase
    assert [] == events(list(decided.records), EventName.WORLD_REFORMED)


def test_a_reformed_world_with_no_step_by_its_deadline_is_stopped_and_restarted_in_full() -> None:
    stuck, _ = running()
    stuck.handle(killed(0, 1, 2.0))
    stuck.handle(WorldReformed(0, 2.1, {0: 100, 1: 4242}))
    late = stuck.handle(ReformDeadlinePassed(1, 62.1))
    [fell] = events(list(late.records), EventName.INPLACE_FELL_BACK)
    assert "the world re-formed as attempt 1 showed no step within 60.0s (--reform-timeout)" == fell["reason"]
    assert isinstance(late.commands[0], StopWorkers) and late.commands[0].collateral and Phase.DRAINING == stuck.phase
    [planned] = stuck.handle(WorkersStopped(1, 63.0)).commands
    assert isinstance(planned, PlanAttempt) and 2 == planned.attempt

    stepped, _ = running()
    stepped.handle(killed(0, 1, 2.0))
    stepped.handle(WorldReformed(0, 2.1, {0: 100, 1: 4242}))
    stepped.handle(StepsSeen(1, "n0", (RankStep(0, 6, "heartbeat", 2.5),), 2.5))
    assert () == stepped.handle(ReformDeadlinePassed(1, 62.1)).commands
    assert Phase.RUNNING == stepped.phase


def test_the_deadline_is_never_shorter_than_three_of_the_slowest_steps() -> None:
    from elastic.core.inplace.fallback import reform_deadline_s

    assert 60.0 == reform_deadline_s(60.0, [1.0, 2.0])
    assert 90.0 == reform_deadline_s(60.0, [30.0, 12.0])
    assert 60.0 == reform_deadline_s(60.0, [])


def test_a_survivor_that_exits_0_while_the_world_is_being_reformed_is_no_success_and_the_run_restarts() -> None:
    """Rank 1 SIGKILLed and rank 0's exit 0 heard in the same batch, before the re-forming is
    carried out: the world to re-form lost its survivor. Whatever that exit 0 means, the run is not
    declared a success on it: the repair falls back to a full restart (the cheaper error)."""
    c, _ = running()
    c.handle(killed(0, 1, 2.0))
    decided = c.handle(killed(0, 0, 2.01, 0))
    assert not any(isinstance(command, FinishRun) for command in decided.commands)
    assert Phase.DRAINING == c.phase and not c.reforms(0)
    [fell] = events(list(decided.records), EventName.INPLACE_FELL_BACK)
    assert str(fell["reason"]).endswith("while the world was being re-formed in place")
    [planned] = c.handle(WorkersStopped(0, 2.2)).commands
    assert isinstance(planned, PlanAttempt) and 1 == planned.attempt


def test_the_same_failure_again_after_a_repair_is_a_repeat_and_is_neither_repaired_nor_restarted() -> None:
    """The repeat rule reads a re-formed attempt as any: rank 1 killed at step 5, the world
    re-formed back to its committed step, and rank 1 (the spare in its place) killed at step 5 again
    is no fluke; the policy is not asked, nothing is re-formed, the run ends failed."""
    c, _ = running()
    c.handle(killed(0, 1, 2.0))
    c.handle(WorldReformed(0, 2.1, {0: 100, 1: 4242}))
    c.handle(SparesStarted(1, "n0", (4343,), 2.2))
    c.handle(StepsSeen(1, "n0", (RankStep(0, 5, "heartbeat", 2.5), RankStep(1, 5, "heartbeat", 2.5)), 2.5))
    again = c.handle(killed(1, 1, 3.0))
    assert [] == events(list(again.records), EventName.WORLD_REFORMED)
    [refused] = events(list(again.records), EventName.RESTART_REFUSED)
    assert "identical to attempt 0's failure" in str(refused["reason"])
    assert Phase.DRAINING == c.phase
    c.handle(killed(1, 0, 3.1, -signal.SIGTERM))
    [finish] = c.handle(WorkersStopped(1, 3.2)).commands
    assert isinstance(finish, FinishRun) and Outcome.FAILED is finish.outcome
