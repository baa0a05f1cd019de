"""Where everything of a run lives under its run directory: path arithmetic only."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from elastic.worker.bootstrap.jax_cache_note import NOTE_SUFFIX

__all__ = ["RunLayout"]


@dataclass(frozen=True)
class RunLayout:
    """Paths of one run directory (DESIGN §9); nothing here touches the disk."""

    root: Path

    @property
    def journal(self) -> Path:
        return self.root / "journal.jsonl"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def report(self) -> Path:
        return self.root / "report.json"

    @property
    def lock(self) -> Path:
        """Locked (flock) by the run's driver for as long as it lives."""
        return self.root / "driver.lock"

    @property
    def embedded_ray_record(self) -> Path:
        """The embedded Ray's address and processes, written by its head as they change
        (``elastic.backends.ray.cluster.head``); a driver taking the run over stops what is still alive."""
        return self.root / "embedded-ray.json"

    @property
    def keeper_record(self) -> Path:
        """The spawner that keeps this host's ranks when the driver dies (``--orphan-lease``) and
        its ranks (pid, start time, boot id), written by the driver as they start
        (``elastic.node.spawner.kept``); a driver taking the run over stops what is still alive."""
        return self.root / "keeper.json"

    @property
    def embedded_ray_log(self) -> Path:
        """The embedded Ray's head process: its output, Ray's start-up messages among it."""
        return self.root / "embedded-ray.log"

    # Cached: a relaunch of 8,000 ranks asks for the same directory three times per rank.
    @functools.lru_cache(maxsize=4)
    def attempt_dir(self, attempt: int) -> Path:
        return self.root / f"attempt-{attempt}"

    def rank_log(self, attempt: int, rank: int) -> Path:
        return self.attempt_dir(attempt) / f"rank-{rank}.log"

    def error_file(self, attempt: int, rank: int) -> Path:
        return self.attempt_dir(attempt) / f"rank-{rank}.error.json"

    def heartbeat_file(self, attempt: int, rank: int) -> Path:
        return self.attempt_dir(attempt) / f"rank-{rank}.heartbeat"

    def preemption_file(self, attempt: int, rank: int) -> Path:
        """Written by the rank's node agent on a preemption notice (``ELASTIC_PREEMPTION_FILE``)."""
        return self.attempt_dir(attempt) / f"rank-{rank}.preempt"

    def inplace_notice(self, attempt: int, rank: int) -> Path:
        """Written by the rank's node agent when its generation of the process group is over
        (``ELASTIC_INPLACE_NOTICE``, :mod:`elastic.worker.inplace.notice`)."""
        return self.attempt_dir(attempt) / f"rank-{rank}.inplace"

    def spare_notice(self, attempt: int, node_rank: int, index: int) -> Path:
        """A warm spare's notice file: the lost rank's place it is handed (``--spares``)."""
        return self.attempt_dir(attempt) / f"spare-{node_rank}-{index}.inplace"

    def spare_log(self, attempt: int, node_rank: int, index: int) -> Path:
        """A warm spare's output until it takes a place (then it goes on in this file)."""
        return self.attempt_dir(attempt) / f"spare-{node_rank}-{index}.log"

    def store_host_log(self, attempt: int) -> Path:
        """The output of the process that hosts the attempt's in-place store (``--spares``)."""
        return self.attempt_dir(attempt) / "inplace-store.log"

    def store_host_address(self, attempt: int) -> Path:
        """``host:port`` of the attempt's in-place store, written by its host once it listens."""
        return self.attempt_dir(attempt) / "inplace-store.address"

    def jax_cache_note(self, attempt: int, rank: int) -> Path:
        """Which cache the rank's JAX compiled into, written by the rank bootstrap (beside the heartbeat file)."""
        return self.attempt_dir(attempt) / f"rank-{rank}{NOTE_SUFFIX}"

    def signals_file(self, attempt: int, rank: int) -> Path:
        """Where the rank bootstrap writes the stop signals a rank caught itself (``ELASTIC_SIGNALS_FILE``)."""
        return self.attempt_dir(attempt) / f"rank-{rank}.signals"

    def startup_file(self, attempt: int, rank: int) -> Path:
        """Where the rank bootstrap marks the rank's start-up (``ELASTIC_STARTUP_FILE``)."""
        return self.attempt_dir(attempt) / f"rank-{rank}.startup"

    def stacks_dir(self, attempt: int) -> Path:
        return self.attempt_dir(attempt) / "stacks"
