"""The last lines of a rank's log, read from its end at a bounded cost: the one tail reader.

Whatever reads what a rank printed last (the failure's ``log_tail`` in the
journal, ``report.json`` and the summary) reads it here. A last line longer than
the window is kept, not dropped: its end, its first characters when its start is
near enough to find, and a mark saying how much was cut between them (a
framework's one-line error of 20,000 characters names its cause at one end or
the other: MaxText's misspelt key at its start, a Python exception's last words
at its end).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

__all__ = ["TAIL_BYTES", "TAIL_LINES", "cut_mark", "read_log_tail", "read_tail"]

TAIL_LINES = 20
TAIL_BYTES = 16 * 1024
# How far before the window the start of a cut line is looked for (to keep its
# first characters and count what was cut): the most read beyond the window.
LINE_START_SCAN_BYTES = 1 << 20
_SCAN_CHUNK_BYTES = 64 * 1024
# The first bytes of a cut line kept before the mark (where an error names its subject).
LINE_HEAD_BYTES = 512
_CONTINUATION = bytes(range(0x80, 0xC0))  # UTF-8 bytes that start no character


def cut_mark(characters: int, *, at_least: bool = False) -> str:
    """The mark put where a line was cut: ``…[cut 5,211 characters]…``."""
    plural = "" if characters == 1 else "s"
    return f"…[cut {'more than ' if at_least else ''}{characters:,} character{plural}]…"


def read_log_tail(
    path: str | Path, lines: int = TAIL_LINES, max_bytes: int = TAIL_BYTES
) -> tuple[str, ...]:
    """The last ``lines`` lines of a log, from its last ``max_bytes`` bytes (cheap on a 50 GB log).

    The window's first line is cut when the window starts inside it. It is kept
    when it is one of the last ``lines`` (a last line longer than the window
    above all): whole when it starts at most 512 bytes before the window, else
    as its first 512 bytes (when its start lies within 1 MiB of the window),
    :func:`cut_mark`, and the part inside the window. A character cut in two
    counts as cut; bytes that are not UTF-8 read as U+FFFD. Whatever the log's
    size, at most ``max_bytes`` plus 1 MiB and a half KiB is read.
    """
    try:
        with open(path, "rb") as log:
            return read_tail(log, lines, max_bytes)
    except OSError:
        return ()


def read_tail(log: BinaryIO, lines: int = TAIL_LINES, max_bytes: int = TAIL_BYTES) -> tuple[str, ...]:
    """:func:`read_log_tail` of a file already open for reading in binary (an unnamed
    temporary file's, say); its position is left anywhere. Raises :class:`OSError`."""
    size = log.seek(0, os.SEEK_END)
    start = max(0, size - max_bytes)
    log.seek(max(0, start - 1))
    data = log.read(max_bytes + 1)  # the byte before the window: does the window start a line?
    if start == 0:
        return tuple(_decode_lines(data)[-lines:])
    if data[:1] in (b"\n", b"\r"):  # the window starts a line (or ends a \r\n)
        return tuple(_decode_lines(data[2 if data[:2] == b"\r\n" else 1 :])[-lines:])
    data = data[1:]
    first_end = _line_end(data)
    after = first_end + (2 if data[first_end : first_end + 2] == b"\r\n" else 1)
    rest = _decode_lines(data[after:])
    if len(rest) >= lines:
        return tuple(rest[-lines:])  # the cut line is not among the last ones
    return (_cut_line(log, start, data[:first_end]), *rest)


def _decode_lines(data: bytes) -> list[str]:
    return data.decode("utf-8", errors="replace").splitlines()


def _line_end(data: bytes) -> int:
    """Where the first line of ``data`` ends (its length when no line end follows)."""
    ends = [at for at in (data.find(b"\n"), data.find(b"\r")) if at >= 0]
    return min(ends) if ends else len(data)


def _characters(data: bytes) -> int:
    """UTF-8 characters in ``data``: every byte but a continuation byte starts one."""
    return len(data.translate(None, _CONTINUATION))


def _cut_line(log: BinaryIO, window_at: int, inside: bytes) -> str:
    """The line the window (at byte ``window_at``) starts inside, of which ``inside`` is in
    the window: whole, or its head, the mark and ``inside``. Reads back at most 1 MiB."""
    line_at, before = _line_start(log, window_at)
    # A character cut in two by the window: its lead byte is before it, counted as cut.
    skipped = min(3, len(inside) - len(inside.lstrip(_CONTINUATION)))
    tail = inside[skipped:].decode("utf-8", errors="replace")
    if line_at is None:  # no line start within reach: say how much was read at least
        return cut_mark(before, at_least=True) + tail
    log.seek(line_at)
    if window_at - line_at <= LINE_HEAD_BYTES:  # only a little before the window: keep it all
        return (log.read(window_at - line_at) + inside).decode("utf-8", errors="replace")
    head = log.read(LINE_HEAD_BYTES + 1)  # one byte more: does a character start after the head?
    keep = LINE_HEAD_BYTES
    while keep > 0 and head[keep] in _CONTINUATION:
        keep -= 1  # end the head where a character starts
    head = head[:keep]
    return head.decode("utf-8", errors="replace") + cut_mark(before - _characters(head)) + tail


def _line_start(log: BinaryIO, window_at: int) -> tuple[int | None, int]:
    """Where the line holding byte ``window_at - 1`` starts (None: not within 1 MiB of it),
    and the characters between there (or 1 MiB back) and ``window_at``."""
    position = window_at
    floor = max(0, window_at - LINE_START_SCAN_BYTES)
    characters = 0
    while position > floor:
        step = min(_SCAN_CHUNK_BYTES, position - floor)
        position -= step
        log.seek(position)
        chunk = log.read(step)
        end = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
        if end >= 0:
            return position + end + 1, characters + _characters(chunk[end + 1 :])
        characters += _characters(chunk)
    return (0 if floor == 0 else None), characters
