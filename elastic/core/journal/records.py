"""What a journal record must hold to be folded, and the fold's complaint when it does not. Pure.

:mod:`elastic.core.journal.fold` reads every record through these: its time, its attempt,
the format version of the first, the plan of an ``attempt_started`` and the root
cause of ``run_finished`` (both read whole later, by status, the timeline and
recovery, so refused here, by their line). A record that cannot be read is a
:class:`FoldError` naming it by its index, which the journal's reader turns into
the file and line (:meth:`elastic.run.journal.Journal.unreadable`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from elastic.core.journal.folded import failure_from, optional_int

__all__ = [
    "BAD_FIELD", "JOURNAL_VERSION", "FoldError", "check_plan", "check_root_cause", "journal_version",
    "record_attempt", "record_time", "record_wall",
]

JOURNAL_VERSION = 2  # 1: no version field (before issue 10); 2: streak and progress journaled

# What reading a field of the wrong type or value raises (``int(None)``, ``None.items()``).
BAD_FIELD = (TypeError, ValueError, KeyError, AttributeError, IndexError)


class FoldError(Exception):
    """A journal that holds no run, an event without a readable time or with a field of
    the wrong type, or a newer format; ``index`` is the event's (from 0), where there is one."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


def record_time(event: Mapping[str, Any], index: int) -> datetime:
    """The record's time; a :class:`FoldError` when it has none that reads."""
    try:
        return datetime.fromisoformat(str(event["time"]))
    except (KeyError, ValueError):
        raise FoldError(f"event {index + 1} ({event.get('event')}) has no readable time", index) from None


def record_wall(event: Mapping[str, Any]) -> float:
    """The record's time in epoch seconds (it has been read once already)."""
    return datetime.fromisoformat(str(event["time"])).timestamp()


def record_attempt(event: Mapping[str, Any], default: int, number: int) -> int:
    """The attempt a record speaks of (``default`` when it names none); ``number`` is its
    position from 1, for the complaint."""
    attempt = event.get("attempt", default)
    if optional_int(attempt) is None or attempt < 0:
        raise FoldError(f"event {number} ({event.get('event')}) has attempt {attempt!r}, not a whole number")
    return int(attempt)


def journal_version(first: Mapping[str, Any]) -> int:
    """The format version the first record declares (1 without one); a newer one is refused."""
    version = first.get("journal_version", 1)
    if not isinstance(version, int) or version > JOURNAL_VERSION:
        raise FoldError(
            f"journal format version {version!r} is newer than this elastic reads "
            f"(up to {JOURNAL_VERSION}); read it with a newer elastic"
        )
    return version


def check_plan(event: Mapping[str, Any], number: int) -> None:
    """An ``attempt_started``'s plan has the shape its readers expect."""
    nodes, nproc, world = event.get("nodes", []), event.get("nproc_per_node", []), event.get("world_size")
    if not (
        isinstance(nodes, list) and isinstance(nproc, list)
        and all(optional_int(n) is not None for n in nproc)
        and (world is None or optional_int(world) is not None)
    ):
        raise FoldError(
            f"event {number} (attempt_started) has a plan of the wrong shape: nodes "
            f"{nodes!r}, nproc_per_node {nproc!r}, world_size {world!r}"
        )


def check_root_cause(event: Mapping[str, Any]) -> None:
    """A ``run_finished``'s root cause, when it has one, reads as a failure."""
    cause = event.get("root_cause")
    if isinstance(cause, Mapping):
        failure_from(cause)
