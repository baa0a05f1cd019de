"""A dead driver's attempt adopted with its ranks running: the controller goes on with it, in
running, with no launch, no restart and no charge; its exits, kept or live, are decided as any."""

from __future__ import annotations

import signal
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from elastic.core.controller.controller import Controller
from elastic.core.controller.machine import Phase, Trigger
from elastic.core.controller.settings import ControllerSettings
from elastic.core.events import EventName
from elastic.core.failures import WorkerExit
from elastic.core.messages import (
    Adopted, AttemptLaunched, AttemptPlanned, FinishRun, Outcome, PlanAttempt, RankStep, Resumed, RunStarted,
    StepsSeen, StopWorkers, WorkerExited, WorkersStopped,
)
from elastic.core.policy.restarts import RestartPolicy

ADOPTED = Adopted(attempt=2, world_size=2, nodes=1, generation=3, ran_s=600.0, resume_step=5, exits_kept=1)


def taken_over(streak: int = 2) -> tuple[Controller, list[EventName], list[object]]:
    c = Controller(RestartPolicy.create(max_restarts=3),
                   ControllerSettings(grace_s=5.0, tracks_progress=True, max_no_progress=3, first_attempt=2))
    decision = c.handle(RunStarted(0.0, Resumed(streak, interrupted=2, interrupted_resume_step=5, adopted=ADOPTED)))
    return c, [r.event for r in decision.records], list(decision.commands)


def ended(rank: int, returncode: int, at: float) -> WorkerExited:
    return WorkerExited(WorkerExit(attempt=2, rank=rank, node="n0", returncode=returncode, observed_at=at))


def test_an_adopted_attempt_runs_on_with_no_launch_no_stop_and_no_streak_counted() -> None:
    c, events, commands = taken_over(streak=2)
    assert [] == commands  # nothing planned, launched or stopped
    assert Phase.RUNNING == c.phase
    assert [EventName.PHASE_CHANGED, EventName.ATTEMPT_ADOPTED] == events
    assert EventName.WORKERS_STOPPED not in events  # the attempt did not end with its driver
    assert 2 == c.attempt


def test_the_adoption_is_journaled_with_its_generation_and_the_exits_kept() -> None:
    c = Controller(RestartPolicy.create(max_restarts=3), ControllerSettings(grace_s=5.0, first_attempt=2))
    decision = c.handle(RunStarted(0.0, Resumed(0, interrupted=2, adopted=ADOPTED)))
    [changed] = [r for r in decision.records if r.event is EventName.PHASE_CHANGED]
    assert ("pending", "running", Trigger.ADOPT.value) == (
        changed.fields["source"], changed.fields["dest"], changed.fields["trigger"])
    [adopted] = [r for r in decision.records if r.event is EventName.ATTEMPT_ADOPTED]
    assert (2, {"generation": 3, "world_size": 2, "nodes": 1, "exits_kept": 1}) == (adopted.attempt, dict(adopted.fields))


def test_a_rank_sigkilled_while_no_driver_ran_is_one_restart_of_the_adopted_attempt() -> None:
    """Its exit, kept by the keeper and heard after the adoption, is decided as a live one: a drain of
    the peer, one restart charged, the next attempt planned from pending."""
    c, _, _ = taken_over(streak=0)
    killed = c.handle(ended(1, -signal.SIGKILL, 0.01))
    [stop] = killed.commands
    assert isinstance(stop, StopWorkers) and 2 == stop.attempt
    [scheduled] = [r for r in killed.records if r.event is EventName.RESTART_SCHEDULED]
    assert 2 == scheduled.fields["remaining"]  # --max-restarts 3: this one charged
    c.handle(ended(0, -signal.SIGTERM, 0.5))
    [plan] = c.handle(WorkersStopped(2, 0.6)).commands
    assert isinstance(plan, PlanAttempt) and 3 == plan.attempt


def test_an_adopted_attempt_whose_ranks_all_exit_0_succeeds() -> None:
    c, _, _ = taken_over()
    c.handle(ended(0, 0, 1.0))
    c.handle(ended(1, 0, 1.1))
    [finish] = c.handle(WorkersStopped(2, 1.2)).commands
    assert isinstance(finish, FinishRun) and (Outcome.SUCCEEDED, 0) == (finish.outcome, finish.exit_status)


FILE_NOT_FOUND = ("Traceback (most recent call last):", '  File "train.py", line 80, in <module>',
                  "FileNotFoundError: [Errno 2] No such file or directory: 'shard-0091.bin'")


def _not_found(adopted: Adopted) -> list[str]:
    """What becomes of a FileNotFoundError (a definite failure at start-up only) kept while no driver ran."""
    c = Controller(RestartPolicy.create(max_restarts=3), ControllerSettings(grace_s=5.0, first_attempt=2))
    c.handle(RunStarted(10.0, Resumed(0, interrupted=2, adopted=adopted)))
    decision = c.handle(WorkerExited(WorkerExit(attempt=2, rank=1, node="n0", returncode=1, observed_at=9.0,
                                                log_tail=FILE_NOT_FOUND)))
    ends = (EventName.RESTART_SCHEDULED, EventName.CRASH_LOOP_DETECTED)
    return [r.event.value for r in decision.records if r.event in ends] + [
        r.fields["kind"] for r in decision.records if r.event is EventName.WORKER_FAILED]


def test_a_kept_exit_is_judged_with_what_the_dead_driver_saw_of_the_attempts_start() -> None:
    """An attempt that had stepped, or had run for minutes, is past its start-up for a failure
    kept while no driver ran, as for a live one: a FileNotFoundError is restarted, not taken for
    a file missing at start-up; seconds after its launch with no step, it is the start-up's."""
    stepped = _not_found(replace(ADOPTED, ran_s=30.0, first_step=(0, 6)))
    long_running = _not_found(replace(ADOPTED, ran_s=600.0))
    just_launched = _not_found(replace(ADOPTED, ran_s=2.0))
    assert ["restart_scheduled", "exited"] == stepped == long_running, (stepped, long_running)
    assert ["exited"] == just_launched  # no restart: what no restart fixes


# What a rank may end with while no driver is there: a clean end, a crash, a kill, a stop, a
# start-up signature, a CUDA out-of-memory.
_ENDS = [
    (0, ()), (1, ()), (-signal.SIGKILL, ()), (-signal.SIGTERM, ()), (1, FILE_NOT_FOUND),
    (1, ("Traceback (most recent call last):",
         "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")),
]
TAKEN_OVER_AT = 100.0


def _decided(c: Controller, observation: object) -> list[tuple[object, ...]]:
    """What an observation made the controller decide, without times: its verdicts and commands."""
    decision = c.handle(observation)  # type: ignore[arg-type]
    kept = (EventName.WORKER_FAILED, EventName.WORKER_EXITED, EventName.RESTART_SCHEDULED,
            EventName.CRASH_LOOP_DETECTED, EventName.RUN_FINISHED)
    records = [(r.event.value, *sorted((k, str(v)) for k, v in r.fields.items()
                                       if not k.endswith(("_s", "_at")) and k != "step"))
               for r in decision.records if r.event in kept]
    commands = [(type(command).__name__, getattr(command, "signal", None), getattr(command, "collateral", None))
                for command in decision.commands]
    return [*records, *commands]


@settings(max_examples=150, deadline=None)
@given(ends=st.lists(st.tuples(st.integers(0, 1), st.sampled_from(range(len(_ENDS))), st.floats(2.0, 95.0)),
                     min_size=1, max_size=2, unique_by=lambda end: end[0]))
def test_exits_kept_while_no_driver_ran_are_decided_exactly_as_a_live_driver_decides_them(
    ends: list[tuple[int, int, float]],
) -> None:
    """Whatever the ranks ended with and when, the driver that took the attempt over decides each
    kept exit as the driver that launched it would have, live: the same verdicts, restarts, drains
    and end. (Launched at 0, its first step at 1, taken over at 100.) Only the rank's step is not
    known to it (nobody read the rank's output while no driver ran): its failures say none rather
    than a stale one, and a failure with no step of its own in an attempt that trained is never a
    repeat of one before any step (test_signature_repeats.py)."""
    exits = [WorkerExited(WorkerExit(attempt=0, rank=rank, node="n0", returncode=_ENDS[end][0], observed_at=at,
                                     log_tail=_ENDS[end][1]))
             for rank, end, at in sorted(ends, key=lambda e: e[2])]

    def controller() -> Controller:
        return Controller(RestartPolicy.create(max_restarts=3), ControllerSettings(grace_s=5.0, failure_grace_s=2.0))

    live = controller()
    for observation in (RunStarted(0.0), AttemptPlanned(0, 2, 0.0), AttemptLaunched(0, 2, 0.0),
                        StepsSeen(0, "n0", (RankStep(0, 6, "output", 1.0, first_step=6),), 1.0)):
        live.handle(observation)
    adopting = controller()
    adopting.handle(RunStarted(TAKEN_OVER_AT, Resumed(0, adopted=Adopted(
        attempt=0, world_size=2, nodes=1, generation=2, ran_s=TAKEN_OVER_AT, first_step=(0, 6), sign_of_life=True))))

    for exited in exits:
        assert _decided(live, exited) == _decided(adopting, exited)
