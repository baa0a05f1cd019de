"""Planning an attempt: back off, wait for nodes, take ports and a checkpoint, fix the world and specs."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping

from elastic.backends.protocol import Backend, NodeLaunchError, NotEnoughNodes
from elastic.core.options.config import RunConfig
from elastic.core.diagnosis.preflight import NodeCommand
from elastic.core.failures import WorkerExit
from elastic.core.messages import (
    AttemptPlanned,
    NodesUnavailable,
    Observation,
    PlanAttempt,
    PreflightRan,
    WorkerExited,
)
from elastic.core.launch.inplace_helpers import spare_specs, store_host_spec
from elastic.core.launch.spec import WorkerSpec, adopted_specs, worker_specs
from elastic.core.launch.plan import AttemptPlan, World, plan_attempt
from elastic.core.run_layout import RunLayout
from elastic.core.takeover.running import RunningAttempt
from elastic.node.clock import Clock
from elastic.run.watches.checkpoints import CheckpointWatch
from elastic.worker.bootstrap import BOOTSTRAP_DIR

__all__ = ["Planner"]


class Planner:
    """Carries out :class:`PlanAttempt`; keeps the current plan and the specs to launch."""

    def __init__(
        self,
        config: RunConfig,
        backend: Backend,
        checkpoints: CheckpointWatch,
        *,
        base_env: Mapping[str, str],
        layout: RunLayout,
        stop_requested: threading.Event,
        backend_failed: Callable[[], bool],
        previous_world: World | None,
        clock: Clock,
    ) -> None:
        self._config = config
        self._backend = backend
        self._checkpoints = checkpoints
        self._base_env = base_env
        self._layout = layout
        self._stop_requested = stop_requested
        self._backend_failed = backend_failed
        # The world the dead driver's last attempt ran on, for the first resumed attempt.
        self._previous_world = previous_world
        self._clock = clock
        # Ranks start where elastic was started, on every node and in every attempt: read
        # once, so a job that deletes the directory gets a launch failure naming it, not a
        # FileNotFoundError here (each node's spawner checks it at the launch).
        self._cwd = os.getcwd()
        self.plan: AttemptPlan | None = None
        self.specs: tuple[WorkerSpec, ...] = ()
        # What the attempt starts beside its ranks: the in-place store's host and the warm spares (--spares).
        self.helpers: tuple[WorkerSpec, ...] = ()
        # The nodes whose --preflight passed for an attempt: not checked again when that
        # attempt is planned again without a node that failed.
        self._preflight_passed: tuple[int, frozenset[str]] = (-1, frozenset())

    def plan_attempt(self, command: PlanAttempt) -> Observation | None:
        """Back off, wait for nodes, then fix the world; ``None`` when a stop cut it short."""
        attempt = command.attempt
        config = self._config
        if command.delay_s > 0:  # the controller journaled the backoff with its level
            if self._stop_requested.wait(command.delay_s):
                return None  # the queued StopRequested ends the run
        world = self.plan.world if self.plan else self._previous_world
        previous = list(world.node_ids) if world else []
        try:
            nodes = self._backend.acquire_nodes(
                previous,
                config.min_nodes,
                config.max_nodes,
                config.node_wait_timeout_s,
                self._stop_requested,
                leave_out=command.leave_out,
            )
            free_master, free_coordinator, free_store = self._backend.free_ports(nodes[0], 3)
            # JAX's coordinator never shares a --master-port that happens to be the free one;
            # neither does the in-place store (--spares), which takes the port left.
            master_port = config.master_port or free_master
            coordinator_port, store_port = [
                port for port in (free_coordinator, free_master, free_store) if port != master_port
            ][:2]
        except NotEnoughNodes as missing:
            if self._stop_requested.is_set() or self._backend_failed():
                # Still queued: once the controller has handled either, its drain is final
                # (Draining.final) and no PlanAttempt follows, so nothing here waits on it.
                return None  # the queued StopRequested or BackendFailed ends the run
            return NodesUnavailable(attempt, missing.needed, missing.seen, self._clock.monotonic())
        except NodeLaunchError as error:  # a node's agent cannot start: nothing can run there
            return WorkerExited(
                WorkerExit(attempt=attempt, rank=error.rank, node=error.node,
                           returncode=error.returncode, observed_at=self._clock.monotonic(),
                           launch_error=str(error))
            )
        checkpoint = self._checkpoints.latest(journal_for=attempt)
        plan = plan_attempt(
            run_id=config.run_id,
            attempt=attempt,
            max_restarts=config.max_restarts,
            nodes=nodes,
            master_addr=config.master_addr,
            master_port=master_port,
            coordinator_port=coordinator_port,
            previous=world,
            checkpoint_dir=str(config.checkpoint_dir) if config.checkpoint_dir else None,
            resume_from=str(checkpoint.path) if checkpoint else None,
            resume_step=checkpoint.step if checkpoint else None,
            cache_dir=str(config.cache_dir) if config.cache_dir else None,
            torchelastic_run_id=config.torchelastic_run_id,
            inplace_store_port=store_port if config.spares > 0 else None,
        )
        self.plan = plan
        self.specs = worker_specs(
            plan,
            config.command,
            self._base_env,
            self._layout,
            isolate_gpus=config.isolate_gpus,
            cwd=self._cwd,
            hang=config.hang,
            progress=config.progress,
            init_timeout=config.init_timeout,
            longest_init_s=command.longest_init_s,
            prewarm=config.prewarm,
            prewarm_delay_s=config.prewarm_delay_s,
            prewarm_memory_pct=config.prewarm_memory_pct,
            bootstrap_dir=BOOTSTRAP_DIR if config.rank_bootstrap else None,
        )
        self.helpers = () if plan.inplace_store is None else (
            store_host_spec(plan, self.specs, self._layout),
            *spare_specs(plan, self.specs, self._layout, config.spares),
        )
        planned = AttemptPlanned(
            attempt, plan.world_size, self._clock.monotonic(), plan.resume_step, len(plan.nodes),
            plan={
                "world_size": plan.world_size,
                "nodes": [n.node_id for n in plan.nodes],
                # The backend's own id of each named node (Ray's): a later driver keeps the names.
                **({"node_ids": {n.node_id: n.backend_id for n in plan.nodes if n.backend_id}}
                   if any(n.backend_id for n in plan.nodes) else {}),
                "node_addresses": [n.address for n in plan.nodes],
                "nproc_per_node": [n.nproc for n in plan.nodes],
                "master_addr": plan.master_addr,
                "master_port": plan.master_port,
                "world_changed": plan.world_changed,
                "checkpoint_dir": plan.checkpoint_dir,  # None: no --checkpoint-dir, nothing to hand over
                "resume_from": plan.resume_from,
                "resume_step": plan.resume_step,
            },
            available=self._backend.available_nodes(),  # spares a suspected node's ranks may go to
        )
        if config.preflight is None:
            return planned
        return self._preflight(planned, config.preflight)

    def adopt(
        self, running: RunningAttempt, kept: Mapping[int, WorkerSpec], longest_init_s: float | None,
    ) -> dict[int, WorkerSpec] | str:
        """The attempt a dead driver left running, taken over: its plan rebuilt from its journal
        (``running``) on the nodes the backend has now and the ports its ranks were started with
        (``kept``, by pid, as their keepers started them), kept as the current plan, and the
        ranks' specs with this driver's policies, by pid; or why they cannot be taken over."""
        config, started = self._config, running.plan
        try:
            nodes = self._backend.acquire_nodes(
                list(running.nodes), len(running.nodes), len(running.nodes), 0.0, self._stop_requested,
            )
            env = next(iter(kept.values())).env
            master_port = int(env["MASTER_PORT"])
            coordinator_port = int(env.get("JAX_COORDINATOR_PORT", master_port))
        except NotEnoughNodes as missing:
            return f"only {missing.seen} of the attempt's {len(running.nodes)} nodes are there"
        except (StopIteration, KeyError, ValueError):
            return "the kept ranks do not say the ports they were started with"
        if [n.node_id for n in nodes] != list(running.nodes):
            return f"the attempt ran on {list(running.nodes)}, the backend has {[n.node_id for n in nodes]}"
        plan = plan_attempt(
            run_id=config.run_id,
            attempt=running.attempt,
            max_restarts=config.max_restarts,
            nodes=nodes,
            master_addr=str(started.get("master_addr") or "") or config.master_addr,
            master_port=master_port,
            coordinator_port=coordinator_port,
            previous=self._previous_world,
            checkpoint_dir=str(config.checkpoint_dir) if config.checkpoint_dir else None,
            resume_from=started.get("resume_from"),
            resume_step=running.resume_step,
            cache_dir=str(config.cache_dir) if config.cache_dir else None,
            torchelastic_run_id=config.torchelastic_run_id,
        )
        specs = adopted_specs(
            plan, kept, self._layout, isolate_gpus=config.isolate_gpus, hang=config.hang,
            progress=config.progress, init_timeout=config.init_timeout, longest_init_s=longest_init_s,
        )
        if isinstance(specs, dict):
            self.plan, self.specs = plan, tuple(sorted(specs.values(), key=lambda spec: spec.rank))
        return specs

    def _preflight(self, planned: AttemptPlanned, argv: tuple[str, ...]) -> PreflightRan | AttemptPlanned:
        """Every node of the plan runs ``--preflight`` with its first rank's environment, all at
        once; what each said goes to the controller, which decides what it means. A node that
        passed for this attempt already (the attempt is planned again without one that failed)
        is not checked again; when none is left to check, the plan stands as it is."""
        checked, passed = self._preflight_passed
        if checked != planned.attempt:
            passed = frozenset()
        first: dict[str, WorkerSpec] = {}
        for spec in self.specs:
            if spec.node_id not in passed:
                first.setdefault(spec.node_id, spec)
        if not first:
            return planned
        commands = [
            NodeCommand(node, argv, tuple(sorted(spec.env.items())), spec.cwd) for node, spec in first.items()
        ]
        timeout_s = self._config.preflight_timeout_s
        results = self._backend.run_on_nodes(commands, timeout_s)
        self._preflight_passed = (planned.attempt, passed | {r.node for r in results if r.passed})
        return PreflightRan(planned.attempt, tuple(results), self._backend.available_nodes(), timeout_s, planned,
                            self._clock.monotonic())
