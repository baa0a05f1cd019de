"""What each rank of an attempt is started with: its command line, its environment and
the spec a node agent runs. Pure.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from elastic.core.launch.compile_caches import cache_dirs, cache_env, folders_to_make
from elastic.core.launch.plan import AttemptPlan, GpuVendor, NodeSlot, RankAssignment
from elastic.core.run_layout import RunLayout
from elastic.core.training.init_hang import InitTimeout
from elastic.core.training.stall import ProgressPolicy
from elastic.core.launch.world_env import SLURM_TASK_VARIABLES, XPK_VARIABLES, slurm_env, xpk_env
from elastic.worker.bootstrap import with_bootstrap
from elastic.worker.heartbeat import HangPolicy
from elastic.worker.inplace.notice import GENERATION_VAR, NOTICE_VAR, SPARE_VAR, STORE_VAR

__all__ = [
    "LAUNCH_VARIABLES",
    "RANK_VARIABLES",
    "TORCHRUN_DEFAULTS",
    "RankStarted",
    "Role",
    "WorkerSpec",
    "adopted_specs",
    "isolated_device",
    "rank_gpus",
    "jax_local_device_ids",
    "resume_placeholder_error",
    "substitute_resume",
    "worker_env",
    "worker_specs",
]

ROLE_NAME = "default"
# The ELASTIC_* variables elastic sets in ranks. They are outputs only: an
# `elastic run` started inside a rank never reads them as its configuration
# (see elastic.cli.layering), so it gets its own run id and run directory.
RANK_VARIABLES = frozenset(
    {
        "ELASTIC_RUN_ID",
        "ELASTIC_ATTEMPT",
        "ELASTIC_NODE",
        "ELASTIC_HEARTBEAT_FILE",
        "ELASTIC_PREEMPTION_FILE",
        "ELASTIC_SIGNALS_FILE",
        "ELASTIC_STARTUP_FILE",
        "ELASTIC_COORDINATOR_ADDRESS",
        "ELASTIC_WORLD_CHANGED",
        "ELASTIC_CHECKPOINT_DIR",
        "ELASTIC_RESUME_FROM",
        "ELASTIC_RESUME_STEP",
        NOTICE_VAR,
        STORE_VAR,
        GENERATION_VAR,
        SPARE_VAR,
    }
)

# torchrun's values for the variables its agent sets only where the launcher has none
# (torch.distributed.elastic, torch 2.13). TORCH_NCCL_ASYNC_ERROR_HANDLING=1: NCCL's watchdog
# aborts the communicators and ends a rank whose collective failed or timed out (torch's own
# default, 3, ends it without the abort). TORCHELASTIC_SIGNALS_TO_HANDLE: the signals torchrun's
# agent forwards to its ranks, read by torch's `start_processes` should a rank start its own.
TORCHRUN_DEFAULTS = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
}
# Older spellings torch still reads for a variable of TORCHRUN_DEFAULTS: set, they are the user's choice.
_OLD_NAMES = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "NCCL_ASYNC_ERROR_HANDLING"}


@dataclass(frozen=True)
class RankStarted:
    """A rank's process as its node started it: its pid there, and the resident memory (KiB) of
    the warm interpreter that took it (``--prewarm``, ``--prewarm-memory``; None: started cold)."""

    pid: int
    warm_kb: int | None = None


class Role(enum.Enum):
    """What a process a node starts for an attempt is: a rank, or one that serves the ranks
    (:mod:`elastic.core.launch.inplace_helpers`), whose exit is no rank's failure."""

    RANK = "rank"
    SPARE = "spare"  # a warm spare waiting in elastic.worker.inplace for a lost rank's place (--spares)
    STORE = "store"  # the host of the in-place process group's store (--spares)


@dataclass(frozen=True)
class WorkerSpec:
    """One process to start: what a node agent needs and nothing more."""

    attempt: int
    rank: int
    local_rank: int
    node_id: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    log_path: str
    cwd: str | None = None
    hang: HangPolicy | None = None  # None: never called hung
    stack_path: str | None = None  # where its stacks go if a rank of its node hangs
    progress: ProgressPolicy | None = None  # how its steps are read and a stall called; None: not at all
    init_timeout: InitTimeout | None = None  # when it is hung in its distributed initialisation; None: never
    longest_init_s: float | None = None  # the run's longest completed initialisation so far (auto's window)
    prewarm: tuple[str, ...] = ()  # modules a warm interpreter imports for its next attempt (--prewarm)
    prewarm_delay_s: float = 0.0  # after this rank starts, before its warm successor starts (--prewarm-delay)
    # Without --prewarm: the percent of a node's memory its warm successors, started at each rank's
    # first step with what it imported, may hold (--prewarm-memory; 0: none).
    prewarm_memory_pct: float = 0.0
    private_dirs: tuple[str, ...] = ()  # made 0700 on its node before it starts (compile caches)
    # The GPUs the plan gives it: its node's visible ones, or its own with --isolate-gpus (0: none;
    # None: not known, a process the plan did not place).
    gpus: int | None = None
    role: Role = Role.RANK  # a spare or the store's host: ``rank`` is then the node's first rank's
    spare_index: int | None = None  # a spare's number on its node


# The variables of worker_env that may change from one attempt to the next (and
# from one rank to another): a warm interpreter (--prewarm) imports its modules
# without them and is handed them at launch. Frameworks read them when the
# script initialises its process group (torch.distributed, jax.distributed), not
# at import. Every other variable must be the same at launch as at the import,
# or the rank starts cold.
LAUNCH_VARIABLES = RANK_VARIABLES | frozenset(
    {
        "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
        "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
        "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE", "NODE_RANK",
        "GLOBAL_RANK", "NPROCS", "JAX_COORDINATOR_ADDRESS",
    }
) | XPK_VARIABLES | SLURM_TASK_VARIABLES


def isolated_device(local_rank: int, gpu_ids: Sequence[str]) -> str:
    """The one device a rank sees with ``--isolate-gpus``.

    ``gpu_ids`` is the node's visible list (its own ``CUDA_VISIBLE_DEVICES`` if
    set, else ``0..n-1``); each local rank gets its own entry.
    """
    if local_rank >= len(gpu_ids):
        raise ValueError(
            f"local rank {local_rank} has no GPU of its own: the node shows {len(gpu_ids)}"
        )
    return gpu_ids[local_rank]


def rank_gpus(plan: AttemptPlan, assignment: RankAssignment, *, isolate_gpus: bool) -> int:
    """The GPUs a rank of the plan is given: its own one with ``--isolate-gpus``, else every GPU
    its node shows (0 on a node that shows none)."""
    shown = len(plan.node(assignment.node_id).gpu_ids)
    return min(1, shown) if isolate_gpus else shown


def worker_env(
    base_env: Mapping[str, str],
    plan: AttemptPlan,
    assignment: RankAssignment,
    layout: RunLayout,
    *,
    isolate_gpus: bool = False,
    bootstrap_dir: str | None = None,
) -> dict[str, str]:
    """The complete environment of one rank: the driver's captured one plus the plan.

    torchrun's variables first, with its values where it has defaults (existing
    scripts run unchanged; ``MASTER_ADDR`` is the plan's address), then the
    ``ELASTIC_*`` additions, XPK's variables for MaxText and, inside a Slurm
    allocation, Slurm's task variables with elastic's world
    (:mod:`elastic.core.launch.world_env`). ``bootstrap_dir`` (``--rank-bootstrap``) goes
    first on ``PYTHONPATH``; with it ``JAX_COORDINATOR_ADDRESS`` is the coordinator's
    host alone, as XPK sets it, and the bootstrap gives JAX the attempt's port.
    Nothing of the node agent's own environment enters.
    """
    node = plan.node(assignment.node_id)
    world = str(plan.world_size)
    rank = str(assignment.rank)
    coordinator = f"{plan.master_addr}:{plan.coordinator_port}"
    env = dict(base_env)
    env.update(
        {
            "RANK": rank,
            "LOCAL_RANK": str(assignment.local_rank),
            "WORLD_SIZE": world,
            "LOCAL_WORLD_SIZE": str(assignment.local_world_size),
            "GROUP_RANK": str(assignment.group_rank),
            "GROUP_WORLD_SIZE": str(len(plan.nodes)),
            "ROLE_NAME": ROLE_NAME,
            "ROLE_RANK": rank,
            "ROLE_WORLD_SIZE": world,
            "MASTER_ADDR": plan.master_addr,
            "MASTER_PORT": str(plan.master_port),
            "TORCHELASTIC_RESTART_COUNT": str(plan.attempt),
            "TORCHELASTIC_MAX_RESTARTS": str(plan.max_restarts),
            "TORCHELASTIC_RUN_ID": plan.torchelastic_run_id or plan.run_id,  # torchrun's --rdzv-id as typed
            "TORCHELASTIC_ERROR_FILE": str(layout.error_file(plan.attempt, assignment.rank)),
            # torchrun sets True: its agent serves the TCPStore at MASTER_ADDR:MASTER_PORT and
            # torch's env:// rendezvous makes every rank its client. elastic serves none there,
            # so always False (an inherited True would have each rank wait on a store nobody
            # serves): rank 0 hosts it, as with MASTER_ADDR and MASTER_PORT alone.
            "TORCHELASTIC_USE_AGENT_STORE": "False",
            "NODE_RANK": str(assignment.group_rank),
            "GLOBAL_RANK": rank,
            "NPROCS": world,
            "ELASTIC_RUN_ID": plan.run_id,
            "ELASTIC_ATTEMPT": str(plan.attempt),
            "ELASTIC_NODE": assignment.node_id,  # its node as the launcher names it (Ray's node id, the host)
            "ELASTIC_HEARTBEAT_FILE": str(layout.heartbeat_file(plan.attempt, assignment.rank)),
            "ELASTIC_PREEMPTION_FILE": str(layout.preemption_file(plan.attempt, assignment.rank)),
            "ELASTIC_SIGNALS_FILE": str(layout.signals_file(plan.attempt, assignment.rank)),
            "ELASTIC_STARTUP_FILE": str(layout.startup_file(plan.attempt, assignment.rank)),
            "ELASTIC_COORDINATOR_ADDRESS": coordinator,
            # What jax.distributed.initialize() reads itself, host:port; with the bootstrap,
            # which gives JAX the attempt's coordinator, the host alone, as MaxText's CPU path
            # reads it (XPK's convention).
            "JAX_COORDINATOR_ADDRESS": coordinator if bootstrap_dir is None else plan.master_addr,
            "ELASTIC_WORLD_CHANGED": "1" if plan.world_changed else "0",
        }
    )
    env.update(xpk_env(plan, assignment))
    env.update(slurm_env(base_env, plan, assignment))
    if bootstrap_dir is not None:
        env["PYTHONPATH"] = with_bootstrap(base_env.get("PYTHONPATH"), bootstrap_dir)
    for name in ("ELASTIC_CHECKPOINT_DIR", "ELASTIC_RESUME_FROM", "ELASTIC_RESUME_STEP"):
        env.pop(name, None)  # only this attempt's checkpoint, never an inherited one
    if plan.checkpoint_dir is not None:
        env["ELASTIC_CHECKPOINT_DIR"] = plan.checkpoint_dir
    if plan.resume_from is not None:
        env["ELASTIC_RESUME_FROM"] = plan.resume_from
        env["ELASTIC_RESUME_STEP"] = str(plan.resume_step)
    for name in (STORE_VAR, NOTICE_VAR, GENERATION_VAR, SPARE_VAR):
        env.pop(name, None)  # only this launcher's in-place restarts, never an outer one's
    if plan.inplace_store is not None:
        env[STORE_VAR] = plan.inplace_store
        env[GENERATION_VAR] = "0"
        env[NOTICE_VAR] = str(layout.inplace_notice(plan.attempt, assignment.rank))
    if assignment.local_world_size > 1:
        env.setdefault("OMP_NUM_THREADS", "1")
    for name, value in TORCHRUN_DEFAULTS.items():
        if _OLD_NAMES.get(name) not in base_env:
            env.setdefault(name, value)
    env.setdefault("PYTHONFAULTHANDLER", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(cache_env(base_env, cache_dirs(plan.cache_dir)))
    if isolate_gpus:
        device = isolated_device(assignment.local_rank, node.gpu_ids)
        env["CUDA_VISIBLE_DEVICES"] = device
        if node.gpu_vendor is GpuVendor.ROCM:
            env["HIP_VISIBLE_DEVICES"] = device
    jax_devices = jax_local_device_ids(node, assignment, isolate_gpus=isolate_gpus)
    if jax_devices is not None:
        env["JAX_LOCAL_DEVICE_IDS"] = jax_devices
    return env


def jax_local_device_ids(node: NodeSlot, assignment: RankAssignment, *, isolate_gpus: bool) -> str | None:
    """The devices JAX should use in a rank that shares a GPU node (``JAX_LOCAL_DEVICE_IDS``), else ``None``.

    As JAX's own Slurm and Open MPI detection does: with several processes on a
    node, each uses one device, its local rank's (the only one it sees, ``0``,
    with ``--isolate-gpus``). One process per node, or no GPUs: JAX uses all it sees.
    """
    if node.gpu_vendor is GpuVendor.NONE or assignment.local_world_size < 2:
        return None
    if isolate_gpus:
        return "0"
    return str(assignment.local_rank) if assignment.local_rank < len(node.gpu_ids) else None


# ``{resume_from?--flag}`` as a whole argument: ``--flag=VALUE`` on resume, no argument at all
# on a fresh start (so ``trainer.train(resume_from_checkpoint=args.flag)`` sees its default).
_OPTIONAL_RESUME = re.compile(r"\{(resume_from|resume_step)\?([^{}=\s]+)\}")


def resume_placeholder_error(argv: Sequence[str]) -> str | None:
    """Why an optional placeholder in the command is malformed, or ``None``: it must be a whole argument."""
    for arg in argv:
        if ("{resume_from?" in arg or "{resume_step?" in arg) and not _OPTIONAL_RESUME.fullmatch(arg):
            return (
                f"{arg!r}: an optional placeholder must be a whole argument, "
                "`{resume_from?FLAG}` or `{resume_step?FLAG}`, e.g. `{resume_from?--resume_from_checkpoint}`"
            )
    return None


def substitute_resume(argv: Sequence[str], plan: AttemptPlan) -> tuple[str, ...]:
    """``{resume_from}`` and ``{resume_step}`` in the command, empty on a fresh start;
    an argument ``{resume_from?FLAG}`` becomes ``FLAG=PATH``, or disappears on a fresh start."""
    values = {
        "{resume_from}": plan.resume_from or "",
        "{resume_step}": "" if plan.resume_step is None else str(plan.resume_step),
    }
    optional = {
        "resume_from": plan.resume_from,
        "resume_step": None if plan.resume_step is None else str(plan.resume_step),
    }
    substituted = []
    for arg in argv:
        match = _OPTIONAL_RESUME.fullmatch(arg)
        if match is not None:
            value = optional[match.group(1)]
            if value is not None:
                substituted.append(f"{match.group(2)}={value}")
            continue
        for placeholder, value in values.items():
            arg = arg.replace(placeholder, value)
        substituted.append(arg)
    return tuple(substituted)


def worker_specs(
    plan: AttemptPlan,
    argv: Sequence[str],
    base_env: Mapping[str, str],
    layout: RunLayout,
    *,
    isolate_gpus: bool = False,
    cwd: str | None = None,
    hang: HangPolicy | None = None,
    progress: ProgressPolicy | None = None,
    init_timeout: InitTimeout | None = None,
    longest_init_s: float | None = None,
    prewarm: tuple[str, ...] = (),
    prewarm_delay_s: float = 0.0,
    prewarm_memory_pct: float = 0.0,
    bootstrap_dir: str | None = None,
) -> tuple[WorkerSpec, ...]:
    """One :class:`WorkerSpec` per rank of the plan."""
    argv = substitute_resume(argv, plan)
    dirs = cache_dirs(plan.cache_dir)
    specs = []
    for a in plan.ranks:
        env = worker_env(base_env, plan, a, layout, isolate_gpus=isolate_gpus, bootstrap_dir=bootstrap_dir)
        specs.append(
            WorkerSpec(
                attempt=plan.attempt,
                rank=a.rank,
                local_rank=a.local_rank,
                node_id=a.node_id,
                argv=argv,
                env=env,
                log_path=str(layout.rank_log(plan.attempt, a.rank)),
                cwd=cwd,
                hang=hang,
                stack_path=_stack_path(layout, plan.attempt, a.rank),
                progress=progress,
                init_timeout=init_timeout,
                longest_init_s=longest_init_s,
                prewarm=prewarm,
                prewarm_delay_s=prewarm_delay_s,
                prewarm_memory_pct=prewarm_memory_pct,
                private_dirs=folders_to_make(env, dirs),
                gpus=rank_gpus(plan, a, isolate_gpus=isolate_gpus),
            )
        )
    return tuple(specs)


def adopted_specs(
    plan: AttemptPlan,
    kept: Mapping[int, WorkerSpec],
    layout: RunLayout,
    *,
    isolate_gpus: bool = False,
    hang: HangPolicy | None = None,
    progress: ProgressPolicy | None = None,
    init_timeout: InitTimeout | None = None,
    longest_init_s: float | None = None,
) -> dict[int, WorkerSpec] | str:
    """The ranks a dead driver's keepers kept (``kept``, by pid: each as its spawn request started
    it), placed on ``plan`` (the attempt's, rebuilt) with this driver's policies, by pid; or why
    they are not that plan's ranks (a rank missing or twice, on another node or local rank)."""
    assigned = {a.rank: a for a in plan.ranks}
    ranks = sorted(spec.rank for spec in kept.values())
    if ranks != sorted(assigned):
        return f"the kept ranks {ranks} are not the {plan.world_size} of attempt {plan.attempt}'s plan"
    specs = {}
    for pid, spec in kept.items():
        a = assigned[spec.rank]
        if spec.attempt != plan.attempt or spec.local_rank != a.local_rank:
            return (f"kept rank {spec.rank} (pid {pid}) is local rank {spec.local_rank} of attempt {spec.attempt}, "
                    f"not local rank {a.local_rank} of attempt {plan.attempt}")
        specs[pid] = replace(
            spec, node_id=a.node_id, hang=hang, stack_path=_stack_path(layout, plan.attempt, a.rank),
            progress=progress, init_timeout=init_timeout, longest_init_s=longest_init_s,
            gpus=rank_gpus(plan, a, isolate_gpus=isolate_gpus),
        )
    return specs


def _stack_path(layout: RunLayout, attempt: int, rank: int) -> str:
    """Where a rank's stacks go if a rank of its node hangs."""
    return str(layout.stacks_dir(attempt) / f"rank-{rank}.txt")
