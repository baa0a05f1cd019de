"""A new driver's takeover of what its dead predecessor left alive: its running attempt adopted
with its ranks as their keeper kept them, or everything of it stopped.

Before the backend starts (its supervisor rewrites the keeper's record), :func:`reach_leftovers`
resumes the keeper the run directory names when the journal left an attempt simply running
(:func:`elastic.core.takeover.running.left_running`) and the backend can adopt
(:class:`elastic.backends.protocol.Adopting`), and holds it when its account is that attempt's
(:func:`elastic.core.takeover.reading.read_account`). Anything else is stopped as without a
takeover: a keeper resumed but not believed drains its ranks over its link, one not resumed
through :func:`elastic.node.spawner.kept.stop_kept`, and what an embedded Ray left by pid. The
driver then adopts what was held once the backend runs (:meth:`Leftovers.adopt`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastic.backends.protocol import Adopting, Backend
from elastic.core.messages import Adopted
from elastic.core.run_layout import RunLayout
from elastic.core.takeover.reading import Account, read_account
from elastic.core.takeover.running import RunningAttempt
from elastic.node.process_record import RecordedProcess, identify, stop_recorded
from elastic.node.spawner.kept import AdoptedKeeper, resume_keeper, stop_kept
from elastic.run.planning import Planner

__all__ = ["Leftovers", "Stopped", "reach_leftovers"]


@dataclass(frozen=True)
class Stopped:
    """What was stopped of one record of the dead driver's (its ranks' keeper, its embedded Ray),
    and what else to journal of it (the keeper's account, why it was not adopted)."""

    record: Path
    processes: tuple[RecordedProcess, ...]
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Leftovers:
    """What a new driver found of its dead predecessor: the running attempt it holds to adopt
    (its keeper resumed, named by ``record``), and what it stopped."""

    record: Path
    stopped: list[Stopped] = field(default_factory=list)
    running: RunningAttempt | None = None
    keeper: AdoptedKeeper | None = None

    def adopt(self, backend: Backend, planner: Planner, *, grace_s: float,
              longest_init_s: float | None) -> Adopted | None:
        """Once the backend runs: the held attempt adopted (its plan rebuilt, its ranks
        supervised by the backend as a launch's), or, when it cannot be, its ranks drained over
        the keeper's link and the refusal kept for the journal; None when nothing was held."""
        keeper, running = self.keeper, self.running
        if keeper is None or running is None:
            return None
        specs = planner.adopt(running, keeper.specs(""), longest_init_s)
        if isinstance(specs, str) or not isinstance(backend, Adopting):
            self.keeper = None
            self._drain(keeper, specs if isinstance(specs, str) else "the backend cannot adopt ranks", grace_s)
            return None
        backend.adopt(keeper, specs)  # raising, the keeper is still held: the driver's end drains it
        self.keeper = None
        return Adopted(
            attempt=running.attempt, world_size=running.world_size, nodes=len(running.nodes),
            generation=keeper.generation, resume_step=running.resume_step, exits_kept=len(keeper.exits),
            ran_s=max(0.0, time.time() - running.launched_at),
            first_step=running.first_step, sign_of_life=running.sign_of_life,
        )

    def _drain(self, keeper: AdoptedKeeper, refused: str, grace_s: float) -> None:
        """A resumed keeper whose attempt is not adopted: its ranks drained, the refusal journaled."""
        ranks = tuple(p for pid in sorted(keeper.alive()) if (p := identify(pid)) is not None)
        keeper.drain(grace_s)
        detail = {**_exits_detail(keeper.account("")), "keeper_refused": refused}
        self.stopped.insert(0, Stopped(self.record, ranks, detail))

    def release(self, grace_s: float) -> None:
        """A held keeper the driver never adopted (it failed before): drained, nothing left."""
        keeper, self.keeper = self.keeper, None
        if keeper is not None:
            keeper.drain(grace_s)


def reach_leftovers(
    layout: RunLayout, run_id: str, running: RunningAttempt | None, *, adopting: bool, grace_s: float,
    refused: str | None = None,
) -> Leftovers:
    """What the dead driver left alive, before the backend starts: its running attempt's keeper
    resumed and held when it can be adopted, the rest stopped (see the module's doc). ``refused``:
    why this driver must not adopt it even so (journaled with what it stops)."""
    leftovers = Leftovers(layout.keeper_record)
    if running is not None and adopting and refused is None and len(running.nodes) == 1:  # the local backend's one node
        keeper = resume_keeper(layout.keeper_record, run_id)
        if isinstance(keeper, AdoptedKeeper):
            takeover = read_account(keeper.account(running.nodes[0]), running.attempt, running.pids)
            if takeover.adopted:
                leftovers.running, leftovers.keeper = running, keeper
            else:
                leftovers._drain(keeper, takeover.refused or "", grace_s)
    if leftovers.keeper is None:
        kept = stop_kept(layout.keeper_record, run_id)
        detail = _exits_detail(kept.account) if kept.account is not None else {}
        if kept.refused is not None or refused is not None:
            detail["keeper_refused"] = kept.refused or refused
        if kept.processes:
            leftovers.stopped.append(Stopped(layout.keeper_record, kept.processes, detail))
    ray = stop_recorded(layout.embedded_ray_record)
    if ray:
        leftovers.stopped.append(Stopped(layout.embedded_ray_record, ray))
    return leftovers


def _exits_detail(account: Account) -> dict[str, Any]:
    """How each rank a keeper reaped while no driver was there ended, for the journal."""
    ranks = {r.pid: r for r in account.ranks}
    return {"exits_while_no_driver": [
        {"attempt": ranks[e.pid].attempt if e.pid in ranks else None,
         "rank": ranks[e.pid].rank if e.pid in ranks else None, "pid": e.pid, "returncode": e.returncode}
        for e in account.exits
    ]}
