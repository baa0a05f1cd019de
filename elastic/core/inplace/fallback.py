"""Whether a loss can be repaired in place, or only by today's full restart, and why.

The controller asks :func:`repair` when ranks of a running attempt failed and
in-place restarts are on. It falls back to a full restart, with the reason the
journal keeps, when the survivors could not re-form: a node lost (its ranks'
committed steps went with it, and the store may have), a failure of a kind that
is no rank's own (a launch that failed, a preemption's stop, the end of a run
whose peer already finished), a survivor that never reached
``elastic.worker.inplace`` (its process cannot re-form), or a loss while the
previous re-forming was still under way. Otherwise the next world is
:func:`elastic.core.inplace.reform.next_world`'s.

Once re-formed, the world has :func:`reform_deadline_s` to show its first step (``--reform-timeout``,
never less than :data:`REFORM_STEPS` of the run's slowest step times): a survivor stuck outside
Python never comes back to its generations, and its peers would wait in the join for the process
group's timeout.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from elastic.core.failures import FailureKind
from elastic.core.inplace.reform import FullRestart, Reform, next_world

__all__ = ["DEFAULT_REFORM_TIMEOUT_S", "REFORM_STEPS", "REPAIRABLE", "reform_deadline_s", "repair"]

DEFAULT_REFORM_TIMEOUT_S = 60.0  # --reform-timeout
REFORM_STEPS = 3  # the deadline is never shorter than this many of the slowest step

# A rank's own end, which its peers can outlive: it exited with an error, crashed, was killed (an
# OOM kill, a SIGKILL, the hang watch's kill of a hung rank) or terminated from outside the launcher.
REPAIRABLE = frozenset(
    {FailureKind.EXITED, FailureKind.CRASHED, FailureKind.KILLED, FailureKind.TERMINATED, FailureKind.HUNG}
)


def repair(
    generation: int,
    world_size: int,
    lost: Mapping[int, FailureKind],
    *,
    opted_in: Collection[int],
    forming: bool,
    spares: int,
    min_world_size: int,
) -> Reform | FullRestart:
    """The next world after ``lost`` (each lost rank's failure kind) in generation ``generation``
    of ``world_size`` ranks, or a full restart and why. ``opted_in`` are the ranks that run on
    ``elastic.worker.inplace``; ``forming`` says generation ``generation`` has not yet been joined
    by all its ranks."""
    if forming:
        return FullRestart(f"{_ranks(lost)} lost while generation {generation} was still forming")
    beyond = sorted(set(lost.values()) - REPAIRABLE, key=lambda kind: (kind is not FailureKind.NODE_LOST, kind.value))
    if beyond:  # a lost node first: it says the most
        kind = beyond[0]
        return FullRestart(f"{_ranks(rank for rank, of in lost.items() if of is kind)}: {_WHY[kind]}")
    unable = sorted(set(range(world_size)) - set(lost) - set(opted_in))
    if unable:
        return FullRestart(f"{_ranks(unable)} cannot re-form in place: not running on elastic.worker.inplace")
    return next_world(generation, world_size, lost, spares, min_world_size)


def reform_deadline_s(timeout_s: float, step_times_s: Iterable[float]) -> float:
    """Seconds a re-formed world has to show its first step: ``timeout_s``, or :data:`REFORM_STEPS`
    of the slowest step time seen (``step_times_s``, by rank) when that is longer."""
    return max(timeout_s, REFORM_STEPS * max(step_times_s, default=0.0))


def _ranks(ranks: Iterable[int]) -> str:
    numbers = sorted(ranks)
    return f"rank {numbers[0]}" if len(numbers) == 1 else f"ranks {', '.join(map(str, numbers))}"


_WHY = {
    FailureKind.NODE_LOST: "node lost, and the committed steps held in its memory with it",
    FailureKind.LAUNCH_FAILED: "never started, so there is no running world to repair",
    FailureKind.PREEMPTED: "stopped on a preemption notice: the run drains",
    FailureKind.EXIT_HUNG: "still running after a peer finished: the run is ending",
    FailureKind.COLLATERAL: "stopped by the launcher with a failed peer: no failure of its own",
}
