"""Heartbeats: the worker-side beacon, the hang policy, and the pure staleness maths.

A training script calls ``elastic.heartbeat(step=step)`` as often as it likes
(every step is fine): the call costs well under a microsecond because it only
compares ``time.monotonic()`` with the next write deadline, and it writes the
rank's heartbeat file (``ELASTIC_HEARTBEAT_FILE``) at most every
:data:`BEAT_INTERVAL_S`. Without a launcher (the variable unset) it does
nothing. The node agent watches that file (or, with ``--heartbeat-source
output``, the rank's log) and decides staleness with :func:`beat_deadline` and
:func:`is_stale`, which are pure functions of numbers.

Imported lazily by ``import elastic`` and by training scripts, so it imports
only the standard library.
"""

from __future__ import annotations

import enum
import os
import sys
import time
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = [
    "BEAT_INTERVAL_S",
    "DEFAULT_STARTUP_TIMEOUT_S",
    "HEARTBEAT_FILE_VAR",
    "Beacon",
    "HangPolicy",
    "HeartbeatSource",
    "beat_deadline",
    "check_interval_s",
    "declared_done",
    "heartbeat",
    "is_stale",
    "observed_beat_at",
]

HEARTBEAT_FILE_VAR = "ELASTIC_HEARTBEAT_FILE"
# A beat is written at most this often. The watcher allows this much for calls
# that fell between two writes, so it is also how late a hang can be called;
# ten small writes a second cost a rank nothing it could measure.
BEAT_INTERVAL_S = 0.1
# Before its first beat a rank gets this long (imports, CUDA init, data loading,
# checkpoint loading), unless --startup-timeout says otherwise.
DEFAULT_STARTUP_TIMEOUT_S = 300.0
# The watcher looks at the files at least this often, more often for short timeouts.
_MAX_CHECK_INTERVAL_S = 0.5
# A heartbeat file is one short line; more than this is not read for "done".
_MAX_DONE_READ = 4096


# -- the policy and the pure maths ---------------------------------------------------


class HeartbeatSource(enum.Enum):
    """What counts as a sign of life of a rank."""

    API = "api"  # elastic.heartbeat() calls (its heartbeat file changes)
    OUTPUT = "output"  # anything the rank writes to its log


@dataclass(frozen=True)
class HangPolicy:
    """When a rank counts as hung; frozen and picklable, it travels in each WorkerSpec."""

    timeout_s: float
    startup_timeout_s: float | None = None  # None: DEFAULT_STARTUP_TIMEOUT_S or timeout_s, the longer
    source: HeartbeatSource = HeartbeatSource.API

    def __post_init__(self) -> None:
        if not 0 < self.timeout_s < float("inf"):
            raise ValueError(f"timeout_s must be > 0 seconds, got {self.timeout_s!r}")
        if self.startup_timeout_s is not None and not 0 < self.startup_timeout_s < float("inf"):
            raise ValueError(f"startup_timeout_s must be > 0 seconds, got {self.startup_timeout_s!r}")

    @property
    def silence_allowed_s(self) -> float:
        """How long after the last *seen* sign of life a rank becomes hung.

        :class:`Beacon` writes at most once per :data:`BEAT_INTERVAL_S`, so calls
        made up to that long after the last write leave no trace; allowing for
        them means a rank is never called hung before ``timeout_s`` has passed
        since its last call. Output lines are seen one by one: no allowance.
        """
        grain_s = BEAT_INTERVAL_S if self.source is HeartbeatSource.API else 0.0
        return self.timeout_s + grain_s

    @property
    def startup_s(self) -> float:
        """The allowance before the first beat that applies."""
        if self.startup_timeout_s is not None:
            return self.startup_timeout_s
        return max(DEFAULT_STARTUP_TIMEOUT_S, self.timeout_s)


def beat_deadline(
    started_at: float, last_beat_at: float | None, timeout_s: float, startup_timeout_s: float
) -> float:
    """When a rank becomes hung: ``timeout_s`` after its last beat, or ``startup_timeout_s``
    after its start while it has not beaten yet (monotonic seconds)."""
    if last_beat_at is None:
        return started_at + startup_timeout_s
    return last_beat_at + timeout_s


def is_stale(
    now: float,
    started_at: float,
    last_beat_at: float | None,
    timeout_s: float,
    startup_timeout_s: float,
) -> bool:
    """Whether the rank's deadline has passed at ``now``."""
    return now >= beat_deadline(started_at, last_beat_at, timeout_s, startup_timeout_s)


def observed_beat_at(now: float, age_s: float, previous_check_at: float) -> float:
    """When a beat seen at ``now`` happened, on the monotonic clock.

    The file's modification time says it is ``age_s`` old; the beat also
    surely happened after the previous look found no change, and not in the
    future. Clamping to that window keeps a skewed file system clock harmless
    while an honest one makes detection exact, not one check interval late.
    """
    return min(now, max(previous_check_at, now - age_s))


def check_interval_s(policy: HangPolicy) -> float:
    """How often the watcher looks: ``min(0.5 s, timeout / 4)`` for the shorter timeout.

    A hang is then called at most ``BEAT_INTERVAL_S`` + this after the timeout
    has passed since the rank's last call: within 0.6 s.
    """
    return min(_MAX_CHECK_INTERVAL_S, min(policy.timeout_s, policy.startup_s) / 4)


# -- the worker side -----------------------------------------------------------------


class Beacon:
    """Writes one rank's heartbeat file, at most once per ``interval_s``.

    The file holds one line, ``{"step": N, "time": WALL, "pid": PID}``, rewritten
    in place through a descriptor opened once (a ``pwrite`` and an
    ``ftruncate``): its content and its modification time both tell the beat.
    Once the rank says it finished (``done=True``) the line also holds
    ``"done": true``, written at once, and keeps it. A failed write never
    raises into training; the next interval tries again.
    """

    __slots__ = ("_clock", "_done", "_fd", "_interval_s", "_next_at", "_path", "_wall", "writes")

    def __init__(
        self,
        path: str | None,
        *,
        interval_s: float = BEAT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._path = path
        self._interval_s = interval_s
        self._clock = clock
        self._wall = wall
        self._fd: int | None = None
        self._done = False
        # No file: never due, so a call is one comparison.
        self._next_at = float("-inf") if path else float("inf")
        self.writes = 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Beacon:
        env = os.environ if environ is None else environ
        return cls(env.get(HEARTBEAT_FILE_VAR) or None)

    @property
    def path(self) -> str | None:
        return self._path

    @property
    def next_at(self) -> float:
        """When the next beat is due (monotonic); infinity without a file."""
        return self._next_at

    def beat(
        self, step: int | None = None, done: bool = False, compute: tuple[float, int] | None = None
    ) -> None:
        """A beat; ``done`` (the rank finished its work) is written at once, never dropped.

        ``compute``: the process's running totals of ``compute_s`` and of the steps that gave
        it, written as ``"compute_s"`` and ``"compute_steps"`` (the node takes differences).
        """
        now = self._clock()
        if done and self._path is not None:
            self._done = True
        elif now < self._next_at:
            return
        self._next_at = now + self._interval_s
        self._write(step, compute)

    def _write(self, step: int | None, compute: tuple[float, int] | None = None) -> None:
        assert self._path is not None
        try:
            step_text = b"null" if step is None else b"%d" % int(step)  # a tensor step too
        except (TypeError, ValueError):
            step_text = b"null"
        done_text = b', "done": true' if self._done else b""
        compute_text = b"" if not compute or not compute[1] else (
            b', "compute_s": %.6f, "compute_steps": %d' % compute
        )
        line = b'{"step": %s, "time": %.6f, "pid": %d%s%s}\n' % (
            step_text, self._wall(), os.getpid(), compute_text, done_text
        )
        try:
            if self._fd is None:
                self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
            os.pwrite(self._fd, line, 0)
            os.ftruncate(self._fd, len(line))
        except OSError:
            return  # a full disk or a removed directory must not stop training
        self.writes += 1

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


_beacon: Beacon | None = None
# The process beacon's next write deadline, kept here so the common call is one
# clock read and one comparison of globals (about 0.15 µs over an empty call).
_next_at = float("-inf")
_monotonic = time.monotonic
# compute_s given so far in this process, and by how many calls: written with each beat.
_compute_s = 0.0
_compute_steps = 0
_INFINITY = float("inf")


def heartbeat(step: int | None = None, done: bool = False, compute_s: float | None = None) -> None:
    """Tell the launcher this rank is alive (and at ``step``); cheap, call it every step.

    Writes at most every :data:`BEAT_INTERVAL_S`; a no-op when not launched by
    elastic. With ``--heartbeat-timeout`` a rank that stops calling it is
    stack-dumped, killed and restarted::

        import elastic
        for step in range(start, steps):
            train_step()
            elastic.heartbeat(step=step)
        elastic.heartbeat(step=steps, done=True)  # finished: a hang at exit is no failure

    ``done=True`` says the rank's work is finished (written at once): if the
    rank then hangs at exit (``--exit-timeout`` after a peer exited 0), it is
    killed and the run still succeeds.

    ``compute_s``: the seconds this step took on this rank, not counting the
    wait for its peers in the collective (data loading and forward/backward,
    timed with ``time.perf_counter()`` or CUDA events). In synchronous data
    parallel every rank's steps come at the slowest rank's pace, so only this
    shows which rank is slow (see docs/failures/stragglers.md). Give it every step
    or never; it is summed here and written with the next beat::

        began = time.perf_counter()
        batch = next(batches)  # data loading
        loss = model(batch).sum()  # forward: no collective yet
        compute_s = time.perf_counter() - began
        loss.backward()  # DDP's all-reduce waits here for the slowest rank
        optimizer.step()
        elastic.heartbeat(step=step, compute_s=compute_s)
    """
    if compute_s is not None:
        _add_compute(compute_s)
    if not done and _monotonic() < _next_at:
        return
    _due(step, done)


def _add_compute(compute_s: float) -> None:
    """Count one step's seconds; a value that is no time (NaN, infinite, negative: a timer
    gone wrong) is left out, or it would spoil the total, and the file's JSON, for good."""
    global _compute_s, _compute_steps
    try:
        seconds = float(compute_s)  # a tensor's or numpy's number too
    except (TypeError, ValueError):
        return
    if not 0.0 <= seconds < _INFINITY:
        return
    _compute_s += seconds
    _compute_steps += 1


def _due(step: int | None, done: bool = False) -> None:
    global _beacon, _next_at
    beacon = _beacon
    if beacon is None:
        beacon = _beacon = Beacon.from_env()
    beacon.beat(step, done, (_compute_s, _compute_steps) if _compute_steps else None)
    _next_at = beacon.next_at


def declared_done(path: str) -> bool:
    """Whether the heartbeat file at ``path`` says its rank finished.

    A line that is a JSON object with ``"done": true``: what ``heartbeat(done=True)``
    writes, and what a program in any language can write itself, e.g.
    ``echo '{"done": true}' > "$ELASTIC_HEARTBEAT_FILE"``. Anything else,
    or no file, is not finished.
    """
    import json  # only the launcher's side reads: keep the worker's import light

    try:
        with open(path, "rb") as beat:
            text = beat.read(_MAX_DONE_READ).decode("utf-8", errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("done") is True:
            return True
    return False


def rebind() -> None:
    """Read ``ELASTIC_HEARTBEAT_FILE`` again at the next beat: a warm spare handed a lost rank's
    place (:mod:`elastic.worker.inplace`) beats into that rank's file from then on."""
    global _beacon, _next_at, _compute_s, _compute_steps
    beacon, _beacon, _next_at = _beacon, None, float("-inf")
    _compute_s, _compute_steps = 0.0, 0
    if beacon is not None:
        beacon.close()


def _after_fork_in_child() -> None:
    # A forked child (a data loader worker) is not the rank: it must not share
    # the rank's descriptor; it starts its own beacon on first use.
    global _beacon, _next_at, _compute_s, _compute_steps
    _beacon, _next_at = None, float("-inf")
    _compute_s, _compute_steps = 0.0, 0


os.register_at_fork(after_in_child=_after_fork_in_child)


class _CallableModule(types.ModuleType):
    """This module, callable: ``elastic.heartbeat(step=...)`` works in every import order.

    ``elastic.worker.heartbeat`` is both this submodule and the function users call.
    Importing a submodule binds it as an attribute of its package, replacing a
    function of the same name, so the package attribute is the module itself
    and calling it calls :func:`heartbeat`.
    """

    # The function itself, not a method that calls it: one frame less per call.
    __call__ = staticmethod(heartbeat)


sys.modules[__name__].__class__ = _CallableModule
