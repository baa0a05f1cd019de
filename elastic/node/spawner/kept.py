"""The driver's side of ranks kept by their spawner (``--orphan-lease``): the record of the keeper
and its ranks in the run directory, and the stop of what a dead driver's keeper still keeps.

A spawner given a lease keeps its ranks when its driver dies without releasing it
(:mod:`elastic.node.spawner.process`; ``docs/design/driver-takeover.md``). So that the next driver
of the run can find them, the supervisor records the keeper and each rank as they start
(:class:`KeeperRecord`: pid, start time and boot id, the format of
:mod:`elastic.node.process_record`), before anything can kill it without warning. Until a new
driver can take kept ranks over, it stops them before it starts anything (:func:`stop_kept`):
SIGTERM to the keeper, which drains them (the stop signal, the grace, the sweep) and exits, then
SIGKILL for whatever is still the process recorded past that.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from elastic.core.takeover.lease import Lease
from elastic.node.process_record import (
    RecordedProcess,
    identify,
    read_record,
    signal_recorded,
    still_recorded,
    stop_recorded,
    write_record,
)

__all__ = ["KeepTerms", "KeeperRecord", "stop_kept"]

_POLL_S = 0.05
_SWEEP_ALLOWANCE_S = 15.0  # past the grace: the keeper's sweep (10 s at most) and its exit


@dataclass(frozen=True)
class KeepTerms:
    """What a driver gives each spawner of its host: the lease, and where to record the keeper."""

    lease: Lease
    record: Path


class KeeperRecord:
    """The record of one keeper and the ranks it started, rewritten whole as they come and go."""

    def __init__(self, terms: KeepTerms) -> None:
        self._terms = terms
        self._lock = threading.Lock()
        self._keeper: RecordedProcess | None = None
        self._ranks: dict[int, RecordedProcess] = {}

    def keeper(self, pid: int) -> None:
        """A new spawner keeps this host's ranks (the one before it is gone, with its ranks)."""
        with self._lock:
            self._keeper, self._ranks = identify(pid), {}
            self._write()

    def rank(self, pid: int) -> None:
        with self._lock:
            process = identify(pid)
            if process is not None:
                self._ranks[pid] = process
                self._write()

    def ranks_gone(self) -> None:
        """Every rank is reaped (a drain's end): the record names the keeper alone."""
        with self._lock:
            if self._ranks:
                self._ranks = {}
                self._write()

    def released(self) -> None:
        """The keeper was released and is gone: the record names nothing."""
        with self._lock:
            self._keeper, self._ranks = None, {}
            self._write()

    def _write(self) -> None:
        processes = ([self._keeper] if self._keeper is not None else []) + list(self._ranks.values())
        fields = {"lease_s": self._terms.lease.lease_s, "grace_s": self._terms.lease.grace_s,
                  "keeper": self._keeper.pid if self._keeper is not None else None}
        try:
            write_record(self._terms.record, fields, processes)
        except OSError:
            pass  # the run directory's own writes report a full or read-only disk


def stop_kept(record: Path) -> tuple[RecordedProcess, ...]:
    """Stop what a dead driver's keeper still keeps, and return what was alive of it, as recorded.

    The keeper (the record's first process, while it is still the process recorded) gets
    SIGTERM: kept, it drains its ranks with the lease's stop signal and grace, sweeps and exits.
    What is still the process recorded once it is gone, or past the grace and its sweep, is
    SIGKILLed (:func:`elastic.node.process_record.stop_recorded`).
    """
    fields, processes = read_record(record)
    alive = tuple(p for p in processes if still_recorded(p))
    if not alive:
        return ()
    keeper = next((p for p in alive if p.pid == fields.get("keeper")), None)
    if keeper is not None and signal_recorded(keeper, signal.SIGTERM):
        grace_s = float(fields.get("grace_s") or 0.0)
        deadline_at = time.monotonic() + grace_s + _SWEEP_ALLOWANCE_S
        while still_recorded(keeper) and time.monotonic() < deadline_at:
            time.sleep(_POLL_S)
    stop_recorded(record)
    return alive
