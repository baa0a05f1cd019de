"""The fault harness of tests/ray/test_embedded_ray_faults.py: drive an embedded-Ray run into a phase,
SIGKILL its driver there at a random moment, and find what of it is still alive afterwards.

A process is *of the run* when it was in the driver's process tree at any moment before the kill
(sampled every few milliseconds), when it became a descendant of this process since the run
started (pytest is a child subreaper: every orphan of the run lands in its tree), or when its
environment names the run (``ELASTIC_RUN_ID``, carried by ranks, or ``ELASTIC_EMBEDDED_RAY``,
inherited by the embedded cluster's processes). Processes are told apart by pid *and* start time, so a reused
pid is never taken for one of the run's.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from harness import BIN, Launcher, descendants, launcher_env, wait_for

# Every phase of a driver's life in which it can die (issue 26).
PHASES = (
    "connecting",  # before Ray runs: the interpreter, the run directory, the start of the cluster
    "starting the head",  # Ray's head processes appear
    "placing agents",  # the run has started; node agent actors are being placed
    "launching ranks",  # a node agent runs; its ranks are starting
    "running",  # both ranks run (delays within the first second)
    "draining",  # the driver was told to stop: ranks in their grace period
    "shutting down",  # the run finished: agents, Ray and the cluster going away
)
EMBEDDED_MARK = "ELASTIC_EMBEDDED_RAY"
GONE_BOUND_S = 20.0  # leaked processes stay for good; the time to gone is printed, not asserted
SAMPLE_S = 0.03
RANKS = 2
GRACE_S = 2.0


def embedded_env() -> dict[str, str]:
    """No address anywhere: the launcher has to embed Ray."""
    return {k: v for k, v in launcher_env().items() if k != "RAY_ADDRESS"}


@dataclass(frozen=True)
class Seen:
    """One process of the run: its pid, its start time (with the pid, who it is) and what it runs."""

    pid: int
    created: float
    text: str

    def alive(self) -> bool:
        """Still this very process (same start time), and not a zombie."""
        try:
            process = psutil.Process(self.pid)
            return process.create_time() == self.created and process.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def __str__(self) -> str:
        return f"{self.pid} {self.text}"


def _seen(process: psutil.Process) -> Seen | None:
    try:
        with process.oneshot():
            words = process.cmdline() or [process.name()]
            return Seen(process.pid, process.create_time(), " ".join(words)[:120])
    except psutil.Error:
        return None


class TreeWatch:
    """Samples the driver's process tree until told to stop; every process ever seen in it."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[tuple[int, float], Seen] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(SAMPLE_S)

    def sample(self) -> None:
        try:
            tree = psutil.Process(self.root).children(recursive=True)
        except psutil.Error:
            return
        for process in tree:
            if (seen := _seen(process)) is not None:
                with self._lock:  # the latest title: a Ray worker retitles itself (ray::RayNodeAgent)
                    self.seen[(seen.pid, seen.created)] = seen

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sample()  # one last look, right after the kill

    def find(self, predicate: Callable[[Seen], bool]) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen.values() if predicate(s) and s.alive()]


def _environment_names(process: psutil.Process, run_id: str) -> bool:
    try:
        env = process.environ()
    except psutil.Error:
        return False
    return run_id in (env.get("ELASTIC_RUN_ID"), env.get(EMBEDDED_MARK))


@dataclass
class Kill:
    """One driver SIGKILLed in a phase: when, and what of its run outlived it."""

    phase: str
    delay_s: float
    reached: bool = True  # False: the run ended before the phase was reached (nothing to kill there)
    left: list[Seen] = field(default_factory=list)
    gone_after_s: float | None = None  # from the SIGKILL to the last of the run's processes gone
    killed_at: float = field(default_factory=time.monotonic)

    def __str__(self) -> str:
        gone = f"gone after {self.gone_after_s:.1f} s" if self.gone_after_s is not None else "NOT gone"
        when = f"{self.delay_s:.2f} s in" if self.reached else "none: the driver ended on its own first"
        text = f"kill in {self.phase!r} {when}: {gone}"
        return text + "".join(f"\n    left: {s}" for s in self.left)


class FaultRun:
    """One embedded-Ray launcher, driven to a phase and SIGKILLed there."""

    def __init__(self, launcher: Launcher, tmp_path: Path, rng: random.Random, run_id: str) -> None:
        self.launcher = launcher
        self.tmp_path = tmp_path
        self.rng = rng
        self.run_id = run_id
        self.before = descendants()
        self.ready = tmp_path / "ready"
        self.process: subprocess.Popen[bytes] | None = None
        self.watch: TreeWatch | None = None

    def start(self, command: list[str], *options: object) -> subprocess.Popen[bytes]:
        self.process = self.launcher.start(
            "--backend", "ray", "--nproc-per-node", RANKS, "--run-id", self.run_id,
            "--grace-period", GRACE_S, *options, command=command, env=embedded_env(),
        )
        self.watch = TreeWatch(self.process.pid)
        return self.process

    # -- reaching a phase ------------------------------------------------------------------

    def _running(self) -> bool:
        assert self.process is not None
        return self.process.poll() is None

    def _wait(self, what: str, predicate: Callable[[], bool], timeout_s: float = 90.0) -> bool:
        """Wait for ``predicate``; False when the launcher ended first."""
        deadline_at = time.monotonic() + timeout_s
        while time.monotonic() < deadline_at:
            if predicate():
                return True
            if not self._running():
                return False
            time.sleep(0.01)
        pytest.fail(f"timed out after {timeout_s}s waiting for {what}")

    def _has(self, needle: str) -> bool:
        assert self.watch is not None
        return bool(self.watch.find(lambda s: needle in s.text))

    def journal_has(self, event: str) -> bool:
        journal = self.launcher.run_dir / "journal.jsonl"
        try:
            return f'"event":"{event}"' in journal.read_text()
        except FileNotFoundError:
            return False

    def ranks(self) -> list[Seen]:
        assert self.watch is not None
        return self.watch.find(lambda s: "catch_sigterm.py" in s.text or "prints_steps.py" in s.text)

    def kill_in(self, phase: str) -> Kill:
        """Start the run for ``phase``, reach it, wait a random moment, SIGKILL the driver by pid."""
        if phase == "shutting down":
            self.start([sys.executable, str(BIN / "prints_steps.py"), "plain", "steps", "10"])
        else:
            self.start([sys.executable, str(BIN / "catch_sigterm.py"), str(self.ready)])
        assert self.process is not None
        window = {"connecting": 1.0, "starting the head": 2.0, "placing agents": 0.4, "launching ranks": 0.4,
                  "running": 1.0, "draining": GRACE_S + 0.5, "shutting down": 1.5}[phase]
        reached = {
            "connecting": lambda: True,
            "starting the head": lambda: self._wait("a Ray head process", lambda: self._has("gcs_server")),
            "placing agents": lambda: self._wait("run_started", lambda: self.journal_has("run_started")),
            "launching ranks": lambda: self._wait("a node agent", lambda: self._has("RayNodeAgent")),
            "running": lambda: self._wait("both ranks", lambda: len(self.ranks()) >= RANKS),
            "draining": lambda: self._wait("both ranks", lambda: len(self.ranks()) >= RANKS),
            "shutting down": lambda: self._wait("run_finished", lambda: self.journal_has("run_finished")),
        }[phase]()
        delay_s = self.rng.uniform(0.0, window)
        if reached and phase == "draining":
            os.kill(self.process.pid, signal.SIGTERM)  # by pid: the launcher this test started
        if reached:
            time.sleep(delay_s)
        killed_at = time.monotonic()
        if self._running():
            os.kill(self.process.pid, signal.SIGKILL)  # by pid: the launcher this test started
        else:
            reached = False  # it ended on its own first: what is left is checked all the same
        self.process.wait(30)
        assert self.watch is not None
        self.watch.stop()
        return Kill(phase, delay_s, reached, killed_at=killed_at)

    # -- what is left ----------------------------------------------------------------------

    def of_the_run(self) -> list[Seen]:
        """Every live process of the run (see the module's docstring)."""
        assert self.watch is not None
        found = {(s.pid, s.created): s for s in self.watch.seen.values() if s.alive()}
        for pid in descendants() - self.before:
            try:
                process = psutil.Process(pid)
            except psutil.Error:
                continue
            if (seen := _seen(process)) is not None and seen.alive():
                found.setdefault((seen.pid, seen.created), seen)
        for process in psutil.process_iter():
            if process.pid != os.getpid() and _environment_names(process, self.run_id):
                if (seen := _seen(process)) is not None and seen.alive():
                    found.setdefault((seen.pid, seen.created), seen)
        return sorted(found.values(), key=lambda s: s.pid)

    def settle(self, kill: Kill, bound_s: float = GONE_BOUND_S) -> Kill:
        """Wait (bounded) for the run's processes to go; note what did not, and kill it by pid."""
        while True:
            left = self.of_the_run()
            if not left:
                kill.gone_after_s = time.monotonic() - kill.killed_at
                return kill
            if time.monotonic() - kill.killed_at >= bound_s:
                break
            time.sleep(0.1)
        kill.left = left
        for seen in left:  # by pid, checked against its start time (psutil refuses a reused pid)
            try:
                psutil.Process(seen.pid).kill() if seen.alive() else None
            except psutil.Error:
                pass
        wait_for(lambda: not any(s.alive() for s in left), "the leftovers killed by pid", 10)
        return kill


def random_source(request: pytest.FixtureRequest) -> random.Random:
    """A generator seeded from ``ELASTIC_FAULT_SEED`` or at random; the seed is printed to replay a run."""
    seed = int(os.environ.get("ELASTIC_FAULT_SEED") or random.randrange(1 << 30))
    print(f"\n{request.node.name}: ELASTIC_FAULT_SEED={seed}")
    return random.Random(f"{seed}-{request.node.name}")
