"""Following rank log files for the console: ``[rank R] line`` as ranks write."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

__all__ = ["LogFollower"]

# Console echo only: a rank's output is already safe in its own file, so a
# tenth of a second of display latency costs nothing; quiet ranks are checked
# less and less often, up to twice a second, to keep the launcher's CPU use tiny.
_INTERVAL_S = 0.1
_QUIET_INTERVAL_S = 0.5
_READ_BYTES = 1 << 16
# Per file and tick, so one chatty rank cannot starve the others' echo.
_MAX_BYTES_PER_TICK = 4 << 20
_MAX_LINE_BYTES = 64 << 10


class _Followed:
    def __init__(self, rank: int, path: str, fd: int | None = None) -> None:
        self.rank = rank
        self.path = path
        self.fd = fd
        self.partial = b""


class LogFollower:
    """Reads new bytes of each followed file and emits complete lines."""

    def __init__(self, emit: Callable[[int, str], None], *, interval_s: float = _INTERVAL_S) -> None:
        self._emit = emit
        self._interval_s = interval_s
        self._files: list[_Followed] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def follow(self, rank: int, path: str, *, from_end: bool = False) -> None:
        """Emit the lines of ``path`` as rank ``rank``'s; ``from_end``: only those written from
        now on (a rank taken over from a dead driver, whose earlier lines were shown by it)."""
        fd = None
        if from_end:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                os.lseek(fd, 0, os.SEEK_END)
            except OSError:
                fd = None
        with self._lock:
            self._files.append(_Followed(rank, path, fd))
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="elastic-follow", daemon=True)
            self._thread.start()

    def finish(self) -> None:
        """Emit everything written so far (partial last lines included), stop following."""
        with self._lock:
            files, self._files = self._files, []
            for followed in files:
                self._read(followed, final=True)
                if followed.fd is not None:
                    os.close(followed.fd)

    def close(self) -> None:
        self.finish()
        self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def _loop(self) -> None:
        interval_s = self._interval_s
        while not self._closed:
            with self._lock:
                got_output = any([self._read(f, final=False) for f in self._files])
            interval_s = self._interval_s if got_output else min(2 * interval_s, _QUIET_INTERVAL_S)
            self._wake.wait(interval_s)

    def _read(self, followed: _Followed, *, final: bool) -> bool:
        """Emit the complete lines written since the last read; True if there were bytes."""
        if followed.fd is None:
            try:
                followed.fd = os.open(followed.path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return False
        got_output = False
        budget = None if final else _MAX_BYTES_PER_TICK
        while budget is None or budget > 0:
            try:
                chunk = os.read(followed.fd, _READ_BYTES)
            except OSError:
                return got_output
            if not chunk:
                break
            got_output = True
            if budget is not None:
                budget -= len(chunk)
            self._split_lines(followed, chunk)
        if final and followed.partial:
            self._emit(followed.rank, followed.partial.decode("utf-8", errors="replace"))
            followed.partial = b""
        return got_output

    def _split_lines(self, followed: _Followed, chunk: bytes) -> None:
        """Emit each complete line; only the new chunk is scanned, so cost stays linear."""
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            line, followed.partial = followed.partial + chunk[start:end], b""
            self._emit(followed.rank, line.decode("utf-8", errors="replace"))
            start = end + 1
        followed.partial += chunk[start:]
        if len(followed.partial) >= _MAX_LINE_BYTES:
            # Output that never ends a line (a progress bar redrawn with '\r')
            # is shown in pieces rather than held without bound.
            self._emit(followed.rank, followed.partial.decode("utf-8", errors="replace"))
            followed.partial = b""
