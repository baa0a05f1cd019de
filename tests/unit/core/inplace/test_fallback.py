"""Whether a loss is repaired in place or by a full restart, and the reason the journal keeps."""

from __future__ import annotations

import pytest

from elastic.core.failures import FailureKind
from elastic.core.inplace.fallback import REPAIRABLE, repair
from elastic.core.inplace.reform import FullRestart, Reform

EVERYONE = range(4)


@pytest.mark.parametrize("kind", sorted(REPAIRABLE, key=lambda kind: kind.value))
def test_a_ranks_own_end_is_repaired_in_place_when_every_survivor_can_re_form(kind: FailureKind) -> None:
    decision = repair(0, 4, {2: kind}, opted_in=EVERYONE, forming=False, spares=1, min_world_size=4)
    assert Reform(1, 4, ((0, 0), (1, 1), (3, 3)), (2,)) == decision


def test_a_lost_node_is_a_full_restart_and_says_so_before_anything_else() -> None:
    lost = {0: FailureKind.KILLED, 2: FailureKind.NODE_LOST, 3: FailureKind.NODE_LOST, 1: FailureKind.COLLATERAL}
    decision = repair(3, 4, lost, opted_in=EVERYONE, forming=False, spares=2, min_world_size=1)
    assert FullRestart("ranks 2, 3: node lost, and the committed steps held in its memory with it") == decision


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        (FailureKind.LAUNCH_FAILED, "never started"),
        (FailureKind.PREEMPTED, "preemption"),
        (FailureKind.EXIT_HUNG, "a peer finished"),
        (FailureKind.COLLATERAL, "no failure of its own"),
    ],
)
def test_an_end_that_is_no_ranks_own_failure_is_left_to_the_full_restart(kind: FailureKind, why: str) -> None:
    decision = repair(0, 4, {1: kind}, opted_in=EVERYONE, forming=False, spares=1, min_world_size=1)
    assert isinstance(decision, FullRestart)
    assert decision.reason.startswith("rank 1: ") and why in decision.reason


def test_a_survivor_not_on_the_in_place_api_makes_it_a_full_restart() -> None:
    decision = repair(0, 4, {0: FailureKind.KILLED}, opted_in={0, 1, 3}, forming=False, spares=1, min_world_size=1)
    assert FullRestart("rank 2 cannot re-form in place: not running on elastic.worker.inplace") == decision


def test_the_lost_rank_itself_need_not_have_opted_in() -> None:
    """A rank that died before it reached the API is replaced all the same: only survivors re-form."""
    decision = repair(0, 2, {1: FailureKind.CRASHED}, opted_in={0}, forming=False, spares=1, min_world_size=2)
    assert isinstance(decision, Reform) and decision.identical


def test_a_loss_while_the_last_re_forming_is_under_way_is_a_full_restart() -> None:
    decision = repair(1, 2, {0: FailureKind.KILLED}, opted_in=EVERYONE, forming=True, spares=1, min_world_size=1)
    assert FullRestart("rank 0 lost while generation 1 was still forming") == decision


def test_too_few_ranks_left_is_the_next_worlds_own_full_restart() -> None:
    decision = repair(0, 4, {1: FailureKind.KILLED, 2: FailureKind.HUNG}, opted_in=EVERYONE, forming=False, spares=0, min_world_size=3)
    assert isinstance(decision, FullRestart) and "fewer than the 3 the run needs" in decision.reason
