"""The survivor's ear: a thread that reads the notice file and ends a generation the launcher declared over.

One daemon thread per rank looks at the notice file every ``interval_s`` (one
``stat`` while nothing changes). When it holds a generation newer than the one
the rank is in, the thread records it and calls ``on_over`` once (the rank's
generation shuts down its group's sockets there, so a collective in flight
raises at once); the rank's main thread sees it at its next step boundary
(:meth:`NoticeWatch.over`) or when the collective raises. Standard library only.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from elastic.worker.inplace.notice import Notice, read_notice

__all__ = ["INTERVAL_S", "NoticeWatch"]

INTERVAL_S = 0.01


class NoticeWatch:
    """Watches ``path`` for a generation after ``generation``; calls ``on_over(notice)`` once."""

    def __init__(
        self, path: str | None, generation: int, on_over: Callable[[Notice], None], interval_s: float = INTERVAL_S
    ) -> None:
        self._path = path
        self._generation = generation
        self._on_over = on_over
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._next: Notice | None = None
        self._seen: tuple[int, int, int] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> NoticeWatch:
        """Look now (a notice already there ends the generation before it starts), then keep watching."""
        self._look()
        if self._path is not None and self._next is None:
            self._thread = threading.Thread(target=self._run, name="elastic-inplace-notice", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def over(self) -> Notice | None:
        """The next generation's notice once the launcher declared this one over, else ``None``."""
        with self._lock:
            return self._next

    def wait(self, timeout_s: float) -> Notice | None:
        """The next generation's notice, waiting up to ``timeout_s`` for it (a collective that broke
        may have broken before the launcher's word arrived)."""
        if self._thread is None:
            self._look()
            return self.over()
        deadline_at = time.monotonic() + timeout_s
        while (notice := self.over()) is None and (left := deadline_at - time.monotonic()) > 0:
            time.sleep(min(self._interval_s, left))
        return notice

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            if self._look():
                return

    def _look(self) -> bool:
        """Whether the generation is over (a newer notice found, ``on_over`` called)."""
        if self._path is None:
            return False
        try:
            status = os.stat(self._path)
        except OSError:
            return False
        seen = (status.st_ino, status.st_mtime_ns, status.st_size)
        if seen == self._seen:
            return False
        self._seen = seen
        notice = read_notice(self._path)
        if notice is None or notice.generation <= self._generation:
            return False
        with self._lock:
            self._next = notice
        self._on_over(notice)
        return True

