"""The keeper's lease: how long a spawner keeps its ranks once its driver is lost, and what is due when.

A spawner started with ``--orphan-lease`` keeps its ranks when its driver dies (the keeper:
``docs/design/driver-takeover.md``). From the loss it waits out the lease for a new driver; at the
lease's end (or earlier, when told to from outside) it drains: the stop signal to every rank's
group, the grace, then SIGKILL and the sweep. Once nothing is alive it is done, but not before
the lease's end unless it drained: the exits it read (every rank may have finished meanwhile)
are for the driver that comes within the lease, and the keeper alone holds nothing else. The spawner asks
:meth:`Keeping.due` at each turn of its loop and sleeps :meth:`Keeping.wake_in_s` at most; every
time is the caller's, on one monotonic clock. Standard library only: the spawner imports it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

__all__ = ["Due", "Keeping", "Lease"]


class Due(enum.Enum):
    """What the keeper must do now."""

    KEEP = "keep"  # wait: the lease, or the drain's grace, runs on
    DRAIN = "drain"  # send the stop signal to every rank's group: the drain begins
    KILL = "kill"  # the grace is over: SIGKILL and sweep what is left
    DONE = "done"  # nothing of the ranks is alive, and the lease is over or they were drained: exit


@dataclass(frozen=True)
class Lease:
    """The terms a driver gives its spawners: ``lease_s`` after a loss, then a drain of ``grace_s``."""

    lease_s: float
    grace_s: float

    def __post_init__(self) -> None:
        if self.lease_s < 0 or self.grace_s < 0:
            raise ValueError(f"a lease and its grace are never negative: {self.lease_s}, {self.grace_s}")

    @property
    def keeps(self) -> bool:
        """Whether a loss keeps the ranks at all (a lease of 0 sweeps them at once, as without one)."""
        return self.lease_s > 0

    def lost(self, at: float) -> Keeping:
        """The keeping that begins when the driver is lost at ``at``."""
        return Keeping(self, lost_at=at)


@dataclass(frozen=True)
class Keeping:
    """The ranks kept since ``lost_at``; ``drain_at``: when their drain began (None: not yet)."""

    lease: Lease
    lost_at: float
    drain_at: float | None = None

    @property
    def ends_at(self) -> float:
        """When the lease ends if nobody takes the ranks over: the drain begins then."""
        return self.lost_at + self.lease.lease_s

    def due(self, now: float, alive: bool) -> Due:
        """What is due at ``now``, with ranks still ``alive`` or not."""
        if not alive:  # keep their exits for a new driver until the lease ends, unless drained
            return Due.DONE if self.drain_at is not None or now >= self.ends_at else Due.KEEP
        if self.drain_at is None:
            return Due.DRAIN if now >= self.ends_at else Due.KEEP
        return Due.KILL if now >= self.drain_at + self.lease.grace_s else Due.KEEP

    def drained(self, at: float) -> Keeping:
        """The drain began at ``at`` (at the lease's end, or earlier: a stop from outside); a
        second call keeps the first time."""
        return self if self.drain_at is not None else replace(self, drain_at=at)

    def wake_in_s(self, now: float) -> float:
        """Seconds from ``now`` to the next deadline (0: one is due already)."""
        deadline_at = self.ends_at if self.drain_at is None else self.drain_at + self.lease.grace_s
        return max(0.0, deadline_at - now)
