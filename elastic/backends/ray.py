"""Many nodes on Ray: one node-pinned agent actor per node; Ray errors become failure kinds.

The only module (with the CLI's lazy import of it) that imports ``ray``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

import ray
import ray.exceptions
import structlog
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from elastic.backend import ExitSink, NotEnoughNodes
from elastic.backends.ray_agent import AgentEvents, NodeDescription, RayNodeAgent
from elastic.backends.ray_connect import NAMESPACE, EmbeddedRay, connect
from elastic.failures import FailureKind, WorkerExit
from elastic.plan import NodeSlot, WorkerSpec, order_nodes
from elastic.stacks import DUMP_TIMEOUT_S

__all__ = [
    "EmbeddedRay",
    "RayBackend",
    "agent_name",
    "connect",
    "dump_stacks_via_agents",
    "translate_ray_error",
]

_POLL_S = 5.0  # long-poll length of one next_events call
_NODE_POLL_S = 0.5  # how often the cluster is re-read while waiting for nodes
_RPC_TIMEOUT_S = 60.0
_STOP_SLACK_S = 30.0  # beyond the grace period, for SIGKILL and reaping on every node
# A node whose agent could not be reached to stop its ranks is left out of new
# attempts for this long, unless Ray forgets it first: Ray itself may take tens
# of seconds to declare a vanished machine dead, and an agent placed there
# would wait that long to fail.
_UNREACHABLE_QUARANTINE_S = 60.0
# Heartbeat ages: a scrape waits at most this long for the agents, and an answer
# this young is served again (aged by the time since) instead of asking anew.
_AGES_TIMEOUT_S = 1.0
_AGES_FRESH_S = 1.0

_log = structlog.get_logger("elastic.ray")


def translate_ray_error(error: BaseException) -> FailureKind | None:
    """The one place Ray's exceptions become our kinds (DESIGN §4).

    Actor or node dead, or an actor that can no longer be placed on its pinned
    node: node-lost. Briefly unavailable, or an RPC timeout: transient-rpc.
    Anything else: ``None``, not ours to interpret.
    """
    if isinstance(error, ray.exceptions.ActorUnavailableError | ray.exceptions.GetTimeoutError):
        return FailureKind.TRANSIENT_RPC
    if isinstance(
        error,
        ray.exceptions.ActorDiedError
        | ray.exceptions.ActorUnschedulableError
        | ray.exceptions.NodeDiedError
        | ray.exceptions.RayActorError
        | ray.exceptions.LocalRayletDiedError,
    ):
        return FailureKind.NODE_LOST
    return None


def _is_transient(error: BaseException) -> bool:
    return translate_ray_error(error) is FailureKind.TRANSIENT_RPC


def _log_retry(state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome else None
    _log.warning("rpc_retried", attempt=state.attempt_number, error=type(error).__name__)


def rpc_retrying(max_attempts: int = 5, max_delay_s: float = 30.0) -> Retrying:
    """Retries of one idempotent actor call while Ray says the actor is briefly away."""
    return Retrying(
        retry=retry_if_exception(_is_transient),
        stop=stop_after_attempt(max_attempts) | stop_after_delay(max_delay_s),
        wait=wait_exponential(multiplier=0.1, max=2.0),
        before_sleep=_log_retry,
        reraise=True,
    )


# -- the cluster -----------------------------------------------------------------------


def agent_name(run_id: str, node_id: str) -> str:
    return f"elastic-{run_id}-{node_id[:16]}"


def dump_stacks_via_agents(address: str, run_id: str, timeout_s: float = 60.0) -> dict[str, dict[int, str]]:
    """Node -> rank -> stacks, asked of a live run's agents (for ``elastic stack``)."""
    ray.init(address=address, namespace=NAMESPACE, configure_logging=False, log_to_driver=False)
    try:
        prefix = agent_name(run_id, "")
        names = [
            entry["name"] if isinstance(entry, dict) else str(entry)
            for entry in ray.util.list_named_actors()
        ]
        calls: dict[str, Any] = {
            name[len(prefix):]: ray.get_actor(name, namespace=NAMESPACE).dump_stacks.remote()
            for name in names
            if name.startswith(prefix)
        }
        dumps: dict[str, dict[int, str]] = {}
        for node, call in calls.items():
            dumps[node] = ray.get(call, timeout=timeout_s)
        return dumps
    finally:
        ray.shutdown()


def _cluster_nodes() -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return nodes


# -- the backend -----------------------------------------------------------------------


@dataclass
class _Node:
    """A node agent the driver holds, and the ranks of the current attempt on it."""

    node_id: str
    address: str
    gpus: int
    actor: Any
    description: NodeDescription
    live_ranks: dict[int, int]  # rank -> attempt
    poll: Any = None  # the outstanding next_events ObjectRef
    dead: bool = False


class RayBackend:
    """Runs ranks through node-pinned :class:`RayNodeAgent` actors.

    ``agent_class`` and ``kill_actor`` are seams for tests (an agent that
    fails on cue, a ``ray.kill`` that raises); production uses the defaults.
    """

    def __init__(
        self,
        *,
        address: str | None = None,
        run_id: str = "run",
        nproc_per_node: int | None = None,
        node_resource: str | None = None,
        echo: Callable[[str], None] | None = None,
        echo_ranks: Collection[int] | None = None,
        agent_class: type[RayNodeAgent] = RayNodeAgent,
        kill_actor: Callable[[Any], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._address = address
        self._run_id = run_id
        self._nproc = nproc_per_node
        self._resource = node_resource
        self._echo = echo
        self._echo_ranks = echo_ranks
        self._remote_agent = ray.remote(agent_class)
        self._kill_actor = kill_actor or (lambda actor: ray.kill(actor, no_restart=True))
        self._clock = clock
        self._nodes: dict[str, _Node] = {}
        self._group_rank: dict[str, int] = {}
        self._quarantined_until: dict[str, float] = {}
        self._lock = threading.Condition()
        self._on_exit: ExitSink | None = None
        self._embedded: EmbeddedRay | None = None
        self._pump: threading.Thread | None = None
        self._closed = threading.Event()
        self._ages_lock = threading.Lock()
        self._ages: dict[int, float] = {}
        self._ages_at = float("-inf")

    @property
    def embedded(self) -> bool:
        return self._embedded is not None

    # -- start and nodes -------------------------------------------------------------

    def start(self, on_exit: ExitSink) -> None:
        self._on_exit = on_exit
        self._embedded = connect(self._address)
        self._pump = threading.Thread(target=self._pump_events, name="elastic-ray-pump", daemon=True)
        self._pump.start()

    def acquire_nodes(
        self,
        previous: Sequence[str],
        min_nodes: int,
        max_nodes: int,
        timeout_s: float,
        cancel: threading.Event,
    ) -> Sequence[NodeSlot]:
        deadline_at = self._clock() + timeout_s
        while True:
            candidates = self._eligible_nodes()
            if len(candidates) >= min_nodes:
                slots = self._start_agents(order_nodes(previous, candidates, max_nodes))
                if len(slots) >= min_nodes:
                    return slots
                candidates = list(slots)
            if cancel.is_set() or self._clock() >= deadline_at:
                raise NotEnoughNodes(min_nodes, len(candidates))
            _log.info("nodes_awaited", needed=min_nodes, available=len(candidates))
            cancel.wait(_NODE_POLL_S)

    def cluster_address(self) -> str | None:
        address = ray.get_runtime_context().gcs_address
        return str(address) if address else None

    def available_nodes(self) -> int:
        return len(self._eligible_nodes())

    def _eligible_nodes(self) -> list[NodeSlot]:
        """Alive nodes with the resource asked for (GPUs if any node has them)."""
        alive = [n for n in _cluster_nodes() if n.get("Alive")]
        resource = self._resource
        if resource is None and any(n["Resources"].get("GPU", 0) > 0 for n in alive):
            resource = "GPU"
        chosen = []
        now = self._clock()
        for info in alive:
            if resource is not None and info["Resources"].get(resource, 0) <= 0:
                continue
            if self._quarantined_until.get(info["NodeID"], 0.0) > now:
                continue
            gpus = int(info["Resources"].get("GPU", 0))
            nproc = self._nproc or max(1, gpus)
            chosen.append(NodeSlot(info["NodeID"], info["NodeManagerAddress"], nproc))
        return chosen

    def _start_agents(self, slots: Sequence[NodeSlot]) -> tuple[NodeSlot, ...]:
        """An agent on each slot's node (reusing live ones); slots whose node died drop out.

        New actors are all created before any is waited on, so their start-ups overlap.
        """
        spawned = {
            slot.node_id: self._spawn_actor(slot)
            for slot in slots
            if slot.node_id not in self._nodes or self._nodes[slot.node_id].dead
        }
        gpus = {n["NodeID"]: int(n["Resources"].get("GPU", 0)) for n in _cluster_nodes()}
        ready = []
        for slot in slots:
            if slot.node_id in spawned:
                node = self._register_agent(slot, spawned[slot.node_id], gpus.get(slot.node_id, 0))
                if node is None:
                    continue
            else:
                node = self._nodes[slot.node_id]
            description = node.description
            gpu_ids = description.gpu_ids or tuple(str(i) for i in range(node.gpus))
            ready.append(
                NodeSlot(slot.node_id, slot.address, slot.nproc, description.gpu_vendor, gpu_ids)
            )
        with self._lock:
            self._group_rank = {slot.node_id: i for i, slot in enumerate(ready)}
        return tuple(ready)

    def _spawn_actor(self, slot: NodeSlot) -> Any:
        return self._remote_agent.options(
            num_cpus=0,
            num_gpus=0,
            max_restarts=0,
            max_concurrency=16,
            scheduling_strategy=NodeAffinitySchedulingStrategy(slot.node_id, soft=False),
            name=agent_name(self._run_id, slot.node_id),
        ).remote(slot.node_id)

    def _register_agent(self, slot: NodeSlot, actor: Any, gpus: int) -> _Node | None:
        """Wait for a new agent to answer; ``None`` when its node is gone."""
        try:
            description = self._call(actor.describe)
        except ray.exceptions.RayError as error:
            if translate_ray_error(error) is FailureKind.NODE_LOST:
                _log.warning("agent_unavailable", node=slot.node_id, error=type(error).__name__)
                return None
            raise
        node = _Node(slot.node_id, slot.address, gpus, actor, description, {})
        with self._lock:
            self._nodes[slot.node_id] = node
            self._lock.notify_all()
        _log.info("agent_started", node=slot.node_id, host=description.hostname, pid=description.pid)
        return node

    # -- ports, launch, stop ---------------------------------------------------------

    def free_ports(self, node: NodeSlot, count: int) -> Sequence[int]:
        ports: list[int] = self._call(self._nodes[node.node_id].actor.free_ports, node.address, count)
        return ports

    def launch(self, specs: Sequence[WorkerSpec]) -> None:
        by_node: dict[str, list[WorkerSpec]] = {}
        for spec in specs:
            by_node.setdefault(spec.node_id, []).append(spec)
        with self._lock:
            for node_id, node_specs in by_node.items():
                self._nodes[node_id].live_ranks = {s.rank: s.attempt for s in node_specs}
        for node_id, node_specs in by_node.items():
            node = self._nodes[node_id]
            try:
                failure = self._call(node.actor.launch, node_specs, self._echo_ranks)
            except ray.exceptions.RayError as error:
                if translate_ray_error(error) is not FailureKind.NODE_LOST:
                    raise
                self._node_died(node, f"{type(error).__name__} while launching")
                continue
            if failure is not None:
                raise failure.to_error()

    def stop_workers(self, signum: int, grace_s: float) -> None:
        live = [n for n in self._nodes.values() if not n.dead]
        calls = {n.node_id: n.actor.stop.remote(signum, grace_s) for n in live}
        deadline_at = self._clock() + grace_s + _STOP_SLACK_S
        for node_id, call in calls.items():
            try:
                ray.get(call, timeout=max(0.0, deadline_at - self._clock()))
            except ray.exceptions.RayError as error:
                kind = translate_ray_error(error)
                if kind is FailureKind.TRANSIENT_RPC:
                    # Ray already retried; an agent that cannot be told to stop its
                    # ranks during a drain is as good as gone (a vanished machine).
                    self._quarantined_until[node_id] = self._clock() + _UNREACHABLE_QUARANTINE_S
                if kind is not None:
                    self._node_died(self._nodes[node_id], f"{type(error).__name__} while stopping")
                else:
                    _log.warning("stop_failed", node=node_id, error=type(error).__name__)
        self._await_exit_reports(deadline_at)

    def _await_exit_reports(self, deadline_at: float) -> None:
        """Return once every rank's exit reached the driver; a silent node counts as lost."""
        with self._lock:
            while any(n.live_ranks for n in self._nodes.values()):
                remaining_s = deadline_at - self._clock()
                if remaining_s <= 0:
                    break
                self._lock.wait(remaining_s)
            silent = [n for n in self._nodes.values() if n.live_ranks]
        for node in silent:
            self._node_died(node, "its agent did not report the exits of its ranks")

    def kill_exit_hung(
        self, attempt: int, ranks: Sequence[int], reason: str, detected_at: float
    ) -> frozenset[int]:
        """Each node with some of these ranks dumps and kills its own, all nodes at once."""
        wanted = set(ranks)
        with self._lock:
            nodes = [
                (n, [r for r, a in n.live_ranks.items() if a == attempt and r in wanted])
                for n in self._nodes.values()
                if not n.dead
            ]
        calls = {
            node.node_id: (node, node.actor.kill_exit_hung.remote(attempt, node_ranks, reason, detected_at))
            for node, node_ranks in nodes
            if node_ranks
        }
        deadline_at = self._clock() + DUMP_TIMEOUT_S + _STOP_SLACK_S
        finished: set[int] = set()
        for node, call in calls.values():
            try:
                finished.update(ray.get(call, timeout=max(0.0, deadline_at - self._clock())))
            except ray.exceptions.RayError as error:
                if translate_ray_error(error) is not None:
                    self._node_died(node, f"{type(error).__name__} while killing ranks hung at exit")
                else:
                    _log.warning("exit_hang_kill_failed", node=node.node_id, error=type(error).__name__)
        return frozenset(finished)

    def kill_workers(self) -> None:
        for node in list(self._nodes.values()):
            if not node.dead:
                node.actor.kill.remote()

    def heartbeat_ages(self) -> dict[int, float]:
        """Each agent measures its own ranks' ages on its own clock; asked at most once a second."""
        with self._ages_lock:
            if self._clock() - self._ages_at >= _AGES_FRESH_S:
                self._ages = self._ask_ages()
                self._ages_at = self._clock()
            since_s = self._clock() - self._ages_at
            return {rank: age + since_s for rank, age in self._ages.items()}

    def _ask_ages(self) -> dict[int, float]:
        with self._lock:
            nodes = [n for n in self._nodes.values() if not n.dead and n.live_ranks]
        if self._closed.is_set() or not nodes:
            return {}
        try:
            calls = [node.actor.heartbeat_ages.remote() for node in nodes]
            ready, _ = ray.wait(calls, num_returns=len(calls), timeout=_AGES_TIMEOUT_S)
        except Exception as error:  # noqa: BLE001 - a gauge must never break a run
            _log.debug("heartbeat_ages_failed", error=type(error).__name__)
            return {}
        ages: dict[int, float] = {}
        for ref in ready:
            try:
                ages.update(ray.get(ref))
            except ray.exceptions.RayError:
                continue  # out of reach: its ranks are left out, the pump deals with the node
        return ages

    # -- events ----------------------------------------------------------------------

    def _pump_events(self) -> None:
        """Keep one long poll outstanding per agent; hand what returns to the driver."""
        while not self._closed.is_set():
            polls = self._arm_polls()
            if not polls:
                with self._lock:
                    self._lock.wait(_NODE_POLL_S)
                continue
            ready, _ = ray.wait(list(polls), num_returns=1, timeout=_NODE_POLL_S)
            for ref in ready:
                node = polls[ref]
                node.poll = None
                try:
                    events: AgentEvents = ray.get(ref)
                except ray.exceptions.RayError as error:
                    if self._closed.is_set():
                        return  # agents die at close by design: teardown, not loss
                    kind = translate_ray_error(error)
                    if kind is FailureKind.NODE_LOST:
                        self._node_died(node, type(error).__name__)
                    elif kind is not FailureKind.TRANSIENT_RPC:
                        _log.warning("poll_failed", node=node.node_id, error=repr(error))
                    continue
                self._deliver(node, events)

    def _arm_polls(self) -> dict[Any, _Node]:
        with self._lock:
            nodes = [n for n in self._nodes.values() if not n.dead]
        for node in nodes:
            if node.poll is None:
                node.poll = node.actor.next_events.remote(_POLL_S)
        return {n.poll: n for n in nodes}

    def _deliver(self, node: _Node, events: AgentEvents) -> None:
        if self._echo is not None:
            group = self._group_rank.get(node.node_id, "?")
            for rank, line in events.lines:
                self._echo(f"[node {group} rank {rank}] {line}")
        # An agent stamps exits with its own node's monotonic clock, which means
        # nothing here: restamp on arrival (one RPC later) on the driver's clock.
        now = self._clock()
        exits = [replace(exit, observed_at=now) for exit in events.exits]
        for exit in exits:
            self._report(exit)
        with self._lock:
            for exit in exits:
                if node.live_ranks.get(exit.rank) == exit.attempt:
                    del node.live_ranks[exit.rank]
            self._lock.notify_all()

    def _node_died(self, node: _Node, reason: str) -> None:
        """Mark the node lost and report each of its live ranks as lost with it.

        The exits are reported before the ranks stop counting as live, so a drain
        waiting on them (``stop_workers``) returns only after they are queued.
        """
        with self._lock:
            if node.dead:
                return  # another thread is reporting it
            node.dead = True
            lost = dict(node.live_ranks)
        _log.warning("node_lost", node=node.node_id, reason=reason)
        try:  # if the agent is in fact alive somewhere, it must not keep ranks running
            self._kill_actor(node.actor)
        except Exception:  # noqa: BLE001 - an agent already gone is what we expect
            pass
        now = self._clock()
        for rank, attempt in sorted(lost.items()):
            self._report(
                WorkerExit(
                    attempt=attempt,
                    rank=rank,
                    node=node.node_id,
                    returncode=None,
                    observed_at=now,
                    node_lost=reason,
                )
            )
        with self._lock:
            for rank in lost:
                node.live_ranks.pop(rank, None)
            self._lock.notify_all()

    def _report(self, exit: WorkerExit) -> None:
        assert self._on_exit is not None
        self._on_exit(exit)

    # -- teardown --------------------------------------------------------------------

    def close(self) -> None:
        """Release every agent, then Ray; errors here are teardown noise, never outcome."""
        if self._closed.is_set():
            return
        self._closed.set()
        for node in list(self._nodes.values()):
            for step, action in (("close", self._close_agent), ("kill", self._kill_actor)):
                try:
                    action(node.actor)
                except Exception as error:  # noqa: BLE001 - teardown must not raise
                    _log.info(
                        "teardown_noise",
                        kind=FailureKind.TEARDOWN_NOISE.value,
                        node=node.node_id,
                        step=step,
                        error=type(error).__name__,
                    )
        if self._pump is not None:
            self._pump.join(timeout=2 * _NODE_POLL_S + 1)
        if self._embedded is not None:
            self._embedded.shutdown()
        else:
            ray.shutdown()

    def _close_agent(self, actor: Any) -> None:
        ray.get(actor.close.remote(), timeout=_STOP_SLACK_S)

    def _call(self, method: Any, *args: Any) -> Any:
        """``ray.get`` of one idempotent actor call, retried while the actor is briefly away."""
        for attempt in rpc_retrying():
            with attempt:
                return ray.get(method.remote(*args), timeout=_RPC_TIMEOUT_S)
        raise AssertionError("unreachable")  # pragma: no cover

