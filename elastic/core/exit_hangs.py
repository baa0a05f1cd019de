"""``--exit-timeout`` and ``--exit-hang``: ranks still running after a peer exited 0. Pure.

Each function reads and updates one :class:`Attempt`'s exit-hang bookkeeping
and returns what the controller journals or decides.
"""

from __future__ import annotations

from elastic.core.attempts import Attempt, rank_list
from elastic.core.failures import Failure, FailureKind, WorkerExit, to_failure
from elastic.core.policy import ExitHang

__all__ = ["hung_at_exit", "reaped_hung", "settle", "starts_timer"]


def starts_timer(current: Attempt, exit: WorkerExit, timeout_s: float | None) -> bool:
    """Whether this exit 0 is the first, so the ``--exit-timeout`` clock starts now (noted)."""
    if timeout_s is None or current.exit_timer_from is not None:
        return False
    current.exit_timer_from = (exit.rank, exit.observed_at)
    return True


def hung_at_exit(current: Attempt, timeout_s: float | None) -> tuple[tuple[int, ...], str] | None:
    """The ranks still alive when the timer ran out, and why they count as hung (noted)."""
    if current.exit_timer_from is None or current.exit_hung:
        return None
    alive = tuple(r for r in range(current.world_size) if r not in current.exited_ranks)
    if not alive:
        return None
    current.exit_hung = set(alive)
    current.exit_hung_pending = set(alive)
    return alive, f"still running {timeout_s:g} s after rank {current.exit_timer_from[0]} exited 0"


def reaped_hung(current: Attempt, exit: WorkerExit) -> Failure | None:
    """A rank killed as hung at exit was reaped: its failure; None when it ended some other way."""
    if exit.hung is None or exit.node_lost is not None or exit.launch_error is not None:
        return None
    failure = to_failure(exit, FailureKind.EXIT_HUNG)
    current.add_failure(failure)
    current.exit_hung_pending.discard(exit.rank)
    return failure


def settle(current: Attempt, exit_hang: ExitHang) -> str | Failure | None:
    """Once every rank killed as hung at exit is reaped: success on evidence, else ``--exit-hang``.

    A success's detail, the failure to decide a restart on, or None (not yet, or
    nothing hung). The evidence is each such rank's own word that it finished;
    with ``--exit-hang succeed``, a peer's exit 0 is taken as enough.
    """
    if current.exit_hung_pending or current.exit_hung_finished is None:
        return None
    hung = [f for f in current.failures if f.kind is FailureKind.EXIT_HUNG]
    if not hung:
        return None  # each exited 0 before the kill: the last exit 0 finished the run
    killed = (
        f"{rank_list(f.rank for f in hung)} hung at exit and "
        f"{'was' if len(hung) == 1 else 'were'} killed"
    )
    unfinished = [f for f in hung if f.rank not in current.exit_hung_finished]
    if not unfinished:
        return f"finished; {killed}"
    if exit_hang is ExitHang.SUCCEED:
        assert current.exit_timer_from is not None
        return f"finished (--exit-hang succeed: rank {current.exit_timer_from[0]} exited 0); {killed}"
    return min(unfinished, key=lambda f: (f.observed_at, f.rank))
