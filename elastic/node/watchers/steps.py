"""The node's step watch: reads each rank's steps, reports them, and kills a stalled rank.

One watch per attempt and node, a job of the node's watcher thread
(:mod:`elastic.node.watchers.watcher`). Each look reads what the
node's ranks wrote to their logs since the last look (the new bytes only), hands
each line to a :class:`elastic.core.training.output_steps.StepReader`, and reads each rank's
heartbeat file for a step (``elastic.heartbeat(step=...)``, which wins over the
output once seen). Of the counters the output shows, the training counter gives
the rank's step; any that advances is a sign of life (:mod:`elastic.core.training.stall`).
With the built-in patterns and a ``--checkpoint-dir``, the Hugging Face
Trainer's own record counts where a rank shows no step of its own
(:mod:`elastic.core.training.trainer_state`): each ``trainer_state.json`` it writes there
is a step of every rank of the node (:class:`TrainerStateFiles`), and its log
lines' epochs are steps of the rank that prints them once a state gives the
steps per epoch. Steps go to the driver as :class:`StepsSeen`: a rank's first
step of the attempt at once (and which it was: the first of the lines read with
it, :attr:`elastic.core.training.stall.RankProgress.first_step`), then the latest
steps at most every :data:`REPORT_EVERY_S`, a step held back going at the first
look after (the looks go on while the output is quiet). A rank whose steps stop (:mod:`elastic.core.training.stall`)
while the checkpoint directory is quiet is stalled: the stacks of the node's
ranks are dumped, then the rank is SIGKILLed as hung, once; or, when it waits
in a collective and a peer of the node is elsewhere, that peer, the cause
(:mod:`elastic.core.training.hang_blame`).

Each step sent carries the rank's step time once it has one
(:mod:`elastic.core.training.stragglers`): the mean over its last ``STRAGGLER_STEPS``
steps of the ``compute_s`` its heartbeat file totals, when the script gives it,
else of the interval between its steps as read here, once its steps have settled
(:class:`elastic.core.training.stragglers.WindowMean`); each look that shows new steps is
one mark, several steps read at once spread over the time since the look before.
A rank's first step time is sent at once, as its first step is, so a straggler is
named as soon as its steps settle. Steps from the Trainer's record carry no step time: they are
the whole job's pace, not the rank's.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Sequence

from elastic.core.messages import RankStep, StepsSeen
from elastic.core.launch.spec import WorkerSpec
from elastic.core.training.output_steps import Reading, StepReader, compile_user_pattern
from elastic.core.training.startup import RankImports
from elastic.core.training.stall import TRAINER, ProgressPolicy, RankProgress, stall_reason
from elastic.core.training.stragglers import WindowMean
from elastic.core.training.trainer_state import (
    TRAINER_STATE_FILE,
    LoggedEpoch,
    TrainerState,
    checkpoint_number,
    logged_epoch,
    parse_trainer_state,
)
from elastic.node.clock import Clock
from elastic.node.watchers.hang_kills import kill_blamed
from elastic.node.watchers.watcher import Look
from elastic.node.probes.startup import rank_startup
from elastic.node.supervisor import RunningWorker
from elastic.worker.heartbeat import HEARTBEAT_FILE_VAR

__all__ = ["REPORT_EVERY_S", "LineSplitter", "StepWatch", "TrainerStateFiles", "latest_write", "written_at"]

# Reading cadence: as the console echo's; quiet logs are looked at less often.
_INTERVAL_S = 0.1
_QUIET_INTERVAL_S = 0.5
# The latest steps go to the driver at most this often (first steps at once), and a step held back
# goes at the first look after: what the status line shows is at most this (and a look) behind.
REPORT_EVERY_S = 1.0
_READ_BYTES = 1 << 16
_MAX_BYTES_PER_TICK = 4 << 20
_MAX_LINE_BYTES = 64 << 10
_SCAN_ENTRIES = 4096  # entries of the checkpoint directory looked at for a recent write
_SCAN_DEPTH = 3
_TRAINER_STATE_EVERY_S = 0.5  # the Trainer's state files are looked at (3 stats) at most this often
_TRAINER_STATE_BYTES = 64 << 20  # a larger trainer_state.json (a huge log_history) is not read


def latest_write(path: str, *, depth: int = _SCAN_DEPTH, budget: int = _SCAN_ENTRIES) -> float | None:
    """The latest modification time (wall seconds) under ``path``, looked at ``depth`` levels
    down and at most ``budget`` entries, None where ``path`` cannot be read.

    A save writes a file or a step directory near the top, and keeps writing in the
    directory it made last: each directory's subdirectories are walked newest first (by
    their own time, which a file created in them moves), so the one a save is filling is
    looked into before the kept checkpoints' thousands of shards use up the budget.
    """
    try:
        latest = os.stat(path).st_mtime
    except OSError:
        return None
    pending = [(path, 0)]
    while pending and budget > 0:
        where, level = pending.pop()
        below: list[tuple[float, str]] = []
        try:
            with os.scandir(where) as entries:
                for entry in entries:
                    if budget <= 0:
                        break
                    budget -= 1
                    try:
                        mtime = entry.stat(follow_symlinks=False).st_mtime
                        inside = level + 1 < depth and entry.is_dir(follow_symlinks=False)
                    except OSError:
                        continue  # gone since the listing (a save renames its temporary directory)
                    latest = max(latest, mtime)
                    if inside:
                        below.append((mtime, entry.path))
        except OSError:
            continue
        below.sort()  # the newest last: popped first
        pending.extend((sub, level + 1) for _, sub in below)
    return latest


def written_at(clock: Clock, modified: float | None, since: float | None, now: float) -> float:
    """When what a look at ``now`` (monotonic) read was written: its file's modification time
    (wall) moved onto the monotonic clock, never before ``since`` (the look before) nor after
    ``now``; ``now`` when the time is not known. A step is placed when the rank wrote it, not when
    a look found it: looks at a quiet log are up to ``_QUIET_INTERVAL_S`` apart, so a first step
    after a silent start-up would be placed that late (the goodput ledger's start-up and training,
    :mod:`elastic.core.journal.ledger`)."""
    if modified is None:
        return now
    at = now - max(0.0, clock.time() - modified)
    return at if since is None else max(at, since)


class TrainerStateFiles:
    """The Hugging Face Trainer's ``trainer_state.json`` files in its output directory: the newest
    ``checkpoint-N``'s, and the one ``trainer.save_state()`` writes at the top.

    Made before the ranks start: the files there then are an earlier attempt's, whose step
    is not this attempt's but whose state gives the steps per epoch (:attr:`state`). A file
    written since (its size, time or inode changed) is a step, dated by its modification
    time, kept between the look before and this one (a file server's clock may differ).
    """

    def __init__(self, directory: str, clock: Clock) -> None:
        self._directory = directory
        self._clock = clock
        self._listed: tuple[int, list[str]] | None = None  # (the directory's mtime_ns, the files to look at)
        self._seen: dict[str, tuple[int, int, int]] = {}  # path: (size, mtime_ns, inode) last read
        self._looked_at: float | None = None
        self.state: TrainerState | None = None  # the one read last
        self.look(clock.monotonic(), force=True)  # the earlier attempts' files: known, not new

    def look(self, now: float, *, force: bool = False) -> list[tuple[float, int]]:
        """``(when, step)`` of each state file written since the last look (at most one look
        every :data:`_TRAINER_STATE_EVERY_S`, unless ``force``)."""
        before = self._looked_at
        if not force and before is not None and now - before < _TRAINER_STATE_EVERY_S:
            return []
        self._looked_at = now
        found = []
        for path in self._paths():
            try:
                st = os.stat(path)
            except OSError:
                continue
            mark = (st.st_size, st.st_mtime_ns, st.st_ino)
            if self._seen.get(path) == mark or st.st_size > _TRAINER_STATE_BYTES:
                continue
            try:
                with open(path, encoding="utf-8", errors="replace") as file:
                    state = parse_trainer_state(file.read())
            except OSError:
                continue
            if state is None:
                continue  # cut short by a save still writing it: read again once it changes
            self._seen[path] = mark
            self.state = state
            if before is not None:
                found.append((written_at(self._clock, st.st_mtime, before, now), state.global_step))
        return sorted(found)

    def _paths(self) -> list[str]:
        """The newest ``checkpoint-N``'s state file and the top one; the directory is listed again
        only when it changed (a checkpoint made or removed)."""
        try:
            changed = os.stat(self._directory).st_mtime_ns
        except OSError:
            return []
        if self._listed is None or self._listed[0] != changed:
            newest: tuple[int, str] | None = None
            try:
                with os.scandir(self._directory) as entries:
                    for entry in entries:
                        number = checkpoint_number(entry.name)
                        if number is not None and (newest is None or number > newest[0]):
                            newest = (number, entry.path)
            except OSError:
                return []
            top = os.path.join(self._directory, TRAINER_STATE_FILE)
            self._listed = (changed, [top] if newest is None else [os.path.join(newest[1], TRAINER_STATE_FILE), top])
        return self._listed[1]


class LineSplitter:
    """Bytes of a log in, decoded lines out; a bar redrawn with ``\\r`` and no newline
    yields each complete redraw, so its steps are read as they are drawn."""

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, chunk: bytes) -> list[str]:
        data = self._partial + chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            cut = data.rfind(b"\r")  # only redraws so far: the ones before the last \r are whole
        if cut < 0 and len(data) < _MAX_LINE_BYTES:
            self._partial = data
            return []
        if cut < 0:
            cut = len(data) - 1
        whole, self._partial = data[: cut + 1], data[cut + 1 :]
        return whole.decode("utf-8", errors="replace").split("\n")

    def rest(self) -> str:
        """What came after the last line end (a bar's last redraw): read when the rank is done."""
        rest, self._partial = self._partial, b""
        return rest.decode("utf-8", errors="replace")


class _Rank:
    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.fd: int | None = None
        self.lines = LineSplitter()
        self.progress = RankProgress()
        self.beat = spec.env.get(HEARTBEAT_FILE_VAR, "")
        self.beat_step: int | None = None
        self.reported: int | None = None  # the step last sent to the driver
        self.intervals = WindowMean()  # (step, when seen): the step interval
        self.interval_source: str | None = None  # the source of the steps it holds
        self.compute = WindowMean()  # (compute_steps, compute_s) from the heartbeat file
        self.computes = False  # the script gives compute_s
        self.timed_sent = False  # a step time of this rank went to the driver
        self.epoch: tuple[LoggedEpoch, float] | None = None  # the Trainer's last logged epoch, when read
        self.written: float | None = None  # the log's modification time (wall) at its last read that grew
        self.beat_written: float | None = None  # the heartbeat file's modification time (wall), last read
        self.looked_at: float | None = None  # the last look at its files (monotonic)

    def timed(self, at: float) -> None:
        """The step just seen, as a mark of its interval (after :meth:`RankProgress.saw`)."""
        progress = self.progress
        if progress.step is None:
            return
        if progress.source != self.interval_source:
            self.intervals.clear()  # heartbeat steps took over from output steps: another count
            self.interval_source = progress.source
        if progress.source != TRAINER:  # the job's pace, read a save apart: not this rank's
            self.intervals.add(progress.step, at)

    def step_time(self) -> tuple[float | None, str | None]:
        """The rank's step time and where it is from: ``compute`` once given, else ``interval``."""
        mean, source = (self.compute.mean(), "compute") if self.computes else (self.intervals.mean(), "interval")
        return mean, None if mean is None else source

    def read_output(
        self, reader: StepReader, *, final: bool = False, epochs: list[LoggedEpoch] | None = None
    ) -> tuple[bool, list[Reading]]:
        """(whether the log grew, what its new lines show, in order); ``final``: the rank
        is done, its unfinished last line is whole. The epochs of the Trainer's log lines
        go to ``epochs``, when given. When it grew, :attr:`written` is the log's modification
        time (wall seconds): when its last new line was written."""
        if self.fd is None:
            try:
                self.fd = os.open(self.spec.log_path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return False, []
        grew, budget = False, _MAX_BYTES_PER_TICK
        found: list[Reading] = []

        def read(lines: list[str]) -> None:
            for line in lines:
                if line:
                    found.extend(reader.read(line))
                    epoch = None if epochs is None else logged_epoch(line)
                    if epochs is not None and epoch is not None:
                        epochs.append(epoch)

        while budget > 0:
            try:
                chunk = os.read(self.fd, _READ_BYTES)
            except OSError:
                break
            if not chunk:
                break
            grew, budget = True, budget - len(chunk)
            read(self.lines.feed(chunk))
        if grew:
            try:
                self.written = os.fstat(self.fd).st_mtime
            except OSError:
                self.written = None
        if final:
            read([self.lines.rest()])
        return grew, found

    def read_heartbeat(self, look: Look) -> int | None:
        """The step in the heartbeat file when it changed since the last read, else None;
        its ``compute_s`` totals, if any, go to :attr:`compute`, its modification time to
        :attr:`beat_written`."""
        seen = look.signature(self.beat, heartbeat_file=True)
        if seen is None:
            return None
        self.beat_written = seen[1]
        try:
            line = json.loads(seen[0][3].split(b"\n", 1)[0])
            step = line.get("step")
        except (ValueError, AttributeError):
            return None
        total, count = line.get("compute_s"), line.get("compute_steps")
        if isinstance(total, (int, float)) and isinstance(count, int) and not isinstance(count, bool):
            self.computes = True
            self.compute.add(count, float(total))
        if not isinstance(step, int) or isinstance(step, bool) or step == self.beat_step:
            return None
        self.beat_step = step
        return step

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class StepWatch:
    """Reads one attempt's steps on this node until its ranks are gone or it is stopped."""

    def __init__(
        self,
        node_id: str,
        specs: Sequence[WorkerSpec],
        policy: ProgressPolicy,
        *,
        report: Callable[[StepsSeen], None],
        kill_hung: Callable[[int, str, float, float], bool],
        clock: Clock,
        spawned_at: Callable[[int, int], float | None] | None = None,
        imported: Callable[[WorkerSpec, RankImports], None] | None = None,
    ) -> None:
        """Call before the ranks start: a heartbeat file left from before is no step.
        ``spawned_at(attempt, rank)``: when (wall clock) the rank's spawn was asked for, for
        its start-up profile (:mod:`elastic.node.probes.startup`), sent with its first step.
        ``imported(spec, imports)`` hears what a rank had imported by its first step."""
        self._node_id = node_id
        self._spawned_at = spawned_at
        self._imported = imported
        self._policy = policy
        self._report = report
        self._kill_hung = kill_hung
        self._clock = clock
        self._attempt = specs[0].attempt if specs else -1
        self._reader: StepReader | None = None
        if policy.read_output:
            pattern = policy.pattern
            self._reader = StepReader() if pattern is None else StepReader.with_user_pattern(compile_user_pattern(pattern))
        self._ranks = [_Rank(s) for s in specs]
        # The Trainer's record, where the built-in patterns read the output and its files are known.
        self._trainer: TrainerStateFiles | None = None
        if policy.read_output and policy.pattern is None and policy.checkpoint_dir is not None:
            self._trainer = TrainerStateFiles(policy.checkpoint_dir, clock)
        before = Look()
        for rank in self._ranks:
            rank.read_heartbeat(before)  # what is there already is the last attempt's
            rank.compute, rank.computes = WindowMean(), False
        self._lock = threading.Lock()  # one reader of the files at a time: the thread, or flush
        self._closed = False
        self._sent_at: float | None = None
        self._fired = False
        self._stopped = threading.Event()
        self._interval_s = _INTERVAL_S

    def start(self, now: float) -> float:
        """The ranks have started; the seconds to the first look."""
        for rank in self._ranks:
            if rank.looked_at is None:
                rank.looked_at = now  # nothing of this attempt was written before
        return _INTERVAL_S

    def stop(self) -> None:
        """No more stalls called from now on (a drain has begun); the watch ends."""
        self._stopped.set()

    def flush(self) -> None:
        """Read what the ranks wrote last and send their latest steps (an attempt that ends).
        Once closed, nothing: a log opened again would be read from its start, and left open."""
        with self._lock:
            if not self._closed:
                self._look(self._clock.monotonic(), Look(), send_due=True, final=True)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for rank in self._ranks:
                rank.close()

    def tick(self, now: float, look: Look) -> float | None:
        """Read the new steps, send them as due, kill the stalled. The seconds to the next look,
        or None: done (no rank of the attempt runs)."""
        if self._stopped.is_set() or not self._ranks:
            return None
        workers = look.workers()
        with self._lock:
            now = self._clock.monotonic()
            grew = self._look(now, look, send_due=not workers, final=not workers)
            stalled = [] if self._fired or self._stopped.is_set() else self._stalled(now, workers)
        if stalled:
            with self._lock:  # the driver hears the steps as they were before the kill
                self._look(self._clock.monotonic(), Look(), send_due=True)
            self._fire(workers, stalled)
        if not workers:
            return None
        self._interval_s = _INTERVAL_S if grew else min(2 * self._interval_s, _QUIET_INTERVAL_S)
        return self._interval_s

    def _look(self, now: float, look: Look, *, send_due: bool, final: bool = False) -> bool:
        """Read every rank's new output and heartbeat; send steps as due. True if a log grew."""
        grew_any, first = False, False
        trainer = self._trainer
        saved = [] if trainer is None else trainer.look(now, force=final)
        for rank in self._ranks:
            since, rank.looked_at = rank.looked_at, now
            if self._reader is not None:
                epochs: list[LoggedEpoch] | None = None if trainer is None else []
                grew, readings = rank.read_output(self._reader, final=final, epochs=epochs)
                grew_any |= grew
                if readings:
                    before = rank.progress.step
                    written = written_at(self._clock, rank.written, since, now)
                    if rank.progress.read(readings, written):
                        first |= before is None
                        rank.timed(written)
                if trainer is not None:
                    first |= self._trainer_steps(rank, trainer.state, saved, epochs, now)
            beat = rank.read_heartbeat(look)
            if beat is not None:
                first |= rank.progress.step is None
                beat_at = written_at(self._clock, rank.beat_written, since, now)
                if rank.progress.saw(beat, beat_at, "heartbeat"):
                    rank.timed(beat_at)
        # A rank's first step time goes at once too: a straggler is named once its steps settle.
        first |= any(not r.timed_sent and r.step_time()[0] is not None for r in self._ranks)
        changed = [r for r in self._ranks if r.progress.step is not None and r.progress.step != r.reported]
        due = send_due or self._sent_at is None or now - self._sent_at >= REPORT_EVERY_S
        if changed and (first or due):
            self._send(now, changed)
        return grew_any

    @staticmethod
    def _trainer_steps(
        rank: _Rank, state: TrainerState | None, saved: list[tuple[float, int]], epochs: list[LoggedEpoch] | None,
        now: float,
    ) -> bool:
        """Take the Trainer's saves and the rank's logged epochs as its steps, in time order; an
        epoch read before any state was known waits for one. True for the rank's first step."""
        if epochs:
            rank.epoch = (epochs[-1], now)
        marks = list(saved)
        if rank.epoch is not None and state is not None:
            (epoch, read_at), rank.epoch = rank.epoch, None
            step = state.step_at(epoch)
            if step is not None:
                marks.append((read_at, step))
        first = False
        for at, step in sorted(marks):
            before = rank.progress.step
            if rank.progress.saw(step, at, TRAINER):
                first |= before is None
                rank.timed(at)
        return first

    def _send(self, now: float, ranks: list[_Rank]) -> None:
        steps = []
        for rank in ranks:
            progress = rank.progress
            assert progress.step is not None and progress.step_at is not None and progress.source is not None
            step_time_s, time_source = rank.step_time()
            rank.timed_sent |= step_time_s is not None
            startup: tuple[tuple[str, float], ...] = ()
            first_step = None
            if rank.reported is None:  # its first step: its start-up up to it goes with it, and which it was
                startup = self._startup(rank.spec, progress.step_at)
                first_step = progress.first_step
            steps.append(RankStep(rank.spec.rank, progress.step, progress.source, progress.step_at,
                                  step_time_s, time_source, startup, first_step))
            rank.reported = progress.step
        self._sent_at = now
        self._report(StepsSeen(self._attempt, self._node_id, tuple(steps), now))

    def _startup(self, spec: WorkerSpec, step_at: float) -> tuple[tuple[str, float], ...]:
        """The rank's start-up phases up to its first step, seen at ``step_at`` (monotonic), and what
        it had imported by then to ``imported``; never an error."""
        try:
            spawned = None if self._spawned_at is None else self._spawned_at(spec.attempt, spec.rank)
            first_step_at = self._clock.time() - (self._clock.monotonic() - step_at)  # onto the wall clock
            phases, imports = rank_startup(spec, spawned_at=spawned, first_step_at=first_step_at)
            if imports is not None and self._imported is not None:
                self._imported(spec, imports)
            return phases
        except Exception:  # noqa: BLE001 - a profile never stops the step watch
            return ()

    def _stalled(self, now: float, workers: list[RunningWorker]) -> list[tuple[RunningWorker, str, float]]:
        policy = self._policy
        if not policy.watches_stalls:
            return []
        alive = {w.spec.rank: w for w in workers}
        saved_at: float | None = None
        looked = False
        stalled = []
        for rank in self._ranks:
            worker = alive.get(rank.spec.rank)
            if worker is None or rank.progress.stalled_for(now, policy) is None:
                continue
            if not looked and policy.checkpoint_dir is not None:  # only now: a walk of the directory
                looked = True
                written = latest_write(policy.checkpoint_dir)
                if written is not None:
                    saved_at = now - max(0.0, self._clock.time() - written)
            silent_s = rank.progress.stalled_for(now, policy, saved_at)
            window_s = rank.progress.window_s(policy)
            if silent_s is not None and window_s is not None:
                stalled.append((worker, stall_reason(silent_s, rank.progress.step, window_s, policy), silent_s))
        return stalled

    def _fire(self, workers: list[RunningWorker], stalled: list[tuple[RunningWorker, str, float]]) -> None:
        self._fired = True
        detected_at = self._clock.monotonic()
        kill_blamed(workers, stalled, what="stalled", clock=self._clock.monotonic, detected_at=detected_at,
                    stopped=self._stopped, kill_hung=self._kill_hung)
