"""Ranks that outlived their grace: how each held the stop signal when it was SIGKILLed. Pure.

The node agent reads it from ``/proc`` at the moment of the kill (never guessed from
the exit status, which says only SIGKILL) and hands it on with the rank's exit; the
controller journals it with the drain's end, and the summary, ``report.json`` and
``elastic status`` say it in words: ``rank 0 ignored SIGTERM (JAX's preemption service
catches it); killed after 5 s``.
"""

from __future__ import annotations

import enum
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["GRACE_KILLS_LISTED", "Disposition", "GraceKill", "describe_grace_kills", "grace_kill_from"]

# Grace kills of one attempt journaled one by one; past these only their count (a JAX job
# of 1,000 nodes has 7,999 survivors that never exit on SIGTERM).
GRACE_KILLS_LISTED = 16


class Disposition(enum.Enum):
    """What the rank's process had done with the stop signal (``/proc/PID/status``)."""

    IGNORED = "ignored"  # SIG_IGN: the signal never reached it (SigIgn)
    CAUGHT = "caught"  # a handler ran, and the rank did not exit in time (SigCgt)
    BLOCKED = "blocked"  # masked: still pending (SigBlk)
    DEFAULT = "default"  # the default action, yet alive (uninterruptible sleep, stopped)
    UNKNOWN = "unknown"  # its /proc could not be read


@dataclass(frozen=True)
class GraceKill:
    """A rank still alive when its grace ran out, SIGKILLed by the drain.

    ``jax``: the process had JAX loaded (``jaxlib`` in its memory map), whose
    distributed runtime installs a preemption handler for SIGTERM: survivors of a
    JAX job never exit on it. ``state``: its ``/proc`` state letter at the kill.
    """

    signal: int
    grace_s: float
    disposition: Disposition
    jax: bool = False
    state: str | None = None

    def fields(self, rank: int, node: str) -> dict[str, Any]:
        """As journaled in ``workers_stopped``'s ``killed_at_grace``."""
        return {
            "rank": rank,
            "node": node,
            "signal": _signal_name(self.signal),
            "grace_s": self.grace_s,
            "disposition": self.disposition.value,
            "jax": self.jax,
            "state": self.state,
        }


def grace_kill_from(record: Mapping[str, Any]) -> GraceKill:
    """A journaled entry of ``killed_at_grace`` as a value (unknown words read as unknown)."""
    try:
        disposition = Disposition(str(record.get("disposition")))
    except ValueError:
        disposition = Disposition.UNKNOWN
    name = str(record.get("signal") or "SIGTERM")
    try:
        signum = int(signal.Signals[name])
    except KeyError:
        signum = int(signal.SIGTERM)
    grace = record.get("grace_s")
    return GraceKill(
        signal=signum,
        grace_s=float(grace) if isinstance(grace, (int, float)) else 0.0,
        disposition=disposition,
        jax=bool(record.get("jax")),
        state=None if record.get("state") is None else str(record.get("state")),
    )


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


def _what_it_did(kill: GraceKill) -> str:
    name = _signal_name(kill.signal)
    # JAX's preemption service handles SIGTERM only (what preemptible clouds send).
    if kill.jax and kill.signal == signal.SIGTERM and kill.disposition in (Disposition.IGNORED, Disposition.CAUGHT):
        return f"ignored {name} (JAX's preemption service catches it)"
    if kill.disposition is Disposition.IGNORED:
        return f"ignored {name}"
    if kill.disposition is Disposition.CAUGHT:
        return f"caught {name} but did not exit"
    if kill.disposition is Disposition.BLOCKED:
        return f"blocked {name}"
    if kill.state == "D":
        return f"did not exit on {name} (in uninterruptible sleep, likely I/O)"
    if kill.state in ("T", "t"):
        return f"did not exit on {name} (stopped, by SIGSTOP or a debugger)"
    return f"did not exit on {name}"


def describe_grace_kills(kills: Iterable[tuple[int, GraceKill]], option: str | None = None) -> list[str]:
    """``rank 0 ignored SIGTERM; killed after 5 s``, one line per way of not exiting,
    ranks that did the same joined (``ranks 0, 2 ...``); ``option`` names the flag."""
    groups: dict[tuple[str, float], list[int]] = {}
    for rank, kill in kills:
        groups.setdefault((_what_it_did(kill), kill.grace_s), []).append(rank)
    lines = []
    for (what, grace_s), ranks in groups.items():
        numbers = sorted(set(ranks))
        who = ("rank " if len(numbers) == 1 else "ranks ") + ", ".join(map(str, numbers))
        lines.append(f"{who} {what}; killed after {grace_s:g} s" + (f" ({option})" if option else ""))
    return lines
