"""The generation fence: a keeper taken over refuses the commands of every older driver."""

from __future__ import annotations

from elastic.core.takeover.generations import Fence, next_generation


def test_a_driver_taking_over_is_one_generation_above_every_driver_before_it() -> None:
    assert (1, 4) == (next_generation([]), next_generation([1, 3, 2]))


def test_a_keeper_admits_its_own_driver_s_commands_and_refuses_an_older_one_s() -> None:
    """The old driver, still running after the takeover, can no longer act on the ranks."""
    fence = Fence(2).claim(3)
    assert fence is not None
    assert (True, True, False) == (fence.admits(3), fence.admits(4), fence.admits(2))


def test_of_two_claims_of_one_generation_only_the_first_wins() -> None:
    """Two drivers of one generation (a lock that did not hold): the second claim is refused."""
    fence = Fence(1).claim(2)
    assert fence is not None
    assert (None, None) == (fence.claim(2), fence.claim(1))
