"""Fakes for testing code built on elastic: a clock, a backend, captured events."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Collection, Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import structlog.contextvars
import structlog.testing

from elastic.backends.protocol import BackendFault, ExitSink, NodeDraining, NotEnoughNodes
from elastic.backends.ray.agents.agent import LaunchFailure, RayNodeAgent
from elastic.core.diagnosis.preflight import NodeCommand, NodeCommandResult
from elastic.core.failures import WorkerExit
from elastic.core.launch.spec import RankStarted, WorkerSpec
from elastic.core.messages import RankSilence, RankStep, StepsSeen
from elastic.core.rank_ends import HungRank
from elastic.core.launch.plan import NodeSlot, order_nodes
from elastic.node.supervisor import LaunchError

__all__ = [
    "DiesInLaunchRayNodeAgent",
    "DiesOnCloseRayNodeAgent",
    "FailsToStartRayNodeAgent",
    "FakeBackend",
    "FakeClock",
    "ReplyLostOnceRayNodeAgent",
    "SlowToStartRayNodeAgent",
    "UnavailableOnceRayNodeAgent",
    "capture_events",
]


class FakeClock:
    """A clock that moves only when told to: timeouts become instant in tests."""

    def __init__(self, start: float = 1000.0, wall_start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._wall_offset = wall_start - start
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        with self._lock:
            return self._now

    def time(self) -> float:
        return self.monotonic() + self._wall_offset

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


@dataclass
class FakeBackend:
    """A backend with no processes: workers "run" until the test says they exit.

    ``stop_workers`` ends every live worker as if it died of the stop signal;
    ``fail_launch_rank`` makes ``launch`` raise a launch failure for that rank;
    ``warm_ranks`` are the ranks ``launch`` says started warm (``--prewarm``); ``launch`` gives
    rank R the pid 10000 + R.
    ``kill_exit_hung`` ends the live ranks asked for as killed hung at exit and
    reports what was seen of each: ``seen_at_kill``'s entry for it if there is one,
    with ``declared_done`` for the ranks in ``finished``. ``silences`` reports
    the live ranks of ``silent`` (rank -> seconds since its last sign of life, and
    which sign) and leaves the others out: they count as silent.
    ``run_on_nodes`` (``--preflight``) records each call's commands in ``commands_run`` and
    answers from ``preflight_exits`` (node -> exit code; 0 for a node not named).
    """

    nodes: list[NodeSlot] = field(default_factory=lambda: [NodeSlot("fake-node", "127.0.0.1", 2)])
    clock: FakeClock = field(default_factory=FakeClock)
    fail_launch_rank: int | None = None
    warm_ranks: frozenset[int] = frozenset()
    launched: list[tuple[WorkerSpec, ...]] = field(default_factory=list)
    helpers: list[tuple[WorkerSpec, ...]] = field(default_factory=list)  # launch's helpers (--spares), per call
    stops: list[tuple[int, float]] = field(default_factory=list)
    collateral_stops: list[bool] = field(default_factory=list)  # each stop's ``collateral``, in order
    killed: int = 0
    closed: bool = False
    ages: dict[int, float] = field(default_factory=dict)  # what heartbeat_ages() reports
    finished: set[int] = field(default_factory=set)  # ranks that "called" heartbeat(done=True)
    seen_at_kill: dict[int, HungRank] = field(default_factory=dict)  # what kill_exit_hung reports of a rank
    silent: dict[int, tuple[float, str]] = field(default_factory=dict)  # what silences() reports
    exit_hung_kills: list[tuple[int, tuple[int, ...], str]] = field(default_factory=list)
    announced: list[tuple[int, str]] = field(default_factory=list)  # announce_preemption calls
    left_out: list[tuple[str, ...]] = field(default_factory=list)  # acquire_nodes' leave_out, per call
    tails: dict[int, tuple[str, ...]] = field(default_factory=dict)  # rank -> its last lines at a failed exit
    preflight_exits: dict[str, int] = field(default_factory=dict)  # node -> its --preflight's exit code
    commands_run: list[tuple[NodeCommand, ...]] = field(default_factory=list)  # run_on_nodes' commands, per call
    _on_exit: ExitSink | None = None
    _live: dict[int, WorkerSpec] = field(default_factory=dict)
    _next_port: int = 20000
    _launched_event: threading.Condition = field(default_factory=threading.Condition)

    def start(self, on_exit: ExitSink) -> None:
        self._on_exit = on_exit

    def acquire_nodes(
        self,
        previous: Sequence[str],
        min_nodes: int,
        max_nodes: int,
        timeout_s: float,
        cancel: threading.Event,
        leave_out: Collection[str] = (),
    ) -> Sequence[NodeSlot]:
        """The fake's ``nodes`` but ``leave_out``, in stable order; too few fails at once (no real wait)."""
        self.left_out.append(tuple(leave_out))
        usable = [n for n in self.nodes if n.node_id not in leave_out]
        if len(usable) < min_nodes:
            raise NotEnoughNodes(min_nodes, len(usable))
        return order_nodes(previous, usable, max_nodes)

    def cluster_address(self) -> str | None:
        return None

    def run_on_nodes(self, commands: Sequence[NodeCommand], timeout_s: float) -> tuple[NodeCommandResult, ...]:
        self.commands_run.append(tuple(commands))
        return tuple(
            NodeCommandResult(c.node, exit_code=self.preflight_exits.get(c.node, 0),
                              output=(f"preflight on {c.node}",))
            for c in commands
        )

    def available_nodes(self) -> int:
        """The fake's ``nodes`` but those ever left out (Ray quarantines them for the run)."""
        gone = {node for leave_out in self.left_out for node in leave_out}
        return sum(1 for n in self.nodes if n.node_id not in gone)

    def free_ports(self, node: NodeSlot, count: int) -> Sequence[int]:
        ports = list(range(self._next_port, self._next_port + count))
        self._next_port += count
        return ports

    def launch(self, specs: Sequence[WorkerSpec], helpers: Sequence[WorkerSpec] = ()) -> dict[int, RankStarted]:
        with self._launched_event:
            self.launched.append(tuple(specs))
            self.helpers.append(tuple(helpers))
            for spec in specs:
                if spec.rank == self.fail_launch_rank:
                    self._launched_event.notify_all()
                    raise LaunchError(spec.rank, spec.argv[0], 127, "command not found")
                self._live[spec.rank] = spec
            self._launched_event.notify_all()
        return {s.rank: RankStarted(10_000 + s.rank, 0 if s.rank in self.warm_ranks else None) for s in specs}

    def stop_workers(self, signum: int, grace_s: float, *, collateral: bool = False) -> None:
        self.stops.append((signum, grace_s))
        self.collateral_stops.append(collateral)
        for rank in sorted(self._live):
            self.exit(rank, -signum)

    def announce_preemption(self, attempt: int, notice: str) -> None:
        self.announced.append((attempt, notice))

    def silences(self, attempt: int) -> Sequence[RankSilence]:
        return tuple(
            RankSilence(rank, *self.silent[rank])
            for rank, spec in sorted(self._live.items())
            if spec.attempt == attempt and rank in self.silent
        )

    def kill_exit_hung(
        self, attempt: int, ranks: Sequence[int], reason: str, detected_at: float
    ) -> tuple[HungRank, ...]:
        self.exit_hung_kills.append((attempt, tuple(ranks), reason))
        live = [r for r in ranks if r in self._live and self._live[r].attempt == attempt]
        seen = tuple(
            replace(self.seen_at_kill.get(r, HungRank(r)), declared_done=r in self.finished) for r in live
        )
        for rank in live:
            spec = self._live.pop(rank)
            assert self._on_exit is not None
            self._on_exit(
                WorkerExit(
                    attempt=attempt,
                    rank=rank,
                    node=spec.node_id,
                    returncode=-signal.SIGKILL,
                    observed_at=detected_at,
                    hung=f"{reason}; no stack dump asked for",
                )
            )
        return seen

    def kill_workers(self) -> None:
        self.killed += 1
        for rank in sorted(self._live):
            self.exit(rank, -signal.SIGKILL)

    def heartbeat_ages(self) -> dict[int, float]:
        """The ``ages`` a test set, for the workers that are live."""
        return {rank: age for rank, age in self.ages.items() if rank in self._live}

    def close(self) -> None:
        self.closed = True

    # -- driving the fake from a test ------------------------------------------------

    def wait_for_attempt(self, attempt: int, timeout_s: float = 10.0) -> tuple[WorkerSpec, ...]:
        """Block until the driver has launched ``attempt``; returns its specs."""
        with self._launched_event:
            if not self._launched_event.wait_for(
                lambda: len(self.launched) > attempt, timeout=timeout_s
            ):
                raise TimeoutError(f"attempt {attempt} was not launched within {timeout_s}s")
            return self.launched[attempt]

    def lose_node(self, node_id: str) -> None:
        """The node dies: it leaves ``nodes`` and its live workers are reported lost."""
        self.nodes = [n for n in self.nodes if n.node_id != node_id]
        for rank, spec in sorted(self._live.items()):
            if spec.node_id == node_id:
                del self._live[rank]
                assert self._on_exit is not None
                self._on_exit(
                    WorkerExit(
                        attempt=spec.attempt,
                        rank=rank,
                        node=node_id,
                        returncode=None,
                        observed_at=self.clock.monotonic(),
                        node_lost=f"node {node_id} lost",
                    )
                )

    def drain_node(self, node_id: str, deadline_in_s: float | None = 30.0) -> None:
        """The node is being drained (as Ray marks one before a spot node goes): it leaves
        ``nodes`` for placement, and a :class:`NodeDraining` for its attempt is reported."""
        self.nodes = [n for n in self.nodes if n.node_id != node_id]
        attempts = [spec.attempt for spec in self._live.values() if spec.node_id == node_id]
        assert self._on_exit is not None and attempts, f"no live rank on {node_id}"
        deadline_at = None if deadline_in_s is None else self.clock.monotonic() + deadline_in_s
        self._on_exit(NodeDraining(node_id, max(attempts), deadline_at, len(self.nodes)))

    def fault(self, reason: str, *, requeue: bool = False) -> None:
        """The backend can no longer report exits (as when a Ray event pump dies)."""
        assert self._on_exit is not None
        self._on_exit(BackendFault(reason, requeue))

    def report_steps(self, step: int, step_times: Mapping[int, float], source: str = "interval") -> None:
        """Each node reports its live ranks at ``step`` with these step times (seconds by rank),
        as a node's step watch does once their windows are full."""
        assert self._on_exit is not None
        by_node: dict[str, list[RankStep]] = {}
        attempts = {spec.attempt for spec in self._live.values()}
        for rank, spec in sorted(self._live.items()):
            if rank in step_times:
                by_node.setdefault(spec.node_id, []).append(
                    RankStep(rank, step, "output", self.clock.monotonic(), step_times[rank], source)
                )
        for node_id, steps in by_node.items():
            self._on_exit(StepsSeen(max(attempts), node_id, tuple(steps), self.clock.monotonic()))

    def exit(
        self, rank: int, returncode: int, log_tail: Sequence[str] = (), error_message: str | None = None
    ) -> None:
        """Make a live worker exit with a Popen-style return code, having printed ``log_tail``
        (its last lines; the stop's exits carry ``tails[rank]``) and written ``error_message``."""
        spec = self._live.pop(rank)
        assert self._on_exit is not None
        self._on_exit(
            WorkerExit(
                attempt=spec.attempt,
                rank=rank,
                node=spec.node_id,
                returncode=returncode,
                observed_at=self.clock.monotonic(),
                log_tail=tuple(log_tail or self.tails.get(rank, ())) if returncode != 0 else (),
                error_message=error_message,
            )
        )


@contextmanager
def capture_events() -> Iterator[list[MutableMapping[str, Any]]]:
    """Collect structlog event dicts emitted inside the block (assert on these), with
    the context bound by ``structlog.contextvars`` (the run's ``run_id``) merged in."""
    with structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars]) as events:
        yield events


class UnavailableOnceRayNodeAgent(RayNodeAgent):
    """A node agent whose first ``launch`` fails as if the actor were briefly unreachable."""

    def __init__(self, node_id: str) -> None:
        super().__init__(node_id)
        self._failed = False

    def launch(
        self, specs: Sequence[WorkerSpec], echo_ranks: Collection[int] | None
    ) -> LaunchFailure | dict[int, RankStarted]:
        if not self._failed:
            self._failed = True
            import ray.exceptions  # only the Ray tests use this fake

            raise ray.exceptions.ActorUnavailableError("injected: actor briefly unavailable", None)
        return super().launch(specs, echo_ranks)


class DiesOnCloseRayNodeAgent(RayNodeAgent):
    """A node agent whose process dies when asked to close: teardown meets a dead actor."""

    def close(self) -> None:
        super().close()
        os._exit(1)


class FailsToStartRayNodeAgent(RayNodeAgent):
    """A node agent whose ``__init__`` raises, as when its node cannot import ``elastic``."""

    def __init__(self, node_id: str) -> None:
        raise ModuleNotFoundError("injected: No module named 'elastic' on this node")


class ReplyLostOnceRayNodeAgent(RayNodeAgent):
    """A node agent whose first ``launch`` runs, then its answer is lost on the way
    (``ActorUnavailableError``): the driver's retry must get the same result."""

    def __init__(self, node_id: str) -> None:
        super().__init__(node_id)
        self._lost = False

    def launch(
        self, specs: Sequence[WorkerSpec], echo_ranks: Collection[int] | None
    ) -> LaunchFailure | dict[int, RankStarted]:
        result = super().launch(specs, echo_ranks)
        if not self._lost:
            self._lost = True
            import ray.exceptions  # only the Ray tests use this fake

            raise ray.exceptions.ActorUnavailableError("injected: the answer was lost", None)
        return result


class SlowToStartRayNodeAgent(RayNodeAgent):
    """A node agent whose ``__init__`` takes a minute, as on a node too loaded to start it."""

    def __init__(self, node_id: str) -> None:
        time.sleep(60)
        super().__init__(node_id)


class DiesInLaunchRayNodeAgent(RayNodeAgent):
    """The agent of group rank 1 dies in the middle of attempt 0's launch, as if its node had."""

    def launch(
        self, specs: Sequence[WorkerSpec], echo_ranks: Collection[int] | None
    ) -> LaunchFailure | dict[int, RankStarted]:
        if specs and specs[0].attempt == 0 and specs[0].env.get("GROUP_RANK") == "1":
            os._exit(1)
        return super().launch(specs, echo_ranks)
