"""How a live process holds a signal, read from ``/proc`` (Linux): ignored, caught, blocked;
and whether a handler that caught it is the rank's own, from the rank bootstrap's signals file.

Read by the supervisor at the moment a drain's grace runs out, for each rank still
alive, just before its SIGKILL: the one moment the answer is both true and needed;
and for a failure's survivors just after the stop signal and once the node's short
window is over, to tell which to kill at once (:func:`elastic.core.failures.never_exits_on`,
:func:`elastic.core.failures.exits_in_handler`).
"""

from __future__ import annotations

from dataclasses import dataclass

from elastic.core.evidence import read_account
from elastic.core.failures import Disposition, GraceKill
from elastic.node.probes.stop_signs import read_signals_file

__all__ = ["OwnHandler", "grace_kill", "loads_jax", "own_handler", "own_handler_in", "signal_disposition"]

_MAPS_CHUNK = 1 << 20
_JAX_LIBRARY = b"jaxlib"  # every JAX install loads its runtime from the jaxlib package


def _status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
        return dict(line.split(":", 1) for line in status if ":" in line)


def signal_disposition(pid: int, signum: int) -> tuple[Disposition, str | None] | None:
    """What ``pid`` does with ``signum`` now (its main thread's mask for blocked) and its
    state letter; None when it is a zombie (it exited: nothing to say)."""
    try:
        fields = _status(pid)
    except OSError:
        return Disposition.UNKNOWN, None
    state = fields.get("State", "").strip()[:1] or None
    if state in ("Z", "X"):
        return None
    bit = 1 << (signum - 1)
    try:
        ignored, caught, blocked = (int(fields[k].strip(), 16) for k in ("SigIgn", "SigCgt", "SigBlk"))
    except (KeyError, ValueError):
        return Disposition.UNKNOWN, state
    if ignored & bit:
        return Disposition.IGNORED, state
    if caught & bit:
        return Disposition.CAUGHT, state
    if blocked & bit:
        return Disposition.BLOCKED, state
    return Disposition.DEFAULT, state


def loads_jax(pid: int) -> bool:
    """Whether ``pid`` has JAX's runtime (``jaxlib``) in its memory map."""
    tail = b""
    try:
        with open(f"/proc/{pid}/maps", "rb") as maps:
            while chunk := maps.read(_MAPS_CHUNK):
                if _JAX_LIBRARY in tail + chunk:
                    return True
                tail = chunk[-len(_JAX_LIBRARY):]
    except OSError:
        return False
    return False


@dataclass(frozen=True)
class OwnHandler:
    """What the rank bootstrap wrote of a process's own Python handler for a signal."""

    installed: bool = False  # its code installed one with signal.signal
    ran: bool = False  # one ran on the signal


def own_handler_in(text: str, pid: int, signum: int) -> OwnHandler:
    """What a rank's signals file (its text) says of process ``pid``'s own Python handler for
    ``signum``, as its one reader reads it (:meth:`elastic.core.evidence.RankAccount.own_handler`):
    installed, ran (which says it was installed too). Other processes' lines are passed over."""
    return OwnHandler(*read_account(text, now=0.0, pid=pid).own_handler(signum, pid))


def own_handler(signals_file: str | None, pid: int, signum: int) -> OwnHandler:
    """What the rank bootstrap wrote to ``signals_file`` (``ELASTIC_SIGNALS_FILE``) of ``pid``'s
    own Python handler for ``signum``; nothing when it wrote nothing (the bootstrap creates the
    file at a handler's install)."""
    seen = read_signals_file(signals_file, pid)
    return OwnHandler() if seen is None else OwnHandler(*seen.own_handler(signum, pid))


def grace_kill(pid: int, signum: int, grace_s: float, signals_file: str | None = None) -> GraceKill | None:
    """The :class:`GraceKill` of a rank about to be SIGKILLed (or judged for a kill at once);
    None if it already exited. ``signals_file``: the rank's, where the rank bootstrap writes
    its own Python handlers (a missing file costs one failed open)."""
    seen = signal_disposition(pid, signum)
    if seen is None:
        return None
    disposition, state = seen
    own = own_handler(signals_file, pid, signum)
    return GraceKill(signum, grace_s, disposition, jax=loads_jax(pid), state=state,
                     own_handler=own.installed, handler_ran=own.ran)
