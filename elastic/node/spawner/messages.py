"""The spawner's pipes: length-prefixed messages both ways, and fixed-size signal frames.

Commands reach :mod:`elastic.node.spawner.process` on its stdin as messages
(``spawn``); reports leave on its stdout as messages (``ready``, ``spawned``,
``failed``, ``exit``, ``swept``). A message is a dict of plain values,
``marshal``-ed behind its length (:func:`pack_message`): both ends are the
same interpreter, and ``marshal`` costs no import where ``json`` would cost a
good part of the start-up. Signals travel on a second pipe as fixed-size
frames (:data:`SIGNAL_FRAME`), each one ``write`` below ``PIPE_BUF`` and so
atomic: any thread, or a signal handler, can send one without a lock.

Standard library only, like the spawner.
"""

from __future__ import annotations

import marshal
import struct

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from typing import IO, Any

__all__ = [
    "OP_SIGNAL_ALL",
    "OP_SIGNAL_PROCESS",
    "OP_SIGNAL_RANK",
    "OP_SWEEP",
    "SIGNAL_FRAME",
    "pack_message",
    "read_message",
    "unpack_message",
]

SIGNAL_FRAME = struct.Struct("=iii")  # op, pid, signum
OP_SIGNAL_ALL = 1  # signal every rank's process group (pid unused)
OP_SIGNAL_RANK = 2  # signal one rank's process group
OP_SWEEP = 3  # SIGKILL every descendant, report ``swept`` when none is left
OP_SIGNAL_PROCESS = 4  # signal one started process itself, not its group (an embedded Ray's head)

_LENGTH = struct.Struct("=I")


def pack_message(message: dict[str, Any]) -> bytes:
    payload = marshal.dumps(message)
    return _LENGTH.pack(len(payload)) + payload


def unpack_message(buffer: bytes) -> tuple[dict[str, Any], bytes] | None:
    """The first whole message in ``buffer`` and what follows it; None if there is none yet."""
    if len(buffer) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack_from(buffer)
    end = _LENGTH.size + length
    if len(buffer) < end:
        return None
    message: dict[str, Any] = marshal.loads(buffer[_LENGTH.size : end])
    return message, buffer[end:]


def read_message(stream: IO[bytes]) -> dict[str, Any] | None:
    """The next message from a blocking stream; None at its end."""
    header = stream.read(_LENGTH.size)
    if len(header) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack(header)
    payload = stream.read(length)
    if len(payload) < length:
        return None
    message: dict[str, Any] = marshal.loads(payload)
    return message
