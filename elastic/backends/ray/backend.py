"""Many nodes on Ray: one node-pinned agent actor per node; placement, launch, stop, teardown.

With ``calls`` (where Ray's errors become values), ``connect``,
``agent_start`` and ``stacks``, the only modules that import ``ray``
(the CLI imports this one lazily). ``roster`` keeps the
agents and reports each rank's end once; ``pump`` carries their events;
``placement`` decides, without Ray, which nodes are eligible; ``drain``
watches for nodes Ray is draining (preemption notices);
``agent_start`` spawns and registers the agents; ``ages`` asks them
for their ranks' heartbeat ages; ``stacks`` serves ``elastic stack``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import ray
import ray.exceptions
import structlog

from elastic.backends.protocol import (
    BackendFault,
    ExitSink,
    NodeDraining,
    NodeLaunchError,
    NodeReport,
    NotEnoughNodes,
)
from elastic.backends.ray.agents.agent import RayNodeAgent
from elastic.backends.ray.agents.start import AgentStarter, agent_name
from elastic.backends.ray.agents.ages import HeartbeatAges
from elastic.backends.ray.calls import (
    AgentFailed,
    Failed,
    NodeLost,
    Ok,
    RayLost,
    Unreachable,
    call,
    cluster_nodes,
    gather,
    submit,
)
from elastic.backends.ray.cluster.connect import NAMESPACE, EmbeddedRay, connect
from elastic.backends.ray.drain import DrainWatch
from elastic.backends.ray.placement import NodeNames, Quarantine, eligible_nodes
from elastic.backends.ray.agents.pump import EventPump
from elastic.backends.ray.agents.roster import AgentNode, Roster
from elastic.core.diagnosis.preflight import NodeCommand, NodeCommandResult
from elastic.core.events import LogEvent
from elastic.core.failures import WorkerExit
from elastic.core.launch.plan import NodeSlot, order_nodes
from elastic.core.launch.spec import RankStarted, WorkerSpec
from elastic.core.messages import RankSilence, SignOfLife, StepsSeen
from elastic.core.rank_ends import HungRank
from elastic.node.agent import free_port
from elastic.node.probes.stacks import DUMP_TIMEOUT_S
from elastic.node.supervisor import LaunchError

__all__ = [
    "EmbeddedRay",
    "RayBackend",
    "agent_name",
    "connect",
]

_NODE_POLL_S = 0.5  # how often the cluster is re-read while waiting for nodes
_AGENT_START_S = 90.0  # a new agent must answer within this, retries included
_STOP_SLACK_S = 30.0  # beyond the grace period, for SIGKILL and reaping on every node
_CLOSE_S = 30.0  # every agent closes within this, all at once
_ANNOUNCE_S = 5.0  # every agent writes its ranks' preemption notice within this, all at once
_SILENCES_S = 10.0  # every agent measures its ranks' silence within this (a checkpoint scan), all at once
_PREFLIGHT_SLACK_S = 10.0  # beyond --preflight-timeout, for the calls to every agent and back

_log = structlog.get_logger("elastic.ray")


# -- the backend -----------------------------------------------------------------------


class RayBackend:
    """Runs ranks through node-pinned :class:`RayNodeAgent` actors.

    Every Ray call goes through :mod:`elastic.backends.ray.calls`, which turns
    Ray's errors into values handled here: nothing of Ray's raises into the
    driver. The agents and the ends of their ranks are kept by a
    :class:`~elastic.backends.ray.agents.roster.Roster`; exits arrive through a
    supervised :class:`~elastic.backends.ray.agents.pump.EventPump`.

    ``agent_class``, ``kill_actor``, ``after_placement`` (called with the
    nodes of each attempt before their ports are asked for) and
    ``agent_start_timeout_s`` (how long new agents may take to answer, all
    together) are seams for tests; production uses the defaults. ``run_dir``
    holds an embedded Ray's record and log (a temporary directory where it is
    None). ``node_names`` (Ray's node id -> name) are the names an earlier driver of
    the run gave its nodes (journaled with each attempt's plan), kept for them.

    Ray's node id is how the backend knows a node (placement, drains, losses); what
    leaves it (the slots of :meth:`acquire_nodes`, exits, drains, launch errors) names
    the node as people read it (:class:`~elastic.backends.ray.placement.NodeNames`), and
    what comes in by that name is found again by it.
    """

    def __init__(
        self,
        *,
        address: str | None = None,
        run_id: str = "run",
        run_dir: Path | None = None,
        nproc_per_node: int | None = None,
        node_resource: str | None = None,
        echo: Callable[[str], None] | None = None,
        echo_ranks: Collection[int] | None = None,
        agent_class: type[RayNodeAgent] = RayNodeAgent,
        kill_actor: Callable[[Any], None] | None = None,
        after_placement: Callable[[Sequence[NodeSlot]], None] | None = None,
        agent_start_timeout_s: float = _AGENT_START_S,
        clock: Callable[[], float] = time.monotonic,
        node_names: Mapping[str, str] | None = None,
    ) -> None:
        self._address = address
        self._run_id = run_id
        self._run_dir = run_dir
        self._nproc = nproc_per_node
        self._resource = node_resource
        self._echo_ranks = echo_ranks
        self._kill_actor = kill_actor or (lambda actor: ray.kill(actor, no_restart=True))
        self._after_placement = after_placement
        self._clock = clock
        self._node_gpus: dict[str, int] = {}
        self._group_rank: dict[str, int] = {}
        self._quarantine = Quarantine()
        self._names = NodeNames(node_names)
        self._naming = threading.Lock()  # nodes are named from the driver's, the drain and the scale watches' threads
        self._on_exit: ExitSink | None = None
        self._embedded: EmbeddedRay | None = None
        self._closed = threading.Event()
        self._roster = Roster(self._report, self._kill_actor, clock, self._closed)
        self._nodes = self._roster.nodes
        self._agents = AgentStarter(ray.remote(agent_class), run_id, self._roster, clock, agent_start_timeout_s,
                                    self._names.of)
        self._pump = EventPump(self._roster, echo=echo, group_rank=self._group_rank.get, clock=clock,
                               closed=self._closed)
        self._drains = DrainWatch(self._roster, self._report, self.available_nodes, clock=clock,
                                  closed=self._closed)
        self._ages = HeartbeatAges(self._roster, clock, self._closed)

    # -- start and nodes -------------------------------------------------------------

    def start(self, on_exit: ExitSink) -> None:
        self._on_exit = on_exit
        self._embedded = connect(self._address, run_id=self._run_id, run_dir=self._run_dir)
        self._pump.start()
        self._drains.start()

    def acquire_nodes(
        self,
        previous: Sequence[str],
        min_nodes: int,
        max_nodes: int,
        timeout_s: float,
        cancel: threading.Event,
        leave_out: Collection[str] = (),
    ) -> Sequence[NodeSlot]:
        deadline_at = self._clock() + timeout_s
        for name in leave_out:  # a straggler's node: out for the rest of the run, scale-ups too
            self._quarantine.add(self._names.id_of(name), self._clock(), for_s=float("inf"))
        previous_ids = [self._names.id_of(name) for name in previous]
        while True:
            candidates = self._eligible_nodes()
            if len(candidates) >= min_nodes:
                ready = self._start_agents(order_nodes(previous_ids, candidates, max_nodes))
                if len(ready) >= min_nodes:
                    slots = tuple(self._names.named(slot) for slot in ready)
                    if self._after_placement is not None:
                        self._after_placement(slots)
                    return slots
                candidates = list(ready)
            if cancel.is_set() or self._roster.fault is not None or self._clock() >= deadline_at:
                raise NotEnoughNodes(min_nodes, len(candidates))
            _log.info(LogEvent.NODES_AWAITED.value, needed=min_nodes, available=len(candidates))
            cancel.wait(_NODE_POLL_S)

    def cluster_address(self) -> str | None:
        try:
            address = ray.get_runtime_context().gcs_address
        except ray.exceptions.RayError:
            return None
        return str(address) if address else None

    def available_nodes(self) -> int:
        return len(self._eligible_nodes())

    def _eligible_nodes(self) -> list[NodeSlot]:
        """Alive nodes with the resource asked for (GPUs if any node has them), not quarantined,
        not being drained.

        A node table that cannot be read (the GCS restarting for longer than
        the retries) reads as no node: the wait for nodes goes on, bounded.
        """
        table = cluster_nodes()
        if not isinstance(table, Ok):
            if isinstance(table, RayLost):
                self._roster.lost_ray(table.error)
            _log.warning(LogEvent.CLUSTER_READ_FAILED.value, error=table.error)
            return []
        eligible = eligible_nodes(table.value, resource=self._resource, nproc_per_node=self._nproc,
                                  quarantine=self._quarantine, now=self._clock(),
                                  draining=self._drains.draining())
        self._node_gpus.update(eligible.gpus)
        with self._naming:
            self._names.name(eligible.hosts)
        return list(eligible.slots)

    def _start_agents(self, slots: Sequence[NodeSlot]) -> tuple[NodeSlot, ...]:
        ready = self._agents.start(slots, self._node_gpus)
        self._group_rank.clear()
        self._group_rank.update({slot.node_id: i for i, slot in enumerate(ready)})
        return ready

    # -- ports, launch, stop ---------------------------------------------------------

    def free_ports(self, node: NodeSlot, count: int) -> Sequence[int]:
        """Ports free on ``node``; for a node lost since placement, any free ports here.

        Those are never used: the attempt's launch reports the lost node's
        ranks lost, and the attempt restarts without it.
        """
        entry = self._nodes[self._names.id_of(node.node_id)]
        if not entry.dead:
            result = call(entry.actor.free_ports, node.address, count)
            if isinstance(result, Ok):
                ports: list[int] = result.value
                return ports
            self._call_failed(entry, result, "finding free ports")
        ports = []
        while len(ports) < count:
            port = free_port("127.0.0.1")
            if port not in ports:
                ports.append(port)
        return ports

    def run_on_nodes(self, commands: Sequence[NodeCommand], timeout_s: float) -> tuple[NodeCommandResult, ...]:
        """Each node's agent runs its command, all at once, under one deadline; a node whose
        agent cannot be reached, or failed, gives a result saying so (its preflight failed)."""
        deadline_at = self._clock() + timeout_s + _PREFLIGHT_SLACK_S
        calls = {}
        for index, command in enumerate(commands):
            entry = self._nodes.get(self._names.id_of(command.node))
            if entry is not None and not entry.dead:
                calls[index] = submit(entry.actor.run_command, command, timeout_s)
        answers = gather(calls, deadline_at, self._clock)
        results = []
        for index, command in enumerate(commands):
            answer = answers.get(index)
            if isinstance(answer, Ok):
                results.append(answer.value)
            else:
                error = "its node agent is gone" if answer is None else answer.error
                results.append(NodeCommandResult(command.node, error=f"node agent: {error}"))
        return tuple(results)

    def launch(self, specs: Sequence[WorkerSpec], helpers: Sequence[WorkerSpec] = ()) -> dict[int, RankStarted]:
        if helpers:  # RunConfig refuses --spares with --backend ray
            raise ValueError("in-place restarts (--spares) are not built for the Ray backend yet")
        by_node: dict[str, list[WorkerSpec]] = {}
        for spec in specs:
            by_node.setdefault(self._names.id_of(spec.node_id), []).append(spec)
        for node_id, node_specs in by_node.items():
            self._roster.assign(self._nodes[node_id], {s.rank: s.attempt for s in node_specs})
        pending = list(by_node.items())
        started: dict[int, RankStarted] = {}
        while pending:
            node_id, node_specs = pending.pop(0)
            node = self._nodes[node_id]
            try:
                started.update(self._launch_on(node, node_specs))
            except LaunchError:
                for later_id, later_specs in pending:  # never launched: no end to wait for
                    self._roster.unassign(self._nodes[later_id], [s.rank for s in later_specs])
                raise
        return started

    def _launch_on(self, node: AgentNode, specs: Sequence[WorkerSpec]) -> dict[int, RankStarted]:
        """Launch a node's ranks: each one's process (none from a node lost meanwhile)."""
        if node.dead:  # lost between placement and launch: its ranks are lost too
            self._roster.node_died(node, "its node was lost before its ranks were launched")
            return {}
        result = call(node.actor.launch, specs, self._echo_ranks)
        if not isinstance(result, Ok):
            self._call_failed(node, result, "launching")
            return {}
        failure = result.value
        if isinstance(failure, dict):
            return failure  # started: each rank's pid, and whether warm
        # The agent started ranks in order up to the one that failed: the
        # rest will never report an exit.
        ranks = [s.rank for s in specs]
        self._roster.unassign(node, ranks[ranks.index(failure.rank):] if failure.rank in ranks else [])
        raise failure.to_error()

    def _call_failed(self, node: AgentNode, result: Failed, doing: str) -> None:
        """What a failed call to a node's agent means, outside teardown."""
        if isinstance(result, NodeLost):
            self._roster.node_died(node, f"{result.error} (while {doing})")
        elif isinstance(result, Unreachable):
            # Retried to the bound: as good as gone (a vanished machine).
            self._quarantine.add(node.node_id, self._clock())
            self._roster.node_died(node, f"unreachable while {doing}: {result.error}")
        elif isinstance(result, RayLost):
            self._roster.lost_ray(result.error)
            self._roster.node_died(node, f"Ray lost while {doing}")
        else:
            # The agent itself is broken: retire it (a new one next time) and say so.
            self._roster.retire(node)
            raise NodeLaunchError(
                node.name, node.first_rank,
                f"the node agent on node {node.name} ({node.address}) failed while {doing}: {result.error}",
            )

    def stop_workers(self, signum: int, grace_s: float, *, collateral: bool = False) -> None:
        deadline_at = self._clock() + grace_s + _STOP_SLACK_S
        calls = {n.node_id: submit(n.actor.stop, signum, grace_s, collateral) for n in self._roster.alive()}
        for node_id, result in gather(calls, deadline_at, self._clock).items():
            if isinstance(result, Ok):
                self._pump.deliver_signs(result.value, self._clock())  # the last steps, before the end
                self._pump.count_drops(self._names.of(node_id), result.value.lines_dropped)
                continue
            if isinstance(result, AgentFailed):
                _log.warning(LogEvent.STOP_FAILED.value, node=self._names.of(node_id), error=result.error)
                continue
            self._call_failed(self._nodes[node_id], result, "stopping")
        self._roster.await_ends(deadline_at, lambda: self._pump.hearing)

    def announce_preemption(self, attempt: int, notice: str) -> None:
        """Every agent with ranks writes their notice files, all at once, under one short
        deadline: a node out of reach is left to the stop signal (and the drain's own handling)."""
        nodes = [n for n in self._roster.alive() if n.live_ranks]
        calls = {n.node_id: submit(n.actor.announce_preemption, attempt, notice) for n in nodes}
        for node_id, result in gather(calls, self._clock() + _ANNOUNCE_S, self._clock).items():
            if not isinstance(result, Ok):
                _log.warning(LogEvent.NOTICE_NOT_DELIVERED.value, node=self._names.of(node_id), error=result.error)

    def silences(self, attempt: int) -> Sequence[RankSilence]:
        """Each node with ranks of ``attempt`` measures its own, all nodes at once; a node out
        of reach is left out (its ranks count as silent; the kill that follows finds it gone)."""
        with self._roster.lock:
            nodes = [
                n for n in self._roster.nodes.values()
                if not n.dead and any(a == attempt for a in n.live_ranks.values())
            ]
        calls = {n.node_id: submit(self._nodes[n.node_id].actor.silences, attempt) for n in nodes}
        silences: list[RankSilence] = []
        for node_id, result in gather(calls, self._clock() + _SILENCES_S, self._clock).items():
            if isinstance(result, Ok):
                silences.extend(result.value)
            else:
                _log.warning(LogEvent.SILENCE_NOT_MEASURED.value, node=self._names.of(node_id), error=result.error)
        return tuple(silences)

    def kill_exit_hung(
        self, attempt: int, ranks: Sequence[int], reason: str, detected_at: float
    ) -> tuple[HungRank, ...]:
        """Each node with some of these ranks dumps and kills its own, all nodes at once."""
        wanted = set(ranks)
        with self._roster.lock:
            targets = {
                n.node_id: [r for r, a in n.live_ranks.items() if a == attempt and r in wanted]
                for n in self._roster.nodes.values()
                if not n.dead
            }
        calls = {
            node_id: submit(self._nodes[node_id].actor.kill_exit_hung, attempt, node_ranks, reason, detected_at)
            for node_id, node_ranks in targets.items()
            if node_ranks
        }
        deadline_at = self._clock() + DUMP_TIMEOUT_S + _STOP_SLACK_S
        seen: list[HungRank] = []
        for node_id, result in gather(calls, deadline_at, self._clock).items():
            if isinstance(result, Ok):
                seen.extend(result.value)
            elif isinstance(result, AgentFailed):
                _log.warning(LogEvent.EXIT_HANG_KILL_FAILED.value, node=self._names.of(node_id), error=result.error)
            else:
                self._call_failed(self._nodes[node_id], result, "killing ranks hung at exit")
        return tuple(sorted(seen, key=lambda hung: hung.rank))

    def kill_workers(self) -> None:
        for node in self._roster.alive():
            submit(node.actor.kill)

    def heartbeat_ages(self) -> dict[int, float]:
        return self._ages.heartbeat_ages()

    def _report(self, exit: NodeReport) -> None:
        assert self._on_exit is not None
        self._on_exit(exit)

    # -- teardown --------------------------------------------------------------------

    def close(self) -> None:
        """Release every agent at once under one deadline, then Ray; errors here are
        teardown noise, never outcome."""
        if self._closed.is_set():
            return
        self._closed.set()
        with self._roster.lock:
            self._roster.lock.notify_all()
        nodes = list(self._nodes.values())
        closes = {n.node_id: submit(n.actor.close) for n in nodes}
        for node_id, result in gather(closes, self._clock() + _CLOSE_S, self._clock).items():
            if not isinstance(result, Ok):
                _noise(self._names.of(node_id), "close", result.error)
        for node in nodes:
            try:
                self._kill_actor(node.actor)
            except Exception as error:  # noqa: BLE001 - teardown must not raise
                _noise(node.name, "kill", f"{type(error).__name__}: {error}")
        self._pump.log_drops(now=True)
        self._pump.join(timeout_s=2 * _NODE_POLL_S + 1)
        self._drains.join(timeout_s=2 * _NODE_POLL_S + 1)
        try:
            if self._embedded is not None:
                self._embedded.shutdown()
            else:
                ray.shutdown()
        except Exception as error:  # noqa: BLE001 - teardown must not raise
            _noise("-", "shutdown", f"{type(error).__name__}: {error}")


def _noise(node_id: str, step: str, error: str) -> None:
    _log.info(LogEvent.TEARDOWN_ERROR_IGNORED.value, node=node_id, step=step, error=error)
