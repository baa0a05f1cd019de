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

__all__ = ["Console"]

# A write of at most PIPE_BUF bytes to a pipe that select() calls writable
# does not block (POSIX), so the writer thread never hangs in write().
_CHUNK_BYTES = select.PIPE_BUF
_SELECT_TIMEOUT_S = 0.5


class Console:
    """Writes lines to a file descriptor from one background thread."""

    def __init__(self, fd: int, *, max_lines: int = 10_000) -> None:
        self._fd = fd
        self._lines: queue.Queue[bytes | None] = queue.Queue(max_lines)
        self._stop = threading.Event()
        self.dropped = 0
        self._thread = threading.Thread(target=self._write_loop, name="elastic-console", daemon=True)
        self._thread.start()

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
            data = self._lines.get()
            if data is None:
                return
            while data and not self._stop.is_set():
                try:
                    _, writable, _ = select.select([], [self._fd], [], _SELECT_TIMEOUT_S)
                    if not writable:
                        continue
                    written = os.write(self._fd, data[:_CHUNK_BYTES])
                except InterruptedError:
                    continue
                except OSError:
                    return  # the reader is gone; nothing more can be shown
                data = data[written:]
