"""A failure schedule as data: seeded events (when, whom, what), their JSON form and time compression. Pure.

An event's time is seconds from the run's start. A schedule is written in the
seconds of the cluster it imitates (``compression`` 1) and compressed to the
seconds of this machine by :meth:`Schedule.compressed`, which divides every
duration it holds (event times, notices, the mean time between failures, the
checkpoint cost and interval) by one factor, so that every ratio between them
is kept: mean time between failures over the checkpoint interval, notice over
checkpoint cost. Step time is the training program's: the runner picks the
factor that gives the mean time between failures in steps asked for.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

__all__ = ["KINDS", "TARGETS", "Event", "Schedule"]

KINDS = (
    "sigkill",  # a rank's process dies at once (a GPU fell off the bus)
    "sigstop",  # a rank hangs: SIGSTOP, never continued (a link down, a wedged collective)
    "exception",  # the step raises in one rank (a software bug)
    "preemption",  # the job's machine goes after a notice of notice_s seconds
    "node_lost",  # the job's machine goes without notice
    "driver_kill",  # the launcher's own process is SIGKILLed, and the scheduler clears its job
    "driver_oom",  # the launcher's own process alone is SIGKILLed (the OOM killer, a kill -9)
)
TARGETS = ("rank", "node", "driver")
_TARGET_OF = {
    "sigkill": "rank",
    "sigstop": "rank",
    "exception": "rank",
    "preemption": "node",
    "node_lost": "node",
    "driver_kill": "driver",
    "driver_oom": "driver",
}


@dataclass(frozen=True)
class Event:
    """One injected failure: at ``at_s``, ``kind`` against ``target`` (rank ``rank`` for a rank event)."""

    at_s: float
    kind: str
    rank: int | None = None
    notice_s: float = 0.0
    burst: int | None = None  # events of one burst share its number
    planned: bool = False
    cause: str = ""  # what it stands for (``faulty GPU``, ``spot reclaim``): for the reader

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown event kind {self.kind!r}; known: {', '.join(KINDS)}")
        if (self.rank is not None) != (self.target == "rank"):
            raise ValueError(f"{self.kind}: a rank is named for rank events, and only for them")
        if self.notice_s < 0 or (self.notice_s and self.kind != "preemption"):
            raise ValueError(f"{self.kind}: only a preemption has a notice, of 0 s or more")

    @property
    def target(self) -> str:
        """``rank``, ``node`` (the job's machine) or ``driver`` (the launcher)."""
        return _TARGET_OF[self.kind]

    def describe(self) -> str:
        """The event in a few words: ``sigkill rank 1``, ``preemption node (notice 0.4 s)``."""
        who = f"rank {self.rank}" if self.rank is not None else self.target
        notice = f" (notice {self.notice_s:g} s)" if self.kind == "preemption" else ""
        return f"{self.kind} {who}{notice}"


@dataclass(frozen=True)
class Schedule:
    """A seeded list of events over ``duration_s``, and the cluster figures its times are scaled with."""

    mix: str
    seed: int
    duration_s: float
    mtbf_s: float  # the mix's mean time between failures, in the schedule's seconds
    checkpoint_interval_s: float  # the mix's checkpoint interval
    checkpoint_cost_s: float  # what one checkpoint costs the mix's job
    events: tuple[Event, ...] = ()
    compression: float = 1.0  # real seconds per schedule second
    nranks: int = 2
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        times = [event.at_s for event in self.events]
        if times != sorted(times):
            raise ValueError("a schedule's events are in time order")
        if any(not 0 <= t <= self.duration_s for t in times):
            raise ValueError(f"every event falls within the schedule's {self.duration_s:g} s")
        if any(e.rank is not None and not 0 <= e.rank < self.nranks for e in self.events):
            raise ValueError(f"every rank event names one of the {self.nranks} ranks")

    def compressed(self, factor: float) -> Schedule:
        """The same schedule with every duration divided by ``factor`` (above 1: faster)."""
        if factor <= 0:
            raise ValueError("a compression factor is above 0")
        return replace(
            self,
            duration_s=self.duration_s / factor,
            mtbf_s=self.mtbf_s / factor,
            checkpoint_interval_s=self.checkpoint_interval_s / factor,
            checkpoint_cost_s=self.checkpoint_cost_s / factor,
            events=tuple(
                replace(e, at_s=e.at_s / factor, notice_s=e.notice_s / factor) for e in self.events
            ),
            compression=self.compression * factor,
        )

    def ratios(self, step_s: float) -> dict[str, float]:
        """The ratios a compression keeps or sets: in steps of ``step_s`` and against each other."""
        notices = [e.notice_s for e in self.events if e.kind == "preemption"]
        ratios = {
            "mtbf_steps": self.mtbf_s / step_s,
            "checkpoint_interval_over_mtbf": self.checkpoint_interval_s / self.mtbf_s,
            "checkpoint_cost_over_interval": self.checkpoint_cost_s / self.checkpoint_interval_s,
        }
        if notices and self.checkpoint_cost_s:
            ratios["median_notice_over_checkpoint_cost"] = sorted(notices)[len(notices) // 2] / self.checkpoint_cost_s
        return ratios

    def to_json(self) -> str:
        """The schedule as one JSON document."""
        return json.dumps(asdict(self), indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        """Read what :meth:`to_json` wrote."""
        data = json.loads(text)
        data["events"] = tuple(Event(**event) for event in data["events"])
        return cls(**data)
