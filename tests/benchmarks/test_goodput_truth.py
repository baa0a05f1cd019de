"""Ground truth is read from the training program's log: unique steps, undisturbed step time, recoveries."""

from __future__ import annotations

import math

import pytest
from goodput.truth import read_lines, recoveries, truth, young_daly_s


def steps(pid: int, first: int, last: int, t0: float, step_s: float = 0.5) -> list[dict[str, float]]:
    return [{"step": s, "t": t0 + (s - first) * step_s, "pid": pid} for s in range(first, last + 1)]


def test_goodput_counts_each_step_once_at_the_median_undisturbed_step_time() -> None:
    # steps 1-10 by pid 1 (0.5 s apart), a kill, steps 7-16 again by pid 2 after a gap
    log = steps(1, 1, 10, 100.0) + steps(2, 7, 16, 110.0)
    found = truth(log, wall_s=20.0)
    assert (found.steps, found.unique_steps, found.redone) == (20, 16, 4)
    assert found.step_s == 0.5
    assert found.goodput == pytest.approx(16 * 0.5 / 20.0)


def test_a_gap_between_processes_or_a_skipped_step_is_not_an_undisturbed_step() -> None:
    log = [
        {"step": 1, "t": 0.0, "pid": 1},
        {"step": 2, "t": 1.0, "pid": 1},
        {"step": 3, "t": 9.0, "pid": 2},  # another process
        {"step": 5, "t": 19.0, "pid": 2},  # a step skipped
        {"step": 6, "t": 20.0, "pid": 2},
    ]
    assert truth(log, 30.0).step_s == 1.0


def test_checkpoints_are_counted_with_their_median_cost() -> None:
    log = [{"save": 5, "t0": 1.0, "t1": 1.5, "pid": 1}, {"save": 10, "t0": 3.0, "t1": 3.25, "pid": 1},
           {"save": 15, "t0": 5.0, "t1": 6.0, "pid": 1}]
    found = truth(log, 10.0)
    assert (found.checkpoints, found.checkpoint_s, found.goodput) == (3, 0.5, None)


def test_an_event_recovers_at_the_first_step_of_a_process_that_had_not_stepped_before_it() -> None:
    log = steps(1, 1, 10, 100.0) + steps(2, 7, 16, 110.0)
    injected = [{"t": 104.6}, {"t": 200.0}]
    assert recoveries(log, injected) == [pytest.approx(5.4), None]


def test_a_line_cut_off_by_a_kill_is_left_out() -> None:
    assert read_lines('{"step": 1, "t": 0, "pid": 1}\n{"step": 2, "t"') == [{"step": 1, "t": 0, "pid": 1}]


def test_young_daly_is_the_square_root_of_twice_the_cost_times_the_mtbf() -> None:
    assert young_daly_s(60.0, 10_000.0) == pytest.approx(math.sqrt(1_200_000.0))
    with pytest.raises(ValueError):
        young_daly_s(1.0, 0.0)


def test_a_run_that_never_committed_two_steps_in_a_row_is_counted_at_the_nominal_step() -> None:
    log = [{"step": 1, "t": 5.0, "pid": 1}]
    assert truth(log, 100.0).goodput is None
    assert truth(log, 100.0, nominal_step_s=0.2).goodput == pytest.approx(0.002)
    assert truth([], 100.0, nominal_step_s=0.2).goodput is None
