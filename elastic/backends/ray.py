"""Many nodes on Ray: one node-pinned agent actor per node; Ray errors become failure kinds.

The only module (with the CLI's lazy import of it) that imports ``ray``.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import ray
import ray.exceptions
import structlog
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from elastic.backend import BackendFault, BackendUnavailable, ExitSink, NodeLaunchError, NotEnoughNodes
from elastic.backends.ray_address import local_cluster_file
from elastic.backends.ray_agent import AgentEvents, NodeDescription, RayNodeAgent
from elastic.backends.ray_calls import (
    AgentFailed,
    Failed,
    NodeLost,
    Ok,
    RayLost,
    Unreachable,
    call,
    cluster_nodes,
    failed,
    gather,
    is_failed,
    result_of,
    submit,
    translate_ray_error,
    wait_any,
)
from elastic.failures import FailureKind, WorkerExit, node_label
from elastic.node_agent import free_port
from elastic.plan import NodeSlot, WorkerSpec, order_nodes

__all__ = [
    "EmbeddedRay",
    "RayBackend",
    "agent_name",
    "connect",
    "dump_stacks_via_agents",
    "translate_ray_error",
]

NAMESPACE = "elastic"  # agents are named actors here, so `elastic stack` can find them
_POLL_S = 5.0  # long-poll length of one next_events call
_NODE_POLL_S = 0.5  # how often the cluster is re-read while waiting for nodes
_AGENT_START_S = 90.0  # a new agent must answer within this, retries included
_STOP_SLACK_S = 30.0  # beyond the grace period, for SIGKILL and reaping on every node
_CLOSE_S = 30.0  # every agent closes within this, all at once
_DROPS_LOGGED_EVERY_S = 5.0  # console lines dropped are logged at most this often
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


# -- the cluster -----------------------------------------------------------------------


@dataclass
class EmbeddedRay:
    """A Ray instance this process started; shut down (and its files removed) at close."""

    session_dir: str | None

    def shutdown(self) -> None:
        ray.shutdown()
        if self.session_dir:
            shutil.rmtree(self.session_dir, ignore_errors=True)


def connect(address: str | None) -> EmbeddedRay | None:
    """Join ``address``, else ``RAY_ADDRESS``, else a ``ray start`` cluster here, else embed.

    The embedded instance listens on loopback only, has no dashboard (its job
    API is unauthenticated) and keeps Ray's token authentication on.
    """
    target = address or os.environ.get("RAY_ADDRESS")
    if target is None and local_cluster_file().exists():
        target = "auto"
    if target is not None:
        try:
            ray.init(address=target, namespace=NAMESPACE, configure_logging=False, log_to_driver=False)
        except (ConnectionError, ValueError) as error:
            where = local_cluster_file() if target == "auto" else target
            raise BackendUnavailable(
                f"--address: cannot reach the Ray cluster at {where}: {error}"
            ) from error
        _warn_if_unauthenticated()
        return None
    ray.init(
        namespace=NAMESPACE,
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        configure_logging=False,
        log_to_driver=False,
    )
    return EmbeddedRay(_session_dir())


def _session_dir() -> str | None:
    node = getattr(ray._private.worker, "_global_node", None)
    return node.get_session_dir_path() if node is not None else None


def _warn_if_unauthenticated() -> None:
    try:
        from ray._raylet import (  # type: ignore[attr-defined]
            AuthenticationMode,
            get_authentication_mode,
        )
    except ImportError:
        return
    if get_authentication_mode() != AuthenticationMode.TOKEN:
        _log.warning(
            "cluster_unauthenticated",
            detail="this Ray cluster has token authentication off: anyone who can reach "
            "it can run code on it; start it with RAY_AUTH_MODE=token",
        )


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


# -- the backend -----------------------------------------------------------------------


@dataclass
class _Node:
    """A node agent the driver holds, and the ranks of the current attempt on it."""

    node_id: str
    address: str
    gpus: int
    actor: Any
    description: NodeDescription
    live_ranks: dict[int, int]  # rank -> attempt, until its exit or loss is reported
    poll: Any = None  # the outstanding next_events ObjectRef
    dead: bool = False
    # (rank, attempt) whose end is being reported: each is reported exactly once,
    # by whichever of the pump (an exit) or a node loss claims it first.
    claimed: set[tuple[int, int]] = field(default_factory=set)
    first_rank: int = 0  # of the attempt placed on it, for launch failures of the node


class RayBackend:
    """Runs ranks through node-pinned :class:`RayNodeAgent` actors.

    Every Ray call goes through :mod:`elastic.backends.ray_calls`, which turns
    Ray's errors into values handled here: nothing of Ray's raises into the
    driver. ``agent_class``, ``kill_actor`` and ``after_placement`` (called with
    the nodes of each attempt before their ports are asked for) are seams for
    tests; production uses the defaults.
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
        after_placement: Callable[[Sequence[NodeSlot]], None] | None = None,
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
        self._after_placement = after_placement
        self._clock = clock
        self._nodes: dict[str, _Node] = {}
        self._node_gpus: dict[str, int] = {}
        self._group_rank: dict[str, int] = {}
        self._quarantined_until: dict[str, float] = {}
        self._lock = threading.Condition()
        self._on_exit: ExitSink | None = None
        self._fault: BackendFault | None = None
        self._embedded: EmbeddedRay | None = None
        self._pump: threading.Thread | None = None
        self._closed = threading.Event()
        self._ages_lock = threading.Lock()
        self._ages: dict[int, float] = {}
        self._ages_at = float("-inf")
        self._drops: dict[str, int] = {}  # console lines dropped, by node, not yet logged
        self._drops_logged_at = float("-inf")

    @property
    def embedded(self) -> bool:
        return self._embedded is not None

    # -- start and nodes -------------------------------------------------------------

    def start(self, on_exit: ExitSink) -> None:
        self._on_exit = on_exit
        self._embedded = connect(self._address)
        self._pump = threading.Thread(target=self._supervise_pump, name="elastic-ray-pump", daemon=True)
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
                    if self._after_placement is not None:
                        self._after_placement(slots)
                    return slots
                candidates = list(slots)
            if cancel.is_set() or self._fault is not None or self._clock() >= deadline_at:
                raise NotEnoughNodes(min_nodes, len(candidates))
            _log.info("nodes_awaited", needed=min_nodes, available=len(candidates))
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
        """Alive nodes with the resource asked for (GPUs if any node has them).

        A node table that cannot be read (the GCS restarting for longer than
        the retries) reads as no node: the wait for nodes goes on, bounded.
        """
        table = cluster_nodes()
        if not isinstance(table, Ok):
            if isinstance(table, RayLost):
                self._lost_ray(table.error)
            _log.warning("cluster_unreadable", error=table.error)
            return []
        alive = [n for n in table.value if n.get("Alive")]
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
            self._node_gpus[info["NodeID"]] = gpus
            nproc = self._nproc or max(1, gpus)
            chosen.append(NodeSlot(info["NodeID"], info["NodeManagerAddress"], nproc))
        return chosen

    def _start_agents(self, slots: Sequence[NodeSlot]) -> tuple[NodeSlot, ...]:
        """An agent on each slot's node (reusing live ones); slots whose node died drop out.

        New actors are all created before any is waited on, so their start-ups
        overlap. An agent that cannot start (its own error, or no answer) is a
        launch failure of its node, raised once every other agent is registered.
        """
        spawned = {
            slot.node_id: self._spawn_actor(slot)
            for slot in slots
            if slot.node_id not in self._nodes or self._nodes[slot.node_id].dead
        }
        ready: list[NodeSlot] = []
        broken: NodeLaunchError | None = None
        first_rank = 0
        for slot in slots:
            if slot.node_id in spawned:
                try:
                    node = self._register_agent(slot, spawned[slot.node_id], first_rank)
                except NodeLaunchError as error:
                    broken = broken or error
                    continue
                if node is None:
                    continue
            else:
                node = self._nodes[slot.node_id]
            node.first_rank = first_rank
            first_rank += slot.nproc
            description = node.description
            gpu_ids = description.gpu_ids or tuple(str(i) for i in range(node.gpus))
            ready.append(
                NodeSlot(slot.node_id, slot.address, slot.nproc, description.gpu_vendor, gpu_ids)
            )
        if broken is not None:
            raise broken
        with self._lock:
            self._group_rank = {slot.node_id: i for i, slot in enumerate(ready)}
        return tuple(ready)

    def _spawn_actor(self, slot: NodeSlot) -> Any:
        """The new actor's handle, or the failure if Ray refused to create it."""
        options = self._remote_agent.options(
            num_cpus=0,
            num_gpus=0,
            max_restarts=0,
            max_concurrency=16,
            scheduling_strategy=NodeAffinitySchedulingStrategy(slot.node_id, soft=False),
            name=agent_name(self._run_id, slot.node_id),
        )
        return submit(options, slot.node_id)

    def _register_agent(self, slot: NodeSlot, actor: Any, first_rank: int) -> _Node | None:
        """Wait for a new agent to answer; ``None`` when its node is gone.

        Raises :class:`NodeLaunchError` naming the node and the agent's own
        error when it cannot start there (its ``__init__`` raised: the node's
        environment), or did not answer within the bound.
        """
        result = actor if is_failed(actor) else call(actor.describe, budget_s=_AGENT_START_S)
        if isinstance(result, Ok):
            node = _Node(slot.node_id, slot.address, self._node_gpus.get(slot.node_id, 0), actor,
                         result.value, {}, first_rank=first_rank)
            with self._lock:
                self._nodes[slot.node_id] = node
                self._lock.notify_all()
            _log.info("agent_started", node=slot.node_id, host=node.description.hostname,
                      pid=node.description.pid)
            return node
        if isinstance(result, NodeLost | RayLost):
            if isinstance(result, RayLost):
                self._lost_ray(result.error)
            _log.warning("agent_unavailable", node=slot.node_id, error=result.error)
            return None
        if not is_failed(actor):
            self._kill_quietly(actor)
        how = "could not start" if isinstance(result, AgentFailed) else "did not answer"
        _log.warning("agent_failed", node=slot.node_id, error=result.error)
        raise NodeLaunchError(
            slot.node_id, first_rank,
            f"the node agent on node {node_label(slot.node_id)} ({slot.address}) {how}: {result.error}",
        )

    # -- ports, launch, stop ---------------------------------------------------------

    def free_ports(self, node: NodeSlot, count: int) -> Sequence[int]:
        """Ports free on ``node``; for a node lost since placement, any free ports here.

        Those are never used: the attempt's launch reports the lost node's
        ranks lost, and the attempt restarts without it.
        """
        entry = self._nodes[node.node_id]
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

    def launch(self, specs: Sequence[WorkerSpec]) -> None:
        by_node: dict[str, list[WorkerSpec]] = {}
        for spec in specs:
            by_node.setdefault(spec.node_id, []).append(spec)
        with self._lock:
            for node_id, node_specs in by_node.items():
                node = self._nodes[node_id]
                node.live_ranks = {s.rank: s.attempt for s in node_specs}
                node.claimed.clear()
                node.first_rank = min(s.rank for s in node_specs)
        for node_id, node_specs in by_node.items():
            node = self._nodes[node_id]
            if node.dead:  # lost between placement and launch: its ranks are lost too
                self._node_died(node, "its node was lost before its ranks were launched")
                continue
            result = call(node.actor.launch, node_specs, self._echo_ranks)
            if not isinstance(result, Ok):
                self._call_failed(node, result, "launching")
                continue
            if result.value is not None:
                failure = result.value
                # The agent started ranks in order up to the one that failed: the
                # rest will never report an exit.
                ranks = [s.rank for s in node_specs]
                later = ranks[ranks.index(failure.rank):] if failure.rank in ranks else []
                with self._lock:
                    for rank in later:
                        node.live_ranks.pop(rank, None)
                    self._lock.notify_all()
                raise failure.to_error()

    def _call_failed(self, node: _Node, result: Failed, doing: str) -> None:
        """What a failed call to a node's agent means, outside teardown."""
        if isinstance(result, NodeLost):
            self._node_died(node, f"{result.error} (while {doing})")
        elif isinstance(result, Unreachable):
            # Retried to the bound: as good as gone (a vanished machine).
            self._quarantined_until[node.node_id] = self._clock() + _UNREACHABLE_QUARANTINE_S
            self._node_died(node, f"unreachable while {doing}: {result.error}")
        elif isinstance(result, RayLost):
            self._lost_ray(result.error)
            self._node_died(node, f"Ray lost while {doing}")
        else:
            # The agent itself is broken: retire it (a new one next time) and say so.
            self._retire(node)
            raise NodeLaunchError(
                node.node_id, node.first_rank,
                f"the node agent on node {node_label(node.node_id)} ({node.address}) failed while "
                f"{doing}: {result.error}",
            )

    def stop_workers(self, signum: int, grace_s: float) -> None:
        live = [n for n in self._nodes.values() if not n.dead]
        deadline_at = self._clock() + grace_s + _STOP_SLACK_S
        calls = {n.node_id: submit(n.actor.stop, signum, grace_s) for n in live}
        for node_id, result in gather(calls, deadline_at, self._clock).items():
            if isinstance(result, Ok):
                continue
            if isinstance(result, AgentFailed):
                _log.warning("stop_failed", node=node_id, error=result.error)
                continue
            self._call_failed(self._nodes[node_id], result, "stopping")
        self._await_exit_reports(deadline_at)

    def _await_exit_reports(self, deadline_at: float) -> None:
        """Return once every rank's exit reached the driver; a silent node counts as lost."""
        with self._lock:
            while any(n.live_ranks for n in self._nodes.values()) and self._pump_alive():
                remaining_s = deadline_at - self._clock()
                if remaining_s <= 0:
                    break
                self._lock.wait(min(remaining_s, _NODE_POLL_S))
            silent = [n for n in self._nodes.values() if n.live_ranks]
        for node in silent:
            if self._pump_alive():
                self._node_died(node, "its agent did not report the exits of its ranks")
            else:  # stopped by its agent, but its exit can no longer be heard
                self._report_lost(node, "its exit could not be heard (the event pump stopped)")

    def kill_workers(self) -> None:
        for node in list(self._nodes.values()):
            if not node.dead:
                submit(node.actor.kill)

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
        calls = {n.node_id: submit(n.actor.heartbeat_ages) for n in nodes}
        ages: dict[int, float] = {}
        for result in gather(calls, self._clock() + _AGES_TIMEOUT_S, self._clock).values():
            if isinstance(result, Ok):  # out of reach: left out, the pump deals with the node
                ages.update(result.value)
        return ages

    # -- events ----------------------------------------------------------------------

    def _supervise_pump(self) -> None:
        """The pump, supervised: if it dies the driver hears of it, as a fault, at once."""
        try:
            self._pump_events()
        except Exception as error:  # noqa: BLE001 - whatever it was, the driver must hear
            if self._closed.is_set():
                return
            if failed(error) is not None:
                self._lost_ray(f"{type(error).__name__}: {error}")
                return
            _log.exception("event_pump_failed")
            self._raise_fault(
                BackendFault(
                    f"the Ray backend's event pump failed ({type(error).__name__}: {error}); "
                    "ranks' exits can no longer be heard",
                    requeue=False,
                )
            )

    def _pump_alive(self) -> bool:
        return self._fault is None and (self._pump is None or self._pump.is_alive())

    def _pump_events(self) -> None:
        """Keep one long poll outstanding per agent; hand what returns to the driver."""
        while not self._closed.is_set() and self._fault is None:
            polls = self._arm_polls()
            if not polls:
                with self._lock:
                    self._lock.wait(_NODE_POLL_S)
                continue
            for ref in wait_any(list(polls), _NODE_POLL_S):
                node = polls[ref]
                node.poll = None
                result = result_of(ref)
                if self._closed.is_set():
                    return  # agents die at close by design: teardown, not loss
                if isinstance(result, Ok):
                    self._deliver(node, result.value)
                elif isinstance(result, NodeLost):
                    self._node_died(node, result.error)
                elif isinstance(result, RayLost):
                    self._lost_ray(result.error)
                    return
                elif isinstance(result, AgentFailed):
                    raise RuntimeError(f"the agent on node {node_label(node.node_id)} failed: {result.error}")
                # Unreachable: the poll is simply made again.
            self._log_drops()

    def _arm_polls(self) -> dict[Any, _Node]:
        with self._lock:
            nodes = [n for n in self._nodes.values() if not n.dead]
        for node in nodes:
            if node.poll is None:
                poll = submit(node.actor.next_events, _POLL_S)
                if isinstance(poll, RayLost):
                    self._lost_ray(poll.error)
                elif isinstance(poll, NodeLost):
                    self._node_died(node, poll.error)
                elif not is_failed(poll):
                    node.poll = poll
        return {n.poll: n for n in nodes if n.poll is not None}

    def _deliver(self, node: _Node, events: AgentEvents) -> None:
        """Exits first, then the node's console lines: an exit never waits behind lines."""
        # An agent stamps exits with its own node's monotonic clock, which means
        # nothing here: restamp on arrival (one RPC later) on the driver's clock.
        now = self._clock()
        exits = [replace(exit, observed_at=now) for exit in events.exits]
        with self._lock:
            claimed = self._claim(node, [(e.rank, e.attempt) for e in exits])
        for exit in exits:
            if (exit.rank, exit.attempt) in claimed:
                self._report(exit)
        with self._lock:
            self._release(node, claimed)
        if events.lines_dropped:
            self._drops[node.node_id] = self._drops.get(node.node_id, 0) + events.lines_dropped
        if self._echo is not None:
            group = self._group_rank.get(node.node_id, "?")
            for rank, line in events.lines:
                self._echo(f"[node {group} rank {rank}] {line}")

    def _log_drops(self, *, now: bool = False) -> None:
        """Console lines dropped on the agents (a driver slower than its ranks' output)."""
        if not self._drops or (not now and self._clock() - self._drops_logged_at < _DROPS_LOGGED_EVERY_S):
            return
        drops, self._drops = self._drops, {}
        self._drops_logged_at = self._clock()
        for node_id, count in drops.items():
            _log.warning("console_lines_dropped", node=node_id, count=count,
                         detail="the ranks' logs have every line")

    def _claim(self, node: _Node, ended: Sequence[tuple[int, int]]) -> set[tuple[int, int]]:
        """Of these (rank, attempt), those live and not yet being reported; now claimed. Under the lock."""
        mine = {e for e in ended if node.live_ranks.get(e[0]) == e[1] and e not in node.claimed}
        node.claimed |= mine
        return mine

    def _release(self, node: _Node, reported: set[tuple[int, int]]) -> None:
        """Claimed ends now reported: the ranks stop counting as live. Under the lock."""
        for rank, attempt in reported:
            if node.live_ranks.get(rank) == attempt:
                del node.live_ranks[rank]
        node.claimed -= reported
        self._lock.notify_all()

    def _node_died(self, node: _Node, reason: str) -> None:
        """Mark the node lost (once) and report each of its live ranks lost with it (once).

        A node already marked lost can still hold ranks (placed before it was
        seen dead): they are reported all the same.
        """
        with self._lock:
            first = not node.dead
            node.dead = True
        if first:
            _log.warning("node_lost", node=node.node_id, reason=reason)
            self._kill_quietly(node.actor)  # if alive somewhere, it must not keep ranks running
        self._report_lost(node, reason)

    def _report_lost(self, node: _Node, reason: str) -> None:
        """Report the node's live ranks as lost, each once.

        The exits are reported before the ranks stop counting as live, so a
        drain waiting on them (``stop_workers``) returns only after they are queued.
        """
        with self._lock:
            lost = self._claim(node, list(node.live_ranks.items()))
        now = self._clock()
        for rank, attempt in sorted(lost):
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
            self._release(node, lost)

    def _retire(self, node: _Node) -> None:
        """A broken agent: dropped with its ranks (it is killed, they die with it)."""
        with self._lock:
            node.dead = True
            node.live_ranks.clear()
            node.claimed.clear()
            self._lock.notify_all()
        self._kill_quietly(node.actor)

    def _kill_quietly(self, actor: Any) -> None:
        try:
            self._kill_actor(actor)
        except Exception:  # noqa: BLE001 - an agent already gone is what we expect
            pass

    def _lost_ray(self, error: str) -> None:
        self._raise_fault(
            BackendFault(f"the driver lost its connection to Ray ({error})", requeue=True)
        )

    def _raise_fault(self, fault: BackendFault) -> None:
        """Tell the driver, once, that exits can no longer be heard."""
        with self._lock:
            if self._fault is not None or self._closed.is_set():
                return
            self._fault = fault
            self._lock.notify_all()
        _log.error("backend_fault", reason=fault.reason)
        self._report(fault)

    def _report(self, exit: WorkerExit | BackendFault) -> None:
        assert self._on_exit is not None
        self._on_exit(exit)

    # -- teardown --------------------------------------------------------------------

    def close(self) -> None:
        """Release every agent at once under one deadline, then Ray; errors here are
        teardown noise, never outcome."""
        if self._closed.is_set():
            return
        self._closed.set()
        with self._lock:
            self._lock.notify_all()
        nodes = list(self._nodes.values())
        closes = {n.node_id: submit(n.actor.close) for n in nodes}
        for node_id, result in gather(closes, self._clock() + _CLOSE_S, self._clock).items():
            if not isinstance(result, Ok):
                self._noise(node_id, "close", result.error)
        for node in nodes:
            try:
                self._kill_actor(node.actor)
            except Exception as error:  # noqa: BLE001 - teardown must not raise
                self._noise(node.node_id, "kill", f"{type(error).__name__}: {error}")
        self._log_drops(now=True)
        if self._pump is not None:
            self._pump.join(timeout=2 * _NODE_POLL_S + 1)
        try:
            if self._embedded is not None:
                self._embedded.shutdown()
            else:
                ray.shutdown()
        except Exception as error:  # noqa: BLE001 - teardown must not raise
            self._noise("-", "shutdown", f"{type(error).__name__}: {error}")

    @staticmethod
    def _noise(node_id: str, step: str, error: str) -> None:
        _log.info("teardown_noise", kind=FailureKind.TEARDOWN_NOISE.value, node=node_id, step=step,
                  error=error)
