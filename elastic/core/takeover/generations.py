"""One driver at a time, beyond the run directory's lock: the generation fence.

Each driver of a run has a generation, one more than the highest its journal names. Every command
to a keeper carries its sender's; the keeper holds the highest it has accepted and refuses older
ones, so a driver that still runs after it lost the run (a lock lost with a partitioned file
system, a process stopped and resumed) cannot act on ranks another driver took over. Standard
library only: the spawner imports it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Fence", "next_generation"]


def next_generation(seen: Iterable[int]) -> int:
    """The generation of a driver that takes a run over whose drivers had ``seen`` (none: 1)."""
    return max(seen, default=0) + 1


@dataclass(frozen=True)
class Fence:
    """What a keeper accepts: commands of ``generation`` or newer."""

    generation: int

    def admits(self, generation: int) -> bool:
        """Whether a command sent by a driver of ``generation`` may act."""
        return generation >= self.generation

    def claim(self, generation: int) -> Fence | None:
        """The fence after a driver of ``generation`` takes the keeper over; None: refused, the
        keeper is already a driver's of that generation or a newer one."""
        return Fence(generation) if generation > self.generation else None
