"""A takeover's reading of a keeper: whether it is the run's, and what its account means for the controller.

A new driver finds a keeper through its record, and believes it only when the process at the
recorded pid is the one recorded (start time and boot id), says the run's id, and belongs to an
older generation than the claimer's (:func:`prove`). Its account (its ranks, and the exits it
reaped while no driver read) then becomes what the controller hears (:func:`read_account`):
every rank alive, the attempt is adopted as it runs; a rank exited meanwhile, adopted too, and
its exit goes through the normal verdict as any exit, dated to when it happened (the supervisor
that adopts the keeper reports it: :meth:`elastic.node.supervisor.ProcessSupervisor.adopt`); a
rank the keeper cannot account for, no adoption.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


__all__ = ["Account", "Identity", "KeptExit", "KeptRank", "Takeover", "prove", "read_account"]


@dataclass(frozen=True)
class Identity:
    """A keeper as its record names it, or as it is found: its pid, its start time (clock ticks
    since boot), the boot's id, the run it keeps and the generation of the driver it last served."""

    pid: int
    started: int
    boot: str
    run_id: str
    generation: int


def prove(recorded: Identity, found: Identity | None, *, run_id: str, generation: int) -> str | None:
    """Why the keeper a record names is not to be believed by a driver of ``generation`` taking
    over ``run_id``; None when it is. ``found``: what the process at the recorded pid is and says
    now (None: no such process, or it does not answer)."""
    if found is None or found.pid != recorded.pid:
        return f"keeper pid {recorded.pid} is gone or does not answer"
    if not recorded.boot or found.boot != recorded.boot:
        return f"keeper pid {recorded.pid} was recorded in another boot or on another machine"
    if found.started != recorded.started:
        return f"pid {recorded.pid} is another process now (it started at another time than the keeper)"
    if found.run_id != run_id or recorded.run_id != run_id:
        return f"keeper pid {recorded.pid} keeps run {found.run_id!r}, not {run_id!r}"
    if found.generation >= generation:
        return (f"keeper pid {recorded.pid} already serves a driver of generation {found.generation} "
                f"(this one's is {generation})")
    return None


@dataclass(frozen=True)
class KeptRank:
    """A rank the keeper started, as it accounts for it."""

    attempt: int
    rank: int
    pid: int


@dataclass(frozen=True)
class KeptExit:
    """An exit the keeper reaped: the rank's pid, its status (Popen's: minus the signal), and
    when, on the keeper's wall clock."""

    pid: int
    returncode: int
    at: float


@dataclass(frozen=True)
class Account:
    """What a keeper tells a driver taking it over: its ranks and the exits it reaped."""

    node: str
    ranks: tuple[KeptRank, ...]
    exits: tuple[KeptExit, ...] = ()


@dataclass(frozen=True)
class Takeover:
    """What a keeper's account means for the attempt it ran: adopted or not (``refused`` says
    why not), the ranks still alive, and each rank's exit that happened meanwhile."""

    attempt: int
    alive: tuple[KeptRank, ...] = ()
    exited: tuple[tuple[KeptRank, KeptExit], ...] = ()
    refused: str | None = None

    @property
    def adopted(self) -> bool:
        return self.refused is None


def read_account(account: Account, attempt: int, planned: Mapping[int, int]) -> Takeover:
    """The keeper's ``account`` of ``attempt``, whose ranks on its node were ``planned`` (rank ->
    pid, as the journal's ``rank_pids`` holds them): adopted when it accounts for every one."""
    kept = {(r.attempt, r.rank): r for r in account.ranks}
    exits = {e.pid: e for e in account.exits}
    alive, exited = [], []
    for rank, pid in sorted(planned.items()):
        known = kept.get((attempt, rank))
        if known is None or known.pid != pid:
            return Takeover(attempt, refused=(
                f"the keeper on node {account.node} does not account for rank {rank} (pid {pid}) of attempt {attempt}"
            ))
        if pid in exits:
            exited.append((known, exits[pid]))
        else:
            alive.append(known)
    return Takeover(attempt, tuple(alive), tuple(exited))
