"""The replayer: injects a schedule's events from outside the launcher, the same way for every launcher.

A :class:`Job` is one launcher's run of the training program, across the requeues a
scheduler would make after its machine or its driver was lost. Its ranks are found
without the launcher's help: each rank registers its pid and its start time
(``train_ddp.register``), and a registered pid counts only while it is alive with that start
time and not stopped. (Not by an environment marker alone: a warm rank of elastic's takes its
command as its process title, which overwrites what ``/proc/PID/environ`` shows.) The machine
going takes the launcher's session, its descendants, every registered rank and every process
still carrying the job's marker (``BENCH_MARK=...``, inherited from the launcher, as
``bench_launchers.py`` finds its ranks). What each kind of event does:

- ``sigkill``: SIGKILL the rank; ``sigstop``: SIGSTOP it (never continued: the launcher
  or the peers' collective timeout must notice); ``exception``: write
  ``BENCH_CONTROL/raise-PID``, which that process takes and raises at its next step (a
  process that dies first never raises it: no later process of the rank inherits it). A rank
  event waits (is deferred) until its rank runs, in a process no earlier event was injected
  into (events close together would otherwise all hit one dying process).
- ``preemption``: the notice: ``BENCH_CONTROL/notice-INDEX`` (the machine's metadata, which
  the program polls) and the launcher's own notice input where it has one (elastic's
  SIGUSR1); at the deadline, if that launcher process still runs, the machine goes. A notice
  waits until the launcher process has run :data:`NOTICE_AFTER_START_S` (a burst's next notice
  would otherwise reach a launcher just requeued, before its interpreter has started).
- ``node_lost``: the machine goes: SIGKILL of all the job's processes, as above.
- ``driver_kill``: SIGKILL of the launcher's process; the scheduler then clears the job's
  processes, as Slurm ends a step whose main process died.
- ``driver_oom``: SIGKILL of the launcher's process alone (the OOM killer, a kill -9): what
  it started lives on. At the requeue, what it left still running is cleared first unless the
  launcher keeps its ranks for the next one (``LauncherSpec.keeps_ranks``: elastic's
  ``--orphan-lease``); torchrun's workers, in sessions of their own, would otherwise train on
  beside the requeued job's.

After the machine or the driver is lost the runner requeues the job (:meth:`Job.start` again).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from bench_launchers import sweep

from goodput.schedule import Event

__all__ = ["NOTICE_AFTER_START_S", "Job", "LauncherSpec", "inject"]

# A notice goes to a launcher that has run this long at least, under every launcher: a scheduler
# signals a running job, not a process being exec'd, and at the compression used (hundreds of
# times) these 0.5 s are minutes of a real run. Sooner, the notice signal of a launcher that has
# one (elastic's SIGUSR1) came 25 ms after its start, inside the interpreter's own start, before
# any of its code could hold the signal, and killed it (a spot burst in the first sweep).
NOTICE_AFTER_START_S = 0.5


@dataclass(frozen=True)
class LauncherSpec:
    """How to run the program under one launcher, and what it takes that others do not."""

    name: str
    flavour: str  # the training program's way to checkpoint: elastic, torchrun, ray
    argv: Callable[[Path, int], list[str]]  # (work dir, requeue number) → the command line
    notice_signal: int | None = None  # the launcher's own notice input, if it has one
    requeue_codes: frozenset[int] = frozenset()  # its exit statuses that ask to be requeued
    keeps_ranks: bool = False  # its ranks outlive its own death for its next run to take over


@dataclass
class Job:
    """One launcher's run across requeues, and what the replayer did to it."""

    spec: LauncherSpec
    work_dir: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    started_at: float = 0.0
    taken: bool = False  # this launcher process was lost to an event: requeue it
    hit: set[tuple[int, int | None]] = field(default_factory=set)  # (pid, start) given an event: no target again
    injected: list[dict[str, Any]] = field(default_factory=list)
    left: set[int] = field(default_factory=set)  # what a launcher that died alone left running

    @property
    def control(self) -> Path:
        return Path(self.env["BENCH_CONTROL"])

    @property
    def marker(self) -> bytes:
        return f"BENCH_MARK={self.env['BENCH_MARK']}".encode()

    def start(self) -> None:
        """Start (or requeue) the launcher in a session of its own; what a launcher that died
        alone left running is cleared first, unless this one takes it over."""
        left, self.left = self.left, set()
        if left and not self.spec.keeps_ranks:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            sweep(self.marker)
        log = open(self.work_dir / f"launcher-{self.starts}.log", "wb")  # noqa: SIM115
        with log:
            self.proc = subprocess.Popen(
                self.spec.argv(self.work_dir, self.starts),
                cwd=self.work_dir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.starts += 1
        self.started_at = time.time()
        self.taken = False

    def rank_pid(self, rank: int) -> int | None:
        """The live, running process of ``rank`` registered since the launcher's last start."""
        try:
            lines = (self.control / "pids.jsonl").read_text().splitlines()
        except FileNotFoundError:
            return None
        for line in reversed(lines):
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if entry["rank"] == rank and entry["t"] >= self.started_at:
                pid = int(entry["pid"])
                alive = _started_at(pid) == entry["start"] and _running(pid)
                return pid if alive and (pid, entry["start"]) not in self.hit else None
        return None

    def registered(self) -> list[int]:
        """Every registered rank process still alive (its pid not reused)."""
        try:
            lines = (self.control / "pids.jsonl").read_text().splitlines(keepends=True)
        except FileNotFoundError:
            return []
        entries = [json.loads(line) for line in lines if line.endswith("\n")]
        return [e["pid"] for e in entries if _started_at(e["pid"]) == e["start"]]

    def descendants(self) -> set[int]:
        """The launcher's processes below it: ranks, warm interpreters, Ray's processes."""
        assert self.proc is not None
        try:
            return {child.pid for child in psutil.Process(self.proc.pid).children(recursive=True)}
        except psutil.Error:
            return set()

    def take_machine(self, doomed: set[int] | None = None) -> None:
        """The machine is gone: SIGKILL the launcher's session and descendants, every registered
        rank, ``doomed``, and every process still carrying the job's marker."""
        assert self.proc is not None
        doomed = set(doomed or ()) | set(self.registered())
        if self.proc.poll() is None:
            doomed |= self.descendants()
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        sweep(self.marker)  # and whatever still carries the job's marker in its environment
        self.taken = True


def _started_at(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None when it is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _running(pid: int) -> bool:
    """Alive and not stopped (a SIGSTOPped rank hangs; it is no target for the next event)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("T", "t", "Z", "X")


def inject(job: Job, index: int, event: Event) -> dict[str, Any] | None:
    """Inject ``event`` now, or None when its target is not there yet (try again later).

    A preemption's deadline is the caller's: the returned line carries ``deadline`` (wall
    clock) and ``instance`` (the launcher start it was given to)."""
    assert job.proc is not None
    line: dict[str, Any] = {"index": index, "kind": event.kind, "rank": event.rank, "at_s": event.at_s, "t": time.time()}
    if event.target == "rank":
        pid = job.rank_pid(event.rank or 0)
        if pid is None:
            return None
        line["pid"] = pid
        job.hit.add((pid, _started_at(pid)))  # a SIGKILL takes a moment, an exception waits for the next step: the next
        # event for this rank waits for the process that replaces this one
        if event.kind == "exception":
            (job.control / f"raise-{pid}").write_text(str(index))
        else:
            os.kill(pid, signal.SIGKILL if event.kind == "sigkill" else signal.SIGSTOP)
    elif event.kind == "preemption":
        if job.proc.poll() is not None or time.time() - job.started_at < NOTICE_AFTER_START_S:
            return None
        (job.control / f"notice-{index}").write_text(str(event.notice_s))
        if job.spec.notice_signal is not None:
            os.kill(job.proc.pid, job.spec.notice_signal)
        line["deadline"] = time.time() + event.notice_s
        line["instance"] = job.starts
    elif event.kind == "node_lost":
        if job.proc.poll() is not None:
            return None
        job.take_machine()
    else:  # driver_kill, driver_oom
        if job.proc.poll() is not None:
            return None
        line["pid"] = job.proc.pid
        below = job.descendants()  # before they are orphaned
        os.kill(job.proc.pid, signal.SIGKILL)
        job.proc.wait()
        if event.kind == "driver_kill":
            job.take_machine(below)  # the scheduler clears the job's processes
        else:
            job.left, job.taken = below | set(job.registered()), True
    job.injected.append(line)
    return line
