"""How a live process holds a signal, read from ``/proc`` (Linux): ignored, caught, blocked.

Read by the supervisor at the moment a drain's grace runs out, for each rank still
alive, just before its SIGKILL: the one moment the answer is both true and needed.
"""

from __future__ import annotations

from elastic.core.failures import Disposition, GraceKill

__all__ = ["grace_kill", "loads_jax", "signal_disposition"]

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


def grace_kill(pid: int, signum: int, grace_s: float) -> GraceKill | None:
    """The :class:`GraceKill` of a rank about to be SIGKILLed; None if it already exited."""
    seen = signal_disposition(pid, signum)
    if seen is None:
        return None
    disposition, state = seen
    return GraceKill(signum, grace_s, disposition, jax=loads_jax(pid), state=state)
