"""The kill of ranks found hung by a watcher: their node's stacks dumped first, then the ranks the
hang is blamed on killed, each with its reason (:mod:`elastic.core.training.hang_blame`).

Shared by the heartbeat watch (:mod:`elastic.node.watchers.hangs`) and the step watch
(:mod:`elastic.node.watchers.steps`): both find ranks that stopped showing progress, and in both
a rank that only waits in a collective for a peer stuck elsewhere is a victim, not the cause.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from elastic.core.labels import rank_list
from elastic.core.training.hang_blame import Blame, blame_hang
from elastic.node.probes.stacks import StackTarget, dump_and_explain
from elastic.node.supervisor import RunningWorker

__all__ = ["kill_blamed"]


def kill_blamed(
    workers: Sequence[RunningWorker],
    found: Sequence[tuple[RunningWorker, str, float]],
    *,
    what: str,
    clock: Callable[[], float],
    detected_at: float,
    stopped: threading.Event,
    kill_hung: Callable[[int, str, float, float], bool],
    by_blame: bool = True,
) -> None:
    """Dump the stacks of the node's ``workers``, then kill the ranks the hang of ``found`` (each
    ``(worker, reason, silent_s)``, ``what`` they did: ``stalled``, ``hung``) is blamed on, unless a
    drain began meanwhile (``stopped``: it ends the ranks, as collateral). Without ``by_blame`` the
    ranks of ``found`` are the ones killed, each for its own reason (a hang in distributed
    initialisation: every rank in it waits in ``torch.distributed``, none is a victim)."""
    names = ", ".join(f"rank {w.spec.rank}" for w, _, _ in found)
    targets = [StackTarget(w.spec.rank, w.pid, w.spec.stack_path) for w in workers if w.spec.stack_path is not None]
    note, frames = dump_and_explain(
        targets, header=f"taken because {names} {what}", clock=clock,
        found="stacks of this node's ranks in", explain=[w.spec.rank for w, _, _ in found],
    )
    if stopped.is_set():
        return
    stalled = [w.spec.rank for w, _, _ in found]
    blame = blame_hang(stalled, frames) if by_blame else Blame(tuple(stalled), {})
    by_rank = {w.spec.rank: w for w in workers}
    first_reason, first_silent_s = found[0][1], found[0][2]
    for rank in blame.culprits:
        worker = by_rank.get(rank)
        if worker is None:
            continue
        own = next(((reason, silent_s) for w, reason, silent_s in found if w.spec.rank == rank), None)
        reason, silent_s = own if own is not None else (f"{rank_list(blame.victims)} {first_reason}", first_silent_s)
        extra = blame.reasons.get(rank)
        kill_hung(worker.pid, f"{reason}; {extra + '; ' if extra else ''}{note}", detected_at, silent_s)
