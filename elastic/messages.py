"""What flows between the driver and the controller: observations in, commands out."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Union

from elastic.events import Record
from elastic.failures import Failure, WorkerExit

__all__ = [
    "AttemptLaunched",
    "AttemptPlanned",
    "BackendFailed",
    "Command",
    "FinishRun",
    "LaunchAttempt",
    "NodesUnavailable",
    "Observation",
    "Outcome",
    "PlanAttempt",
    "RunStarted",
    "ScaleCheck",
    "Step",
    "StopRequested",
    "StopWorkers",
    "WorkerExited",
    "WorkersStopped",
]


class Outcome(enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"


# -- observations: what the driver saw -------------------------------------------------


@dataclass(frozen=True)
class RunStarted:
    at: float


@dataclass(frozen=True)
class AttemptPlanned:
    """The backend found the nodes for the attempt and the driver planned its ranks."""

    attempt: int
    world_size: int
    at: float
    resume_step: int | None = None  # the checkpoint the attempt resumes from
    nodes: int = 1


@dataclass(frozen=True)
class ScaleCheck:
    """A periodic look at the cluster while running: usable nodes and the latest checkpoint."""

    attempt: int
    available_nodes: int
    checkpoint_step: int | None
    at: float


@dataclass(frozen=True)
class NodesUnavailable:
    """Fewer nodes than the minimum came within the wait."""

    attempt: int
    needed: int
    seen: int
    at: float


@dataclass(frozen=True)
class AttemptLaunched:
    attempt: int
    world_size: int
    at: float


@dataclass(frozen=True)
class WorkerExited:
    exit: WorkerExit


@dataclass(frozen=True)
class StopRequested:
    """The launcher itself received a stop signal (SIGTERM, SIGINT, SIGHUP)."""

    signum: int
    at: float


@dataclass(frozen=True)
class WorkersStopped:
    attempt: int
    at: float
    checkpoint_step: int | None = None  # the latest complete checkpoint after the drain


@dataclass(frozen=True)
class BackendFailed:
    """The backend can no longer report exits (its event pump died, or the driver lost Ray).

    ``requeue``: the infrastructure failed, not elastic: worth requeueing.
    """

    reason: str
    requeue: bool
    at: float


Observation = Union[
    RunStarted,
    ScaleCheck,
    AttemptPlanned,
    NodesUnavailable,
    AttemptLaunched,
    WorkerExited,
    StopRequested,
    WorkersStopped,
    BackendFailed,
]


# -- commands: what the driver must do -------------------------------------------------


@dataclass(frozen=True)
class PlanAttempt:
    """Wait ``delay_s`` (backoff), then for enough nodes; then plan the attempt's world."""

    attempt: int
    delay_s: float = 0.0


@dataclass(frozen=True)
class LaunchAttempt:
    attempt: int


@dataclass(frozen=True)
class StopWorkers:
    """Send ``signal`` to every worker of the attempt, wait ``grace_s``, then SIGKILL."""

    attempt: int
    signal: int
    grace_s: float


@dataclass(frozen=True)
class FinishRun:
    outcome: Outcome
    exit_status: int
    root_cause: Failure | None
    reason: str


Command = Union[PlanAttempt, LaunchAttempt, StopWorkers, FinishRun]


@dataclass(frozen=True)
class Step:
    """The result of one observation: journal first, then act."""

    records: tuple[Record, ...]
    commands: tuple[Command, ...]


