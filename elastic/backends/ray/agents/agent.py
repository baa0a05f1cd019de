"""The node agent as a Ray actor: a mailbox around :class:`NodeAgent`; no Ray import.

The Ray backend wraps :class:`RayNodeAgent` with ``ray.remote`` and pins one
per node. Exits and console lines wait here and the driver long-polls them
with :meth:`RayNodeAgent.next_events`, so an exit reaches the driver one RPC
after it happens. Exits have their own channel and always go first; console
lines are bounded by the memory they hold (16 MiB a node), the oldest dropped
(and counted, and logged by the driver) when the driver falls behind. The actor runs several calls at once: a stop is served while a poll
is waiting.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Collection, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from elastic.core.diagnosis.preflight import NodeCommand, NodeCommandResult
from elastic.core.failures import WorkerExit
from elastic.core.messages import HelperEnded, RankSilence, SignOfLife, SparesStarted, StepsSeen
from elastic.core.rank_ends import HungRank
from elastic.node.probes.gpus import detect_gpus
from elastic.node.agent import NodeAgent
from elastic.core.launch.spec import RankStarted, WorkerSpec
from elastic.core.launch.plan import GpuVendor
from elastic.node.supervisor import LaunchError

__all__ = ["PENDING_LINES_BYTES", "AgentEvents", "LaunchFailure", "NodeDescription", "RayNodeAgent"]

# Console lines waiting for the driver are bounded by the memory they hold, not by their
# count: a line can be 64 KiB (the log follower's cut), so 10,000 lines could be 640 MiB
# on every node. Beyond this the oldest waiting lines are dropped (and counted).
PENDING_LINES_BYTES = 16 << 20
_MAX_BATCH_BYTES = 1 << 20  # console lines in one answer of next_events (one line at least)
_MAX_BATCH_LINES = 1000
_LINE_ENTRY_BYTES = sys.getsizeof((0, "")) + 8  # what a queued line costs beyond its text
_LAUNCHES_KEPT = 4  # attempts whose launch results are remembered
_NOT_EXECUTABLE_STATUS = 126


@dataclass(frozen=True)
class NodeDescription:
    node_id: str
    hostname: str
    pid: int
    gpu_vendor: GpuVendor
    gpu_ids: tuple[str, ...]


@dataclass(frozen=True)
class LaunchFailure:
    """A :class:`LaunchError` as a value (exceptions do not cross actors cleanly)."""

    rank: int
    argv0: str
    returncode: int
    reason: str

    def to_error(self) -> LaunchError:
        return LaunchError(self.rank, self.argv0, self.returncode, self.reason)


@dataclass(frozen=True)
class AgentEvents:
    exits: tuple[WorkerExit, ...] = ()
    lines: tuple[tuple[int, str], ...] = ()
    lines_dropped: int = 0  # console lines dropped since the previous answer
    # Attempts' first signs of life and ranks' steps, stamped on the agent's clock.
    alive: tuple[SignOfLife | StepsSeen, ...] = ()
    sent_at: float = 0.0  # the agent's clock when it answered: the driver restamps ``alive`` by it


def _line_bytes(line: str) -> int:
    """The memory a waiting console line holds: its text object and its queue entry."""
    return sys.getsizeof(line) + _LINE_ENTRY_BYTES


class RayNodeAgent:
    """One per node; the driver owns it and nothing restarts it but the driver."""

    def __init__(self, node_id: str) -> None:
        self._node_id = node_id
        self._events = threading.Condition()
        self._exits: list[WorkerExit] = []
        self._lines: deque[tuple[int, str]] = deque()
        self._lines_bytes = 0  # the memory the waiting lines hold, as _line_bytes counts it
        self._lines_dropped = 0
        self._alive: list[SignOfLife | StepsSeen] = []
        self._agent = NodeAgent(node_id, self._on_exit, self._on_line, on_alive=self._on_alive)
        self._launch_lock = threading.Lock()
        self._launches: dict[int, Future[LaunchFailure | dict[int, RankStarted]]] = {}

    def describe(self) -> NodeDescription:
        # Ray hides every GPU from a num_gpus=0 actor through its own
        # CUDA_VISIBLE_DEVICES; what the node has is what the driver's ranks get.
        env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")}
        vendor, ids = detect_gpus(env)
        return NodeDescription(self._node_id, socket.gethostname(), os.getpid(), vendor, ids)

    def free_ports(self, host: str, count: int) -> list[int]:
        return self._agent.free_ports(host, count)

    def run_command(self, command: NodeCommand, timeout_s: float) -> NodeCommandResult:
        """``--preflight`` on this node (a threaded actor: the event pump's polls go on meanwhile)."""
        return self._agent.run_command(command, timeout_s)

    def launch(
        self, specs: Sequence[WorkerSpec], echo_ranks: Collection[int] | None
    ) -> LaunchFailure | dict[int, RankStarted]:
        """Start this node's ranks, once per attempt: each rank's process (its pid, and for one that
        started warm, ``--prewarm``, ``--prewarm-memory``, its warm interpreter's resident KiB), or the failure.

        A retried call (its first answer lost on the way) gets the first call's
        result, waiting for it if that call is still running: a failure is
        never hidden by the retry.
        """
        if not specs:
            return {}
        attempt = specs[0].attempt
        with self._launch_lock:
            result = self._launches.get(attempt)
            first = result is None
            if result is None:
                result = self._launches[attempt] = Future()
                for old in sorted(self._launches)[:-_LAUNCHES_KEPT]:
                    del self._launches[old]
        if not first:
            return result.result()
        try:
            failure = self._launch(specs, echo_ranks)
        except BaseException as error:
            result.set_exception(error)
            raise
        result.set_result(failure)
        return failure

    def _launch(
        self, specs: Sequence[WorkerSpec], echo_ranks: Collection[int] | None
    ) -> LaunchFailure | dict[int, RankStarted]:
        try:
            return self._agent.launch(specs, echo_ranks)
        except LaunchError as error:
            return LaunchFailure(error.rank, error.argv0, error.returncode, error.reason)
        except OSError as error:
            # The node itself refused (disk full or read-only where a rank's log
            # goes): a launch failure with its cause, naming the file when known.
            where = str(error.filename) if error.filename else specs[0].argv[0]
            rank = next((s.rank for s in specs if s.log_path == where), specs[0].rank)
            reason = error.strerror or str(error) or type(error).__name__
            return LaunchFailure(rank, where, _NOT_EXECUTABLE_STATUS, reason)

    def next_events(self, timeout_s: float) -> AgentEvents:
        """Wait up to ``timeout_s`` for something to report, then return it: every
        exit, and up to a batch of console lines with the count dropped meanwhile."""
        with self._events:
            self._events.wait_for(lambda: self._exits or self._alive or self._lines, timeout=timeout_s)
            exits, self._exits = tuple(self._exits), []
            alive, self._alive = tuple(self._alive), []
            lines = self._take_lines()
            dropped, self._lines_dropped = self._lines_dropped, 0
        return AgentEvents(
            exits=exits, lines=lines, lines_dropped=dropped, alive=alive, sent_at=time.monotonic()
        )

    def _on_exit(self, exit: WorkerExit) -> None:
        with self._events:
            self._exits.append(exit)
            self._events.notify_all()

    def _on_alive(self, sign: SignOfLife | StepsSeen | SparesStarted | HelperEnded) -> None:
        if isinstance(sign, (SparesStarted, HelperEnded)):
            return  # --spares runs on the local backend only (RunConfig refuses it with --backend ray)
        with self._events:
            self._alive.append(sign)
            self._events.notify_all()

    def _take_lines(self) -> tuple[tuple[int, str], ...]:
        """The oldest waiting lines, up to a batch's size in lines and bytes (the lock held)."""
        taken: list[tuple[int, str]] = []
        size = 0
        while self._lines and len(taken) < _MAX_BATCH_LINES:
            cost = _line_bytes(self._lines[0][1])
            if taken and size + cost > _MAX_BATCH_BYTES:
                break
            taken.append(self._lines.popleft())
            size += cost
        self._lines_bytes -= size
        return tuple(taken)

    def _on_line(self, rank: int, line: str) -> None:
        cost = _line_bytes(line)
        with self._events:
            while self._lines and self._lines_bytes + cost > PENDING_LINES_BYTES:
                _, oldest = self._lines.popleft()
                self._lines_bytes -= _line_bytes(oldest)
                self._lines_dropped += 1
            self._lines.append((rank, line))
            self._lines_bytes += cost
            self._events.notify_all()

    def stop(self, signum: int, grace_s: float, collateral: bool = False) -> AgentEvents:
        """Stop the ranks (``collateral``: a failure's survivors, see :meth:`NodeAgent.stop`); the
        steps they printed last, which the driver must have before it hears the drain is over
        (the event pump's next poll may come after that)."""
        self._agent.stop(signum, grace_s, collateral=collateral)
        with self._events:
            steps = tuple(s for s in self._alive if isinstance(s, StepsSeen))
            self._alive = [s for s in self._alive if not isinstance(s, StepsSeen)]
            # Lines dropped so far, too: a run that ends now may see no poll of the pump again.
            dropped, self._lines_dropped = self._lines_dropped, 0
        return AgentEvents(exits=(), lines=(), lines_dropped=dropped, alive=steps, sent_at=time.monotonic())

    def kill(self) -> None:
        self._agent.kill()

    def announce_preemption(self, attempt: int, notice: str) -> list[int]:
        return self._agent.announce_preemption(attempt, notice)

    def silences(self, attempt: int) -> list[RankSilence]:
        return self._agent.silences(attempt)

    def kill_exit_hung(
        self, attempt: int, ranks: Sequence[int], reason: str, detected_at: float
    ) -> list[HungRank]:
        return self._agent.kill_exit_hung(attempt, ranks, reason, detected_at)

    def dump_stacks(self) -> dict[int, str]:
        return self._agent.dump_stacks()

    def heartbeat_ages(self) -> dict[int, float]:
        return self._agent.heartbeat_ages()

    def close(self) -> None:
        self._agent.close()
