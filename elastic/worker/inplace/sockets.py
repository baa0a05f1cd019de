"""Leaving a broken gloo collective: shut down the sockets its group opened (standard library only).

Gloo cannot be cancelled: ``ProcessGroupGloo.abort()`` (torch 2.13) returns at
once and leaves a blocked ``all_reduce`` waiting for its timeout (30 min by
default) when a peer hangs. A peer that died is noticed at once, because the
kernel closes its sockets. So a survivor does to itself what a peer's death
does: it shuts down (``shutdown(SHUT_RDWR)``, from any thread) the TCP sockets
its group opened while it joined, and the blocked collective raises
``Connection closed by peer`` within milliseconds. Only those sockets: the ones
that appeared in the process between just before and just after the join
(:func:`socket_inodes`), so the launcher's store and the program's own
connections stay open.
"""

from __future__ import annotations

import os
import socket

__all__ = ["shut_down", "socket_inodes"]

_FD_DIR = "/proc/self/fd"


def socket_inodes() -> dict[str, int]:
    """The process's open sockets now: each socket's inode (``socket:[N]``) to one of its descriptors."""
    found: dict[str, int] = {}
    try:
        names = os.listdir(_FD_DIR)
    except OSError:
        return found
    for name in names:
        try:
            target = os.readlink(f"{_FD_DIR}/{name}")
        except OSError:
            continue
        if target.startswith("socket:"):
            found.setdefault(target, int(name))
    return found


def shut_down(inodes: set[str]) -> int:
    """Shut down, both ways, every connected TCP socket of the process whose inode is in
    ``inodes`` (never a listening one: gloo's listener thread aborts the process when its
    ``accept`` fails); the number shut. The descriptors stay open (their owner closes them); a socket already
    closed, or whose descriptor now names another file, is left alone."""
    shut = 0
    for inode, fd in socket_inodes().items():
        if inode not in inodes:
            continue
        try:
            duplicate = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            if duplicate.type == socket.SOCK_STREAM and duplicate.family in (socket.AF_INET, socket.AF_INET6):
                duplicate.getpeername()  # connected only: a listener shut down fails gloo's accept(), and it aborts
                duplicate.shutdown(socket.SHUT_RDWR)
                shut += 1
        except OSError:
            pass  # a listening socket, or one no longer connected: nothing of a collective waits on it
        finally:
            duplicate.close()
    return shut
