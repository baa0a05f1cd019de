"""The next world after ranks are lost: spares in their places, the survivors alone, or a full restart.

:func:`next_world` decides; :func:`notices` says what each rank of the new world is
told (:class:`elastic.worker.inplace.notice.Notice`: survivors in their notice
file, spares in the identity they are handed). With a spare for every lost rank
the world keeps its size and every rank its number, so each rank draws the
batches it drew before and the result stays bit-identical to a run with no
failure; with fewer, the survivors are renumbered in order and the spares
there are take the numbers after them (the world shrinks, the result differs);
below the smallest world the run accepts, or with no survivor, only a full
restart is left, and its reason says why.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from elastic.worker.inplace.notice import Notice

__all__ = ["FullRestart", "Reform", "Reforming", "next_world", "notices"]


@dataclass(frozen=True)
class Reform:
    """Generation ``generation`` of ``world_size`` ranks: ``survivors`` maps each surviving rank's
    old number to its new one; ``joiners`` are the new numbers a spare takes; ``identical`` says
    the world is the one before (same size, same numbers), so the result is unchanged."""

    generation: int
    world_size: int
    survivors: tuple[tuple[int, int], ...]
    joiners: tuple[int, ...]

    @property
    def identical(self) -> bool:
        return all(old == new for old, new in self.survivors) and len(self.survivors) + len(self.joiners) == self.world_size


@dataclass(frozen=True)
class FullRestart:
    """No re-forming in place: every rank is stopped and the run restarts as it does today."""

    reason: str


def next_world(
    generation: int, world_size: int, lost: Collection[int], spares: int, min_world_size: int
) -> Reform | FullRestart:
    """The world after generation ``generation`` of ``world_size`` ranks lost ``lost``, with
    ``spares`` warm spares at hand and at least ``min_world_size`` ranks needed."""
    gone = set(lost)
    if not gone or any(not 0 <= rank < world_size for rank in gone):
        raise ValueError(f"lost ranks {sorted(gone)} are not a non-empty part of a world of {world_size}")
    if spares < 0 or min_world_size < 1:
        raise ValueError(f"spares ({spares}) must be at least 0 and the smallest world ({min_world_size}) at least 1")
    kept = [rank for rank in range(world_size) if rank not in gone]
    if not kept:
        return FullRestart(f"all {world_size} ranks were lost: no survivor holds the committed step")
    if spares >= len(gone):
        return Reform(generation + 1, world_size, tuple((rank, rank) for rank in kept), tuple(sorted(gone)))
    size = len(kept) + spares
    if size < min_world_size:
        return FullRestart(
            f"{len(kept)} ranks survived and {spares} spares are at hand: {size} is fewer than the {min_world_size} the run needs"
        )
    return Reform(
        generation + 1, size, tuple((old, new) for new, old in enumerate(kept)), tuple(range(len(kept), size))
    )


def notices(reform: Reform, store: str) -> tuple[dict[int, Notice], list[Notice]]:
    """What each rank of ``reform`` is told: each survivor's notice by its old number, and the
    identity each spare is handed, in the order of ``reform.joiners``; ``store`` is ``host:port``
    of the store the generation meets on."""
    told = {old: Notice(reform.generation, new, reform.world_size, store) for old, new in reform.survivors}
    handed = [Notice(reform.generation, new, reform.world_size, store) for new in reform.joiners]
    return told, handed


@dataclass(frozen=True)
class Reforming:
    """What a node does to re-form its part of the world as attempt ``attempt``: write each
    survivor's notice (``told``: its number in the attempt before, and its notice) and hand each
    lost place (``handed``) to one of its warm spares
    (:meth:`elastic.node.agent.NodeAgent.reform`)."""

    attempt: int
    told: tuple[tuple[int, Notice], ...]
    handed: tuple[Notice, ...]
