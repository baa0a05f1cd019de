"""The next world after ranks are lost: spares in their places, the survivors alone, or a full restart."""

from __future__ import annotations

import pytest

from elastic.core.inplace.reform import FullRestart, Reform, next_world, notices
from elastic.worker.inplace.notice import Notice


def test_a_spare_for_each_lost_rank_keeps_the_world_and_every_number() -> None:
    """Rank 1 of 4 lost with a spare at hand: generation 3 is the same world, the spare rank 1."""
    reform = next_world(2, 4, {1}, spares=1, min_world_size=2)
    assert Reform(3, 4, ((0, 0), (2, 2), (3, 3)), (1,)) == reform
    assert isinstance(reform, Reform) and reform.identical


def test_spares_beyond_the_lost_ranks_stay_spares() -> None:
    """Two spares for one lost rank: one joins, the world does not grow."""
    reform = next_world(0, 2, [0], spares=2, min_world_size=1)
    assert Reform(1, 2, ((1, 1),), (0,)) == reform


def test_without_enough_spares_the_survivors_are_renumbered_in_order_and_the_world_shrinks() -> None:
    """Ranks 0 and 2 of 4 lost, one spare: survivors 1 and 3 become 0 and 1, the spare rank 2."""
    reform = next_world(5, 4, {0, 2}, spares=1, min_world_size=3)
    assert Reform(6, 3, ((1, 0), (3, 1)), (2,)) == reform
    assert isinstance(reform, Reform) and not reform.identical


def test_a_world_that_shrinks_with_no_spare_at_all_is_the_survivors_alone() -> None:
    assert Reform(1, 3, ((0, 0), (1, 1), (3, 2)), ()) == next_world(0, 4, {2}, spares=0, min_world_size=2)


def test_a_shrunk_world_below_the_smallest_the_run_accepts_is_a_full_restart_that_says_why() -> None:
    decision = next_world(0, 4, {1, 2}, spares=0, min_world_size=3)
    assert FullRestart("2 ranks survived and 0 spares are at hand: 2 is fewer than the 3 the run needs") == decision


def test_with_no_survivor_only_a_full_restart_is_left_even_with_spares() -> None:
    """Spares hold no state: someone must hold the committed step."""
    decision = next_world(0, 2, {0, 1}, spares=4, min_world_size=1)
    assert isinstance(decision, FullRestart)
    assert "no survivor" in decision.reason


@pytest.mark.parametrize(
    ("lost", "spares", "minimum"),
    [(set(), 1, 1), ({4}, 1, 1), ({-1}, 1, 1), ({1}, -1, 1), ({1}, 1, 0)],
)
def test_lost_ranks_outside_the_world_or_negative_counts_are_refused(lost: set[int], spares: int, minimum: int) -> None:
    with pytest.raises(ValueError):
        next_world(0, 4, lost, spares=spares, min_world_size=minimum)


def test_each_survivor_is_told_its_new_place_and_each_spare_is_handed_a_lost_one() -> None:
    reform = next_world(0, 3, {1}, spares=0, min_world_size=1)
    assert isinstance(reform, Reform)
    told, handed = notices(reform, "10.0.0.1:29400")
    assert {0: Notice(1, 0, 2, "10.0.0.1:29400"), 2: Notice(1, 1, 2, "10.0.0.1:29400")} == told
    assert [] == handed
    replaced = next_world(0, 3, {1}, spares=1, min_world_size=1)
    assert isinstance(replaced, Reform)
    assert [Notice(1, 1, 3, "h:1")] == notices(replaced, "h:1")[1]
