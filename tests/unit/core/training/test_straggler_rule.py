"""Stragglers: the pure rule, the window of step times, and the controller's records and drains."""

from __future__ import annotations

import random
import signal
import statistics

import pytest

from elastic.core.controller.controller import Controller
from elastic.core.controller.settings import ControllerSettings
from elastic.core.events import EventName
from elastic.core.journal.fold import fold
from elastic.core.controller.machine import Phase
from elastic.core.messages import (
    AttemptLaunched, AttemptPlanned, PlanAttempt, RankStep, RunStarted, ScaleCheck, StepsSeen, StopWorkers,
    WorkerExited, WorkersStopped,
)
from elastic.core.failures import WorkerExit
from elastic.core.policy.restarts import RestartPolicy
from elastic.core.training.stragglers import (
    STRAGGLER_MARGIN, STRAGGLER_STEPS, OnStraggler, SortedTimes, Straggler, StragglerWatch, WindowMean,
    decide_straggler, median_without, shrinking_pays, straggler_text,
)


def timed(rank: int, step_time_s: float | None, *, step: int = 40, source: str = "interval") -> RankStep:
    return RankStep(rank, step, "output", 1.0, step_time_s, None if step_time_s is None else source)


# -- the rule ---------------------------------------------------------------------------


def test_a_rank_at_the_margin_over_the_others_median_is_a_straggler() -> None:
    """1.25x the median of the other ranks' step times is the line; below it, nothing."""
    watch = StragglerWatch()
    found = watch.saw("n0", [timed(0, 0.09), timed(1, 0.10), timed(2, 0.10), timed(3, 0.10 * STRAGGLER_MARGIN + 0.001)])
    assert [3] == [s.rank for s in found]
    assert "n0" == found[0].node
    assert 0.10 == pytest.approx(found[0].median_s)
    assert found[0].ratio >= STRAGGLER_MARGIN
    assert [] == StragglerWatch().saw("n0", [timed(0, 0.10), timed(1, 0.10), timed(2, 0.12)])


def test_each_rank_is_reported_once_per_attempt() -> None:
    """The same slow rank in every later report is not reported again."""
    watch = StragglerWatch()
    assert 1 == len(watch.saw("n0", [timed(0, 0.1), timed(1, 0.3)]))
    assert [] == watch.saw("n0", [timed(0, 0.1), timed(1, 0.4)])


def test_one_timed_rank_or_untimed_ranks_give_no_straggler() -> None:
    """At least two ranks timed: a window not yet full (no step time) does not count."""
    watch = StragglerWatch()
    assert [] == watch.saw("n0", [timed(0, 0.1), timed(1, None)])
    assert [] == watch.saw("n1", [timed(2, None)])
    assert {0: 0.1} == watch.step_times


def test_ranks_on_two_nodes_are_compared_and_the_straggler_named_with_its_node() -> None:
    """Nodes report separately; the rank is named with the node that reported it."""
    watch = StragglerWatch()
    assert [] == watch.saw("a", [timed(0, 0.1), timed(1, 0.1)])
    found = watch.saw("b", [timed(2, 0.1), timed(3, 0.2, source="compute")])
    assert [(3, "b", "compute")] == [(s.rank, s.node, s.source) for s in found]
    assert "rank 3 on b: 0.2 s a step, 2x the others' median 0.1 s (compute); warned" == straggler_text(
        {**found[0].fields(), "action": "warn"}
    )


def test_the_window_mean_spans_the_last_straggler_steps_steps_once_settled() -> None:
    """Marks of (count, running total): once two blocks of STRAGGLER_STEPS steps agree, the mean over
    at least STRAGGLER_STEPS steps, the latest ones; a later slow-down slides in."""
    window = WindowMean()
    for step in range(2 * STRAGGLER_STEPS):
        window.add(step, step * 0.1)
    assert window.mean() is None and not window.settled  # the second block ends at 2 x STRAGGLER_STEPS
    window.add(2 * STRAGGLER_STEPS, 2 * STRAGGLER_STEPS * 0.1)
    assert window.settled and 0.1 == pytest.approx(window.mean())
    at = 2 * STRAGGLER_STEPS * 0.1
    for step in range(2 * STRAGGLER_STEPS + 1, 4 * STRAGGLER_STEPS):
        at += 0.3  # slower now: the old steps leave the window
        window.add(step, at)
    assert 0.3 == pytest.approx(window.mean())
    window.add(5, 0.0)  # counted from the start again (another process): it settles again
    assert window.mean() is None and not window.settled


def _marks(window: WindowMean, marks: list[tuple[int, float]]) -> list[float | None]:
    means = []
    for count, total in marks:
        window.add(count, total)
        means.append(window.mean())
    return means


def test_steps_whose_lines_came_ahead_of_their_work_are_not_timed() -> None:
    """After a restore a rank's 40 step lines arrive within 0.3 s, three looks, then nothing while the
    work catches up (40 x 0.05 s), then a line every 0.05 s: no step time until two blocks of steady
    steps agree, and then the steady one; the burst never gives its 0.01 s or the catch-up's 0.13 s."""
    burst = [(33, 0.0), (46, 0.15), (60, 0.3)]
    steady = [(60 + n, 0.3 + 2.0 + 0.05 * n) for n in range(1, 101)]
    means = _marks(WindowMean(), burst + steady)
    timed = [m for m in means if m is not None]
    assert timed and all(m == pytest.approx(0.05) for m in timed), timed
    assert means.index(timed[0]) >= len(burst) + 2 * STRAGGLER_STEPS  # two steady blocks after the catch-up


def test_a_slow_warm_up_is_left_out_of_the_step_time() -> None:
    """The first 16 steps of an attempt at twice the pace (compilation, cold caches) are not compared."""
    warm_up = [(n, 0.2 * n) for n in range(1, 17)]
    steady = [(16 + n, 3.2 + 0.1 * n) for n in range(1, 65)]
    timed = [m for m in _marks(WindowMean(), warm_up + steady) if m is not None]
    assert timed and all(m == pytest.approx(0.1) for m in timed), timed


def test_a_rank_slow_from_the_start_is_timed_after_two_blocks() -> None:
    """Steady and slow: its blocks agree, so it is timed from its 32nd step, at its own pace."""
    means = _marks(WindowMean(), [(n, 0.3 * n) for n in range(1, 2 * STRAGGLER_STEPS + 2)])
    assert means[2 * STRAGGLER_STEPS - 1] is None
    assert 0.3 == pytest.approx(means[2 * STRAGGLER_STEPS])


# -- the controller ---------------------------------------------------------------------


def running(on_straggler: OnStraggler, *, nodes: int, min_nodes: int) -> Controller:
    c = Controller(RestartPolicy.create(max_restarts=0), ControllerSettings(grace_s=5.0, min_nodes=min_nodes,
                   on_straggler=on_straggler))
    for obs in (RunStarted(0.0), AttemptPlanned(0, 2 * nodes, 0.1, nodes=nodes), AttemptLaunched(0, 2 * nodes, 0.2)):
        c.handle(obs)
    return c


def slow_rank_1(attempt: int = 0) -> list[StepsSeen]:
    return [
        StepsSeen(attempt, "a", (timed(0, 0.1),), 5.0),
        StepsSeen(attempt, "b", (timed(1, 0.3),), 5.1),
    ]


def straggler_records(c: Controller, seen: list[StepsSeen]) -> list[dict[str, object]]:
    records = [r for s in seen for r in c.handle(s).records]
    return [dict(r.fields) for r in records if r.event is EventName.STRAGGLER_SEEN]


def test_warn_journals_the_straggler_and_the_attempt_runs_on() -> None:
    """With the default, a straggler is a record naming rank and node; no drain."""
    c = running(OnStraggler.WARN, nodes=2, min_nodes=1)
    [record] = straggler_records(c, slow_rank_1())
    assert {"rank": 1, "node": "b", "action": "warn", "source": "interval", "reason": "--on-straggler warn"} == {
        k: record[k] for k in ("rank", "node", "action", "source", "reason")
    }
    assert 3.0 == pytest.approx(record["ratio"])
    assert Phase.RUNNING == c.phase


def test_restart_drains_and_plans_the_next_attempt_without_the_node_charging_no_budget() -> None:
    """--on-straggler restart with a node to spare: drain, then PlanAttempt leaves the node out;
    --max-restarts 0 is not spent, and the streak of attempts without progress does not grow."""
    c = running(OnStraggler.RESTART, nodes=2, min_nodes=1)
    seen = slow_rank_1()
    c.handle(seen[0])
    decision = c.handle(seen[1])
    [record] = [dict(r.fields) for r in decision.records if r.event is EventName.STRAGGLER_SEEN]
    assert ("restart", "without node b the 1 of 2 nodes left (--nnodes needs at least 1) train faster: 0.50 of "
            "the full pace, against 0.33 for all held to the straggler's") == (record["action"], record["reason"])
    assert (StopWorkers(0, signal.SIGTERM, 5.0),) == decision.commands
    for rank in (0, 1):
        c.handle(WorkerExited(WorkerExit(attempt=0, rank=rank, node="ab"[rank], returncode=-15, observed_at=6.0)))
    relaunch = c.handle(WorkersStopped(0, 6.1))
    assert (PlanAttempt(1, 0.0, ("b",)),) == relaunch.commands
    assert c.attempts[0].restarted
    assert 0 == c.policy.failures.used(7.0)


def test_restart_without_a_spare_warns_and_says_why() -> None:
    """--nnodes 2 on 2 nodes: no world without the node, so a warning whose reason says so."""
    c = running(OnStraggler.RESTART, nodes=2, min_nodes=2)
    [record] = straggler_records(c, slow_rank_1())
    assert "warn" == record["action"]
    assert str(record["reason"]).startswith("no spare node: without node b 1 of 2 would be left")
    assert Phase.RUNNING == c.phase


@pytest.mark.parametrize(
    ("nodes", "ratio", "pays"),
    [(2, 2.0, False), (2, 2.1, True), (4, 1.3, False), (4, 1.34, True), (8, 1.25, True), (1, 9.0, False)],
)
def test_leaving_the_node_out_pays_when_the_nodes_left_outpace_the_held_world(
    nodes: int, ratio: float, pays: bool
) -> None:
    """N - 1 nodes at (N - 1)/N of the pace against N held to 1/ratio: it pays over N/(N - 1)."""
    assert pays is shrinking_pays(ratio, nodes)


def test_with_no_spare_a_mild_straggler_is_only_warned_of_with_both_paces() -> None:
    """--nnodes 1:4 on 4 nodes, no spare, a rank at 1.3x: 3 nodes (0.75) would be slower than
    4 held to 1/1.3 (0.77), so no restart; a rank at 1.5x on the same world does restart."""
    def decide(ratio: float) -> tuple[str, str]:
        found = Straggler(1, "b", 0.1 * ratio, 0.1, ratio, "compute", 40)
        decision = decide_straggler(found, on_straggler=OnStraggler.RESTART, nodes=4, min_nodes=1,
                                    available_nodes=4, running=True)
        return decision.action.value, decision.reason

    assert ("warn", "no spare node (4 usable), and without node b the 3 of 4 nodes left would train slower: "
            "0.75 of the full pace, against 0.77 for all held to the straggler's (leaving it out pays over "
            "1.33x the median)") == decide(1.3)
    assert "restart" == decide(1.5)[0]


def test_restart_takes_a_spare_node_the_scale_watch_saw() -> None:
    """--nnodes 2 on 2 nodes of 3 usable: the spare makes the restart possible."""
    c = running(OnStraggler.RESTART, nodes=2, min_nodes=2)
    c.handle(ScaleCheck(0, 3, None, 4.0))
    [record] = straggler_records(c, slow_rank_1())
    assert ("restart", "a spare node: 3 usable, the attempt runs on 2") == (record["action"], record["reason"])
    assert Phase.DRAINING == c.phase


def journal_of(c: Controller, seen: list[StepsSeen]) -> list[dict[str, object]]:
    """The journal the controller writes while it handles ``seen``, after a run_started."""
    records = [r for s in seen for r in c.handle(s).records]
    return [{"event": "run_started", "time": "2026-01-01T00:00:00+00:00", "attempt": 0}] + [
        {"event": r.event.value, "time": f"2026-01-01T00:00:{r.at:09.6f}+00:00", "attempt": r.attempt, **r.fields}
        for r in records
    ]


def test_the_fold_keeps_each_attempts_stragglers() -> None:
    """straggler_seen records fold into their attempt (the report, status and timeline read them)."""
    c = running(OnStraggler.WARN, nodes=2, min_nodes=1)
    journal = journal_of(c, slow_rank_1())
    [attempt] = fold(journal).closed()
    assert [(1, "b")] == [(s["rank"], s["node"]) for s in attempt.stragglers]
    assert not attempt.straggler_restart


def test_a_driver_that_takes_the_run_over_keeps_the_stragglers_nodes_out() -> None:
    """The journal's straggler_seen with action restart: a new driver's attempts leave the node out too."""
    from elastic.core.journal.recovery import prior_run

    c = running(OnStraggler.RESTART, nodes=2, min_nodes=1)
    journal = journal_of(c, slow_rank_1())
    prior = prior_run(journal)
    assert ("b",) == prior.left_out
    taken_over = Controller(RestartPolicy.create(max_restarts=0),
                            ControllerSettings(grace_s=5.0, left_out=prior.left_out))
    assert (PlanAttempt(0, 0.0, ("b",)),) == taken_over.handle(RunStarted(0.0)).commands


@pytest.mark.parametrize(
    ("values", "value"),
    [((0.1, 0.2), 0.2), ((0.1, 0.1, 0.3), 0.1), ((0.1, 0.2, 0.3, 0.4), 0.3), ((0.1, 0.2, 0.2, 0.5, 0.9), 0.9)],
)
def test_the_median_of_the_others_is_taken_from_one_sorted_list(values: tuple[float, ...], value: float) -> None:
    """Each rank is compared with the median of the others, found without sorting them again."""
    others = list(values)
    others.remove(value)
    assert statistics.median(others) == pytest.approx(median_without(values, value))


@pytest.mark.parametrize("seed", range(4))
def test_sorted_times_keep_order_through_adds_and_removes_across_buckets(seed: int) -> None:
    """The straggler watch's sorted step times, in buckets of at most 4 here: each add and remove
    leaves them what sorting them all again gives, and the median of the others read from them is
    the one of the sorted list."""
    rng = random.Random(seed)
    times, kept = SortedTimes(load=2), []
    for _ in range(400):
        if kept and rng.random() < 0.4:
            value = rng.choice(kept)
            kept.remove(value)
            times.remove(value)
        else:
            value = rng.choice((0.1, 0.2, 0.3)) if rng.random() < 0.3 else rng.uniform(0.0, 1.0)
            kept.append(value)
            times.add(value)
        kept.sort()
        assert kept == list(times)
        if len(kept) >= 2:
            value = rng.choice(kept)
            assert median_without(kept, value) == median_without(times, value)
    with pytest.raises(ValueError):
        times.remove(2.0)
