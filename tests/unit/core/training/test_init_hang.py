"""Hung in distributed initialisation, pure: the window of --init-timeout and who is past it."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic.core.options.config import RunConfig
from elastic.core.options.table import option
from elastic.core.options.values import ConfigError
from elastic.core.training.init_hang import (
    FIRST_INIT_S, FLOOR_S, InitTimeout, RankInit, hung_in_init, init_window_s, longest_init_s,
)

AUTO = InitTimeout()
NONE = InitTimeout(None, auto=False)


def test_auto_allows_torchs_nccl_default_before_any_init_completed() -> None:
    assert FIRST_INIT_S == 600.0 == init_window_s(AUTO, [])


def test_auto_allows_ten_times_the_longest_completed_init_of_the_run() -> None:
    assert 10 * 42.0 == init_window_s(AUTO, [3.0, 42.0, 7.5])


def test_auto_never_allows_less_than_its_floor_once_inits_were_quick() -> None:
    assert FLOOR_S == 60.0 == init_window_s(AUTO, [0.4, 1.2])


def test_an_explicit_window_is_used_as_it_is() -> None:
    assert 5.0 == init_window_s(InitTimeout(5.0, auto=False), [100.0])


def test_none_never_calls_a_rank_hung_in_init() -> None:
    assert init_window_s(NONE, [1.0]) is None
    assert [] == hung_in_init(NONE, [RankInit(0, began_at=0.0)], [1.0], now=1e9)


def test_a_rank_still_in_init_past_the_window_is_hung_with_its_reason() -> None:
    ranks = [RankInit(0, began_at=100.0), RankInit(1, began_at=103.0)]

    [hang] = hung_in_init(InitTimeout(5.0, auto=False), ranks, [], now=106.0)

    assert (0, 6.0, 5.0) == (hang.rank, hang.waited_s, hang.window_s)
    assert "hung in distributed initialisation for 6 s (--init-timeout 5)" == hang.reason


def test_a_rank_that_returned_from_init_is_never_hung() -> None:
    ranks = [RankInit(0, began_at=100.0, ended_at=200.0)]

    assert [] == hung_in_init(InitTimeout(5.0, auto=False), ranks, [], now=1000.0)


def test_auto_holds_a_first_init_open_for_600_s() -> None:
    ranks = [RankInit(0, began_at=0.0)]

    assert [] == hung_in_init(AUTO, ranks, [], now=599.0)
    [hang] = hung_in_init(AUTO, ranks, [], now=601.0)
    assert "(--init-timeout auto allows 600 s)" in hang.reason


def test_auto_after_an_earlier_attempts_init_calls_a_hang_within_its_window() -> None:
    ranks = [RankInit(0, began_at=0.0)]

    assert [] == hung_in_init(AUTO, ranks, [8.0], now=79.0)
    assert [0] == [h.rank for h in hung_in_init(AUTO, ranks, [8.0], now=81.0)]


def test_a_peer_that_finished_its_init_sets_the_window_of_one_that_did_not() -> None:
    ranks = [RankInit(0, began_at=0.0), RankInit(1, began_at=0.0, ended_at=2.0)]

    assert [] == hung_in_init(AUTO, ranks, [], now=59.0)
    [hang] = hung_in_init(AUTO, ranks, [], now=61.0)
    assert (0, 60.0) == (hang.rank, hang.window_s)


def test_a_big_jobs_slow_init_is_never_cut_short_by_a_quick_earlier_one() -> None:
    ranks = [RankInit(0, began_at=0.0), RankInit(1, began_at=0.0, ended_at=240.0)]

    assert [] == hung_in_init(AUTO, ranks, [1.0], now=2000.0)


@pytest.mark.parametrize(("text", "expected"), [
    ("auto", AUTO), ("none", NONE), ("5", InitTimeout(5.0, auto=False)), ("0.5", InitTimeout(0.5, auto=False)),
])
def test_init_timeout_reads_seconds_auto_and_none(text: str, expected: InitTimeout) -> None:
    assert expected == option("--init-timeout").value.parse(text)  # type: ignore[union-attr]


@pytest.mark.parametrize("text", ["0", "-1", "soon"])
def test_init_timeout_refuses_what_is_no_window(text: str) -> None:
    with pytest.raises(ValueError, match="must be seconds > 0"):
        option("--init-timeout").value.parse(text)  # type: ignore[union-attr]


def test_init_timeout_is_auto_unless_given() -> None:
    assert AUTO == RunConfig(command=("train",), run_id="r1", run_dir=Path("run"), nproc_per_node=2).init_timeout


def test_a_config_with_no_init_timeout_value_names_the_flag() -> None:
    with pytest.raises(ConfigError, match="--init-timeout"):
        RunConfig(command=("train",), run_id="r1", run_dir=Path("run"), nproc_per_node=2,
                  init_timeout=5.0)  # type: ignore[arg-type]


def test_the_longest_init_is_read_from_start_up_profiles_of_any_rank_and_attempt() -> None:
    profiles = [
        {"0": {"imports": 3.0, "distributed_init": 0.9}, "1": {"distributed_init": 2.5}},
        None,  # an attempt with no profile
        {"0": {"imports": 9.0}},  # a rank that never initialised
    ]
    assert 2.5 == longest_init_s(profiles)
    assert 4.0 == longest_init_s(profiles, longest=4.0)
    assert longest_init_s([None, {}]) is None
