"""The node's one watcher thread per attempt: it looks at the ranks' files and hands each look to the jobs.

Three jobs watch an attempt's ranks on a node: the hang watch
(:mod:`elastic.node.watchers.hangs`), the first sign of life
(:mod:`elastic.node.watchers.life`) and the steps (:mod:`elastic.node.watchers.steps`).
Each keeps its own decisions and its own rate; this thread ticks when the
earliest of them is due, runs the jobs that are, and ends when none is left or
it is stopped. Within a tick the files are read once (:class:`Look`): a heartbeat
file's stat and first bytes, a log's stat, the running ranks.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Protocol

from elastic.node.supervisor import RunningWorker

__all__ = ["Look", "NodeWatch", "Signature", "WatchJob", "signature"]

# What changes when a rank shows a sign of life: size, mtime in ns, inode, and
# the start of a heartbeat file (its time field changes even where mtimes are coarse).
Signature = tuple[int, int, int, bytes]
_CONTENT_BYTES = 256
_JOIN_TIMEOUT_S = 30.0


def signature(path: str, *, heartbeat_file: bool) -> tuple[Signature, float] | None:
    """The file's signature and its modification time (wall seconds), or None.

    A heartbeat file is read too (its first bytes), and counts from the moment
    it exists, so ``touch "$ELASTIC_HEARTBEAT_FILE"`` is a beat. A log counts
    once it holds something: the supervisor creates it empty.
    """
    try:
        st = os.stat(path)
        head = b""
        if heartbeat_file:
            with open(path, "rb") as beat:
                head = beat.read(_CONTENT_BYTES)
    except OSError:
        return None
    if st.st_size == 0 and not heartbeat_file:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino, head), st.st_mtime


class Look:
    """One tick's reading of the node's files and ranks: each is read at most once."""

    def __init__(self, running: Callable[[], list[RunningWorker]] | None = None, attempt: int = -1) -> None:
        """``running``: the node's running ranks (None: no rank is looked at)."""
        self._running = running if running is not None else list
        self._attempt = attempt
        self._workers: list[RunningWorker] | None = None
        self._seen: dict[tuple[str, bool], tuple[Signature, float] | None] = {}

    def workers(self) -> list[RunningWorker]:
        """The attempt's ranks running on this node now."""
        if self._workers is None:
            self._workers = [w for w in self._running() if w.spec.attempt == self._attempt]
        return self._workers

    def signature(self, path: str, *, heartbeat_file: bool) -> tuple[Signature, float] | None:
        """:func:`signature` of the file, read once a tick."""
        key = (path, heartbeat_file)
        if key not in self._seen:
            self._seen[key] = signature(path, heartbeat_file=heartbeat_file)
        return self._seen[key]


class WatchJob(Protocol):
    """One job of the node's watcher."""

    def start(self, now: float) -> float:
        """The ranks have started (``now`` on the monotonic clock); the seconds to the first look."""
        ...

    def tick(self, now: float, look: Look) -> float | None:
        """Look once (``now`` on the monotonic clock); the seconds until the next look, or None when done."""
        ...

    def stop(self) -> None:
        """A drain has begun: no more kills, reports of a start, or stalls from now on."""
        ...

    def close(self) -> None:
        """The thread has ended: let go of what the job holds open."""
        ...


class NodeWatch:
    """The one thread that runs one attempt's watch jobs on this node."""

    def __init__(
        self,
        attempt: int,
        jobs: Sequence[WatchJob],
        *,
        running: Callable[[], list[RunningWorker]],
        clock: Callable[[], float],
    ) -> None:
        self._attempt = attempt
        self._jobs = list(jobs)
        self._running = running
        self._clock = clock
        self._stopped = threading.Event()
        self._ending = threading.Lock()  # the thread's end, against a join that gives up on it
        self._ended = False
        self._close_at_end = False
        self._closed = False
        self._thread = threading.Thread(target=self._watch, name=f"elastic-node-watch-{attempt}", daemon=True)

    def start(self) -> None:
        if self._jobs:
            self._thread.start()

    def stop(self) -> None:
        """A drain has begun: every job is told, and the thread ends soon after."""
        for job in self._jobs:
            job.stop()
        self._stopped.set()

    def join(self, timeout_s: float = _JOIN_TIMEOUT_S) -> bool:
        """Wait for the thread to end, then let go of the jobs' files; True when it had ended.

        The jobs stay open until here, not only until the thread ends: the agent still
        reads the last steps after a drain stopped the thread (``StepWatch.flush``). A
        thread still inside a tick (a stack dump) lets go of them itself as it ends, so
        nothing is closed under a running tick.
        """
        if self._thread.ident is not None:
            self._thread.join(timeout_s)
        with self._ending:
            still_running = self._thread.ident is not None and not self._ended
            self._close_at_end = still_running
        if still_running:
            return False
        self._close_jobs()
        return True

    def _close_jobs(self) -> None:
        with self._ending:
            closed, self._closed = self._closed, True
        if not closed:
            for job in self._jobs:
                job.close()

    def _watch(self) -> None:
        try:
            self._tick_until_done()
        finally:
            with self._ending:
                self._ended = True
                close = self._close_at_end
            if close:
                self._close_jobs()

    def _tick_until_done(self) -> None:
        # Paced on the real monotonic clock, as a wait is; the jobs read the injected one.
        began = time.monotonic()
        due = [(job, began + job.start(self._clock())) for job in self._jobs]
        while due:
            if self._stopped.wait(max(0.0, min(at for _, at in due) - time.monotonic())):
                return
            look, ticked_at = Look(self._running, self._attempt), time.monotonic()
            later = []
            for job, at in due:
                if at > ticked_at:
                    later.append((job, at))
                    continue
                next_s = self._tick(job, look)
                if next_s is not None:  # from the tick's start: jobs due together stay together
                    later.append((job, ticked_at + next_s))
            due = later

    def _tick(self, job: WatchJob, look: Look) -> float | None:
        """One job's look. A job that raises is done (its traceback printed); the others,
        the hang watch among them, watch on."""
        try:
            return job.tick(self._clock(), look)
        except Exception:
            print(f"elastic: the {type(job).__name__} of attempt {self._attempt} failed and stops watching it:",
                  file=sys.stderr, flush=True)
            traceback.print_exc()
            return None
