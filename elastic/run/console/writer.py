"""Terminal output that never blocks the launcher: a bounded queue and a writer thread.

If nobody reads the launcher's stdout (a stopped pager, a full pipe), lines are
dropped and counted instead of stalling supervision. Workers never write here:
they write their own log files.
"""

from __future__ import annotations

import os
import queue
import select
import threading
import time
from collections.abc import Callable

__all__ = ["Console"]

# A write of at most PIPE_BUF bytes to a pipe that select() calls writable
# does not block (POSIX), so the writer thread never hangs in write().
_CHUNK_BYTES = select.PIPE_BUF
_SELECT_TIMEOUT_S = 0.5
_CLEAR_LINE = b"\r\x1b[K"  # carriage return, erase to end of line


class Console:
    """Writes lines to a file descriptor from one background thread."""

    def __init__(self, fd: int, *, max_lines: int = 10_000) -> None:
        self._fd = fd
        self._lines: queue.Queue[bytes | None] = queue.Queue(max_lines)
        self._stop = threading.Event()
        self.dropped = 0
        self._status_source: Callable[[], str] | None = None
        self._status_interval_s = 1.0
        self._status = b""
        self._thread = threading.Thread(target=self._write_loop, name="elastic-console", daemon=True)
        self._thread.start()

    def show_status(self, source: Callable[[], str], interval_s: float = 1.0) -> None:
        """Keep one status line at the bottom, redrawn after each line, and every ``interval_s``
        when its text changed.

        Only for a terminal: lines are written above it, so it never interleaves with them.
        """
        self._status_interval_s = interval_s
        self._status_source = source
        self._lines.put_nowait(b"")  # draw it now

    @property
    def isatty(self) -> bool:
        try:
            return os.isatty(self._fd)
        except OSError:
            return False

    def write(self, text: str) -> None:
        """Queue ``text`` (newline added if missing); drop it if the queue is full."""
        if not text.endswith("\n"):
            text += "\n"
        try:
            self._lines.put_nowait(text.encode("utf-8", errors="replace"))
        except queue.Full:
            self.dropped += 1

    def close(self, timeout_s: float = 2.0) -> None:
        """Flush what the reader accepts within ``timeout_s`` in all, then give up."""
        deadline_at = time.monotonic() + timeout_s
        try:
            self._lines.put(None, timeout=timeout_s)
        except queue.Full:
            pass
        self._thread.join(max(0.0, deadline_at - time.monotonic()))
        self._stop.set()

    def _write_loop(self) -> None:
        while True:
            source = self._status_source
            try:
                data = self._lines.get(timeout=self._status_interval_s if source else None)
            except queue.Empty:
                data = b""
            if data is None:
                if self._status:
                    self._write_all(_CLEAR_LINE)
                return
            if source is not None:
                status = self._render_status(source)
                if not data and status == self._status:
                    continue  # nothing new to draw
                self._status = status
                data = _CLEAR_LINE + data + self._status
            if not self._write_all(data):
                return

    def _render_status(self, source: Callable[[], str]) -> bytes:
        try:
            text = source()
        except Exception:  # a status that cannot be drawn is simply not drawn
            return b""
        try:
            width = os.get_terminal_size(self._fd).columns or 80  # 0: a terminal with no size set
        except OSError:
            width = 80
        # A status wider than the terminal would wrap, and "\r" could not erase it.
        return text.replace("\n", " ")[: max(1, width - 1)].encode("utf-8", errors="replace")

    def _write_all(self, data: bytes) -> bool:
        """Write ``data`` in pieces a blocked reader cannot make us hang on; False once it is gone."""
        while data and not self._stop.is_set():
            try:
                _, writable, _ = select.select([], [self._fd], [], _SELECT_TIMEOUT_S)
                if not writable:
                    continue
                written = os.write(self._fd, data[:_CHUNK_BYTES])
            except InterruptedError:
                continue
            except OSError:
                return False  # the reader is gone; nothing more can be shown
            data = data[written:]
        return True
