"""Which Ray cluster ``--backend ray`` joins, decided without importing Ray.

A ``ray start`` on this machine records its cluster's address in
``/tmp/ray/ray_current_cluster``; ``ray stop`` removes the file, but a head that
was killed (SIGKILL, a reboot of its container, an out-of-memory kill) leaves it
behind. Ray itself would then try to join the dead address for minutes, so the
record counts only when something accepts a connection at its address.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tenacity import RetryCallState, Retrying, retry_if_result, stop_after_delay, wait_fixed

__all__ = ["ClusterRecord", "cluster_record", "embeds_ray", "local_cluster_file", "unreachable", "wait_until_reachable"]

_RECORD_PROBE_S = 1.0  # a recorded cluster on this machine answers at once, or is gone
_REACH_S = 5.0  # how long a named address may refuse connections: a head still binding its port
_REACH_INTERVAL_S = 0.5


def local_cluster_file() -> Path:
    """Where ``ray start`` records the address of the cluster it started on this machine: in
    Ray's temporary folder, ``$RAY_TMPDIR/ray``, else ``$TMPDIR/ray``, else ``/tmp/ray``."""
    base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    return Path(base) / "ray" / "ray_current_cluster"


@dataclass(frozen=True)
class ClusterRecord:
    """What ``ray start`` recorded on this machine."""

    path: Path
    address: str
    unreachable: str | None  # why no cluster answers at the address; None: one does

    @property
    def stale(self) -> bool:
        return self.unreachable is not None


def cluster_record() -> ClusterRecord | None:
    """The ``ray start`` record of this machine, probed once; None where there is none."""
    path = local_cluster_file()
    try:
        address = path.read_text().strip()
    except FileNotFoundError:
        return None
    except OSError as error:
        return ClusterRecord(path, "", f"cannot read it: {error.strerror or error}")
    if not address:
        return ClusterRecord(path, "", "it is empty")
    return ClusterRecord(path, address, unreachable(address, _RECORD_PROBE_S))


def unreachable(address: str, timeout_s: float) -> str | None:
    """Why nothing accepts a TCP connection at ``address`` (``host:port`` or ``ray://host:port``)
    within ``timeout_s``; None when something does, or when the address is no ``host:port``
    (``auto``, a name Ray resolves itself)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return None
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except OSError as error:
        return (error.strerror or type(error).__name__).lower()


def wait_until_reachable(address: str) -> str | None:
    """:func:`unreachable`, tried for a few seconds: None once the address answers, else why not."""

    def last(state: RetryCallState) -> str | None:
        return None if state.outcome is None else state.outcome.result()

    retrying = Retrying(
        stop=stop_after_delay(_REACH_S),
        wait=wait_fixed(_REACH_INTERVAL_S),
        retry=retry_if_result(lambda why: why is not None),
        retry_error_callback=last,
    )
    why: str | None = retrying(unreachable, address, _RECORD_PROBE_S)
    return None if why is None else f"{why}; tried for {_REACH_S:g} s"


def embeds_ray(address: str | None, env: Mapping[str, str]) -> bool:
    """True when no cluster is named or answers here, so elastic starts its own Ray."""
    if address or env.get("RAY_ADDRESS"):
        return False
    record = cluster_record()
    return record is None or record.stale
