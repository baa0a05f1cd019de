"""How a new driver reaches a keeper: a Unix socket in Linux's abstract namespace, one request and
one answer a connection, and the same user at both ends.

A keeper (a spawner whose driver was lost, ``--orphan-lease``) listens at :func:`address`, a name
made of its pid and its start time: the run directory's record (``keeper.json``) names both, so
whoever can read the record can find the socket, and no name outlives its process or can be
taken by a later one (see ``docs/design/driver-takeover.md`` for why not a socket file: a path of
at most 107 bytes, shared file systems, stale files). An abstract socket has no file
permissions: the keeper answers only a peer of its own user (``SO_PEERCRED``), and a driver
believes only the keeper the record names (:func:`elastic.core.takeover.reading.prove`).

Frames are the spawner's own (:func:`elastic.node.spawner.messages.pack_message`). Standard
library only, like the spawner.
"""

from __future__ import annotations

import os
import socket
import struct

from elastic.node.spawner.messages import pack_message, unpack_message

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["address", "ask", "boot_id", "listen", "receive", "same_user", "send", "start_ticks"]

_MAX_FRAME = 1 << 20
_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid


def address(pid: int, started: int) -> str:
    """The abstract socket name of the keeper with ``pid`` that started at ``started`` (clock ticks since boot)."""
    return f"\0elastic-keeper-{pid}-{started}"


def start_ticks(pid: int) -> int:
    """When ``pid`` started, in clock ticks since boot (``/proc/PID/stat``'s 22nd field); 0: unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return 0
    return int(text[text.rfind(b")") + 2 :].split()[19])


def boot_id() -> str:
    """This boot's id; "" where it cannot be read."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as text:
            return text.read().strip()
    except OSError:
        return ""


def listen(name: str) -> socket.socket:
    """A non-blocking listening socket at the abstract ``name``, closed on exec."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        server.bind(name)
        server.listen(8)
        server.setblocking(False)
    except OSError:
        server.close()
        raise
    return server


def same_user(conn: socket.socket, pid: int | None = None) -> bool:
    """Whether the peer of ``conn`` runs as this process's user (and, given ``pid``, is that process)."""
    try:
        credentials = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size)
    except OSError:
        return False
    peer, uid, _ = _CREDENTIALS.unpack(credentials)
    return bool(uid == os.getuid() and (pid is None or peer == pid))


def send(conn: socket.socket, message: dict[str, Any]) -> None:
    conn.sendall(pack_message(message))


def receive(conn: socket.socket) -> dict[str, Any] | None:
    """One whole message from ``conn`` (which has a timeout); None at its end, on a timeout or a
    frame too long."""
    buffer = b""
    while (message := unpack_message(buffer)) is None:
        if len(buffer) > _MAX_FRAME:
            return None
        try:
            chunk = conn.recv(1 << 16)
        except OSError:  # a timeout included
            return None
        if not chunk:
            return None
        buffer += chunk
    return message[0]


def ask(name: str, request: dict[str, Any], timeout_s: float = 5.0, pid: int | None = None) -> dict[str, Any] | None:
    """Send ``request`` to the keeper at ``name`` and return its answer; None when nobody listens
    there, it is not of our user (or, given ``pid``, not that process: one that took the name
    first), or it does not answer within ``timeout_s``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as conn:
        conn.settimeout(timeout_s)
        try:
            conn.connect(name)
        except OSError:
            return None
        if not same_user(conn, pid):
            return None
        try:
            send(conn, request)
        except OSError:
            return None
        return receive(conn)
