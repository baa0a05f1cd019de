"""The node agent's hang watch: sees beats, judges staleness, dumps stacks, kills the hung.

One of the jobs of the node's watcher thread (:mod:`elastic.node.watchers.watcher`),
per attempt. It looks at each rank's heartbeat file (or log, with
``--heartbeat-source output``) every
:func:`elastic.worker.heartbeat.check_interval_s`; a change of the file is a beat.
When a rank's deadline passes it dumps the stacks of every rank of the node,
then SIGKILLs the hung rank's group through the supervisor, whose exit report
then says ``hung``. It fires once: the driver drains and restarts the group.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from elastic.worker.heartbeat import (
    HEARTBEAT_FILE_VAR,
    HangPolicy,
    HeartbeatSource,
    check_interval_s,
    is_stale,
    observed_beat_at,
)
from elastic.core.launch.spec import WorkerSpec
from elastic.node.watchers.hang_kills import kill_blamed
from elastic.node.watchers.watcher import Look, Signature, signature
from elastic.node.supervisor import RunningWorker

__all__ = [
    "BeatTracker",
    "HangWatcher",
    "Signature",
    "beat_path",
    "hang_reason",
    "sign_of_life_age_s",
    "signature",
]


def beat_path(spec: WorkerSpec, source: HeartbeatSource) -> str:
    """The file whose changes are the rank's beats."""
    if source is HeartbeatSource.OUTPUT:
        return spec.log_path
    return spec.env.get(HEARTBEAT_FILE_VAR, "")  # always set by plan.worker_env


def sign_of_life_age_s(spec: WorkerSpec, now_wall: float) -> float | None:
    """Seconds since the rank's last sign of life (its heartbeat file, or its log
    with ``--heartbeat-source output``), or None before the first one."""
    source = spec.hang.source if spec.hang is not None else HeartbeatSource.API
    seen = signature(beat_path(spec, source), heartbeat_file=source is HeartbeatSource.API)
    return None if seen is None else max(0.0, now_wall - seen[1])


class BeatTracker:
    """One rank's beats as seen from outside; pure: it is told the times and signatures."""

    def __init__(self, baseline: Signature | None, watched_from: float) -> None:
        self._signature = baseline  # what was there before the rank started: not a beat
        self._checked_at = watched_from
        self.last_beat_at: float | None = None

    def saw(self, now: float, seen: Signature | None, age_s: float) -> bool:
        """Record one look at ``now``; True when it shows a new beat (``age_s`` old)."""
        beat = seen is not None and seen != self._signature
        if beat:
            self._signature = seen
            self.last_beat_at = observed_beat_at(now, age_s, self._checked_at)
        self._checked_at = now
        return beat

    def stale(self, now: float, started_at: float, policy: HangPolicy) -> bool:
        return is_stale(now, started_at, self.last_beat_at, policy.silence_allowed_s, policy.startup_s)


def hang_reason(now: float, last_beat_at: float | None, policy: HangPolicy) -> str:
    """Why a rank is called hung, in words, naming the flag that decided."""
    sign = "output" if policy.source is HeartbeatSource.OUTPUT else "heartbeat"
    if last_beat_at is None:
        return f"no first {sign} within --startup-timeout {policy.startup_s:g}s"
    return f"no {sign} for {now - last_beat_at:.1f}s (--heartbeat-timeout {policy.timeout_s:g}s)"


class HangWatcher:
    """Watches one attempt's ranks on this node until they exit, it fires, or it is stopped."""

    def __init__(
        self,
        specs: Sequence[WorkerSpec],
        policy: HangPolicy,
        *,
        kill_hung: Callable[[int, str, float, float], bool],
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """Call before the ranks start: what their files hold now is not a beat."""
        self._policy = policy
        self._kill_hung = kill_hung
        self._clock = clock
        self._wall = wall
        now = clock()
        self._paths = {s.rank: beat_path(s, policy.source) for s in specs}
        self._heartbeat_file = policy.source is HeartbeatSource.API
        self._trackers = {}
        for rank, path in self._paths.items():
            seen = signature(path, heartbeat_file=self._heartbeat_file)
            self._trackers[rank] = BeatTracker(seen[0] if seen else None, now)
        self._stopped = threading.Event()

    def start(self, now: float) -> float:
        """The ranks have started; the seconds to the first look."""
        return check_interval_s(self._policy)

    def stop(self) -> None:
        """No more kills from now on (a drain has begun)."""
        self._stopped.set()

    def close(self) -> None:
        pass

    def tick(self, now: float, look: Look) -> float | None:
        """Look at the ranks' beats; fire at the hung. The seconds to the next look, or None: done."""
        if self._stopped.is_set():
            return None
        workers = look.workers()
        if not workers:
            return None
        hung = self._look(now, look, workers)
        if hung:
            self._fire(workers, hung)
            return None
        return check_interval_s(self._policy)

    def _look(
        self, now: float, look: Look, workers: list[RunningWorker]
    ) -> list[tuple[RunningWorker, str, float]]:
        wall_now = self._wall()
        hung = []
        for worker in workers:
            tracker = self._trackers.get(worker.spec.rank)
            if tracker is None:
                continue
            seen = look.signature(self._paths[worker.spec.rank], heartbeat_file=self._heartbeat_file)
            age_s = max(0.0, wall_now - seen[1]) if seen else 0.0
            tracker.saw(now, seen[0] if seen else None, age_s)
            if tracker.stale(now, worker.started_at, self._policy):
                silent_since = worker.started_at if tracker.last_beat_at is None else tracker.last_beat_at
                hung.append((worker, hang_reason(now, tracker.last_beat_at, self._policy), now - silent_since))
        return hung

    def _fire(self, workers: list[RunningWorker], hung: list[tuple[RunningWorker, str, float]]) -> None:
        detected_at = self._clock()
        kill_blamed(workers, hung, what="hung", clock=self._clock, detected_at=detected_at,
                    stopped=self._stopped, kill_hung=self._kill_hung)
