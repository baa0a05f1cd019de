"""The keeper's lease: kept until it ends, then a drain with its grace, then the kill; done once nothing lives."""

from __future__ import annotations

import pytest

from elastic.core.takeover.lease import Due, Lease


def test_a_lost_driver_s_ranks_are_kept_until_the_lease_ends_then_drained() -> None:
    """Within the lease nothing is done; at its end the drain is due."""
    keeping = Lease(lease_s=60.0, grace_s=30.0).lost(at=100.0)
    assert [Due.KEEP, Due.KEEP, Due.DRAIN] == [keeping.due(t, alive=True) for t in (100.0, 159.9, 160.0)]


def test_the_drain_s_grace_ends_in_the_kill() -> None:
    """Once the drain began, the grace runs; at its end what is left is killed."""
    draining = Lease(lease_s=60.0, grace_s=30.0).lost(at=100.0).drained(at=160.0)
    assert [Due.KEEP, Due.KILL] == [draining.due(189.9, alive=True), draining.due(190.0, alive=True)]


def test_ranks_all_ended_within_the_lease_are_accounted_for_until_it_ends() -> None:
    """Every rank gone (the job finished meanwhile): their exits wait for a driver until the lease ends."""
    keeping = Lease(lease_s=60.0, grace_s=30.0).lost(at=100.0)
    assert [Due.KEEP, Due.DONE] == [keeping.due(159.0, alive=False), keeping.due(160.0, alive=False)]


def test_ranks_all_gone_once_drained_is_done_at_once() -> None:
    """After a drain (the lease's end, a stop from outside, a new driver's) nothing is left to wait for."""
    assert Due.DONE == Lease(lease_s=60.0, grace_s=30.0).lost(at=100.0).drained(101.0).due(102.0, alive=False)


def test_a_stop_from_outside_drains_before_the_lease_ends_and_a_second_keeps_the_first_time() -> None:
    """An early drain starts the grace then; the lease's end later changes nothing."""
    draining = Lease(lease_s=60.0, grace_s=5.0).lost(at=0.0).drained(at=10.0).drained(at=60.0)
    assert (10.0, Due.KILL) == (draining.drain_at, draining.due(15.0, alive=True))


def test_the_keeper_sleeps_until_its_next_deadline_and_never_a_negative_time() -> None:
    """Before the drain it wakes at the lease's end, during it at the grace's end."""
    keeping = Lease(lease_s=60.0, grace_s=30.0).lost(at=100.0)
    assert (50.0, 0.0, 20.0) == (keeping.wake_in_s(110.0), keeping.wake_in_s(170.0),
                                 keeping.drained(160.0).wake_in_s(170.0))


def test_a_lease_of_zero_keeps_nothing() -> None:
    """Without a lease a loss sweeps at once, as before leases."""
    assert (False, True) == (Lease(0.0, 30.0).keeps, Lease(0.5, 30.0).keeps)


@pytest.mark.parametrize(("lease_s", "grace_s"), [(-1.0, 0.0), (1.0, -0.5)])
def test_a_negative_lease_or_grace_is_refused(lease_s: float, grace_s: float) -> None:
    with pytest.raises(ValueError, match="never negative"):
        Lease(lease_s, grace_s)
