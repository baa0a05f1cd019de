"""Following rank log files for the console: ``[rank R] line`` as ranks write."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

__all__ = ["LogFollower"]

# Console echo only: a rank's output is already safe in its own file, so a
# tenth of a second of display latency costs nothing and keeps CPU use tiny.
_INTERVAL_S = 0.1
_READ_BYTES = 1 << 16
# Per file and tick, so one chatty rank cannot starve the others' echo.
_MAX_BYTES_PER_TICK = 4 << 20


class _Followed:
    def __init__(self, rank: int, path: str) -> None:
        self.rank = rank
        self.path = path
        self.fd: int | None = None
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

    def follow(self, rank: int, path: str) -> None:
        with self._lock:
            self._files.append(_Followed(rank, path))
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
        while not self._closed:
            with self._lock:
                for followed in self._files:
                    self._read(followed, final=False)
            self._wake.wait(self._interval_s)

    def _read(self, followed: _Followed, *, final: bool) -> None:
        if followed.fd is None:
            try:
                followed.fd = os.open(followed.path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return
        budget = None if final else _MAX_BYTES_PER_TICK
        while budget is None or budget > 0:
            try:
                chunk = os.read(followed.fd, _READ_BYTES)
            except OSError:
                return
            if not chunk:
                break
            if budget is not None:
                budget -= len(chunk)
            lines = (followed.partial + chunk).split(b"\n")
            followed.partial = lines.pop()
            for line in lines:
                self._emit(followed.rank, line.decode("utf-8", errors="replace"))
        if final and followed.partial:
            self._emit(followed.rank, followed.partial.decode("utf-8", errors="replace"))
            followed.partial = b""
