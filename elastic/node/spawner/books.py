"""What a spawner knows of its ranks for a driver that takes it over: its books.

Each rank it starts is written in: its attempt, its rank and how it was started (argv,
environment, working directory, log path). While it serves a driver, a rank's end is reported
to it and crossed out here. Once its driver is lost, each end is kept instead (status and wall
time), beside a ring of events (the loss, each exit, the drain:
:class:`elastic.core.takeover.ring.EventRing`). A new driver reads them as an account, or takes
them over with the spawner (the answer to its ``resume``), after which the ranks that ended are
crossed out: nobody asks about them again. Standard library only, like the spawner.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from typing import Any

    from elastic.core.takeover.ring import EventRing

__all__ = ["KeptBooks"]


class KeptBooks:
    """The ranks a spawner started and, once its driver is lost, how each ended since."""

    def __init__(self) -> None:
        self._rank_of: dict[int, tuple[int, int]] = {}  # pid -> (attempt, rank)
        self._commands_of: dict[int, dict[str, Any]] = {}  # pid -> how it was started
        self._exits: dict[int, tuple[int, float]] = {}  # pid -> (status, wall time): ends since the loss
        self._ring: EventRing | None = None  # events since the loss; None: a driver reads the reports

    @property
    def kept(self) -> bool:
        """Whether ends are kept here (the driver is lost) rather than reported."""
        return self._ring is not None

    def started(self, pid: int, attempt: int, rank: int, command: dict[str, Any]) -> None:
        """A rank started: ``command`` is how (argv, env, cwd, log_path)."""
        self._rank_of[pid] = (attempt, rank)
        self._commands_of[pid] = {**command, "attempt": attempt, "rank": rank}

    def lost(self, ranks: int) -> None:
        """The driver is lost with ``ranks`` alive: ends are kept from now on."""
        from elastic.core.takeover.ring import EventRing

        self._ring = EventRing()
        self._ring.add("lost", time.time(), ranks=ranks)

    def note(self, kind: str, **fields: Any) -> None:
        """An event while kept (a drain): into the ring; nothing while a driver reads the reports."""
        if self._ring is not None:
            self._ring.add(kind, time.time(), **fields)

    def ended(self, pid: int, returncode: int) -> None:
        """A rank ended: kept with its status and time while the driver is lost, else crossed out."""
        if self._ring is not None:
            self._exits[pid] = (returncode, time.time())
            self._ring.add("exit", time.time(), pid=pid, returncode=returncode)
        else:
            self._forget(pid)

    def account(self, after: int) -> dict[str, Any]:
        """The answer to ``account``: every rank written in, the ends kept, the events after number ``after``."""
        from elastic.core.takeover.ring import EventRing

        read = (self._ring or EventRing(1)).since(after)
        return {
            "t": "account", **self._listing(sorted(self._rank_of), self._exits),
            "events": [[e.number, e.kind, e.at, dict(e.fields)] for e in read.events],
            "missed": read.missed, "next": read.next_number,
        }

    def handed_over(self, alive: set[int], generation: int) -> dict[str, Any]:
        """The answer to a ``resume`` of the link by a driver of ``generation``: the ranks ``alive``
        and those that ended since the loss (each with how it was started), and those ends; then
        the ends are reported, the ended ranks crossed out, and ends go to the reports again."""
        exits, self._exits, self._ring = self._exits, {}, None
        answer = {"t": "resumed", "generation": generation, **self._listing(sorted(alive | exits.keys()), exits),
                  "commands": {pid: self._commands_of[pid] for pid in sorted(alive | exits.keys())
                               if pid in self._commands_of}}
        for pid in exits:
            self._forget(pid)
        return answer

    def _listing(self, pids: list[int], exits: dict[int, tuple[int, float]]) -> dict[str, Any]:
        return {"ranks": [[*self._rank_of.get(pid, (-1, -1)), pid] for pid in pids],
                "exits": [[pid, code, at] for pid, (code, at) in sorted(exits.items())]}

    def _forget(self, pid: int) -> None:
        self._rank_of.pop(pid, None)
        self._commands_of.pop(pid, None)
