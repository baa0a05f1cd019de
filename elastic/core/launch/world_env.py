"""Elastic's world in the variables of other launchers' conventions, which frameworks read. Pure.

- MaxText reads the variables of Google's XPK launcher: on its CPU path the
  coordinator's host in ``JAX_COORDINATOR_ADDRESS`` (it adds port 1234) and
  its process id as ``JOB_INDEX * PROCESSES_IN_JOB + JOB_COMPLETION_INDEX`` of
  ``JAX_PROCESS_COUNT``; on its GPU path ``JAX_COORDINATOR_IP``,
  ``JAX_COORDINATOR_PORT``, and ``NNODES`` processes of which it is
  ``NODE_RANK``, one a node. :func:`xpk_env` gives them elastic's values: one
  job of ``WORLD_SIZE`` processes, ``NNODES`` the number of nodes (as
  ``GROUP_WORLD_SIZE``), the attempt's coordinator.
- Inside a Slurm allocation a rank inherits the launcher's task variables
  (``SLURM_PROCID=0``, ``SLURM_NTASKS=1`` of its batch script or job step), which
  JAX's Slurm detection and Lightning's ``SLURMEnvironment`` take for the
  world. :func:`slurm_env` rewrites the task variables the launcher has to
  elastic's world, so every reader agrees; the allocation's own facts (job id,
  node list, CPUs, GPUs) stay as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from elastic.core.launch.plan import AttemptPlan, RankAssignment

__all__ = ["SLURM_TASK_VARIABLES", "XPK_VARIABLES", "slurm_env", "slurm_task_counts", "xpk_env"]

XPK_VARIABLES = frozenset(
    {"JAX_COORDINATOR_IP", "JAX_COORDINATOR_PORT", "NNODES", "JOB_INDEX", "JOB_COMPLETION_INDEX",
     "PROCESSES_IN_JOB", "JAX_PROCESS_COUNT"}
)
# Slurm's variables that describe the tasks of a job step, rewritten where the launcher has them.
SLURM_TASK_VARIABLES = frozenset(
    {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_NPROCS",
     "SLURM_STEP_NUM_TASKS", "SLURM_NNODES", "SLURM_STEP_NUM_NODES", "SLURM_NTASKS_PER_NODE",
     "SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE"}
)


def xpk_env(plan: AttemptPlan, assignment: RankAssignment) -> dict[str, str]:
    """XPK's variables, as MaxText's CPU and GPU paths read them, for this rank of the plan."""
    world = str(plan.world_size)
    return {
        "JAX_COORDINATOR_IP": plan.master_addr,
        "JAX_COORDINATOR_PORT": str(plan.coordinator_port),
        "NNODES": str(len(plan.nodes)),
        "JOB_INDEX": "0",
        "JOB_COMPLETION_INDEX": str(assignment.rank),
        "PROCESSES_IN_JOB": world,
        "JAX_PROCESS_COUNT": world,
    }


def slurm_task_counts(counts: Sequence[int]) -> str:
    """Tasks per node in Slurm's notation: ``[2, 2, 1]`` is ``2(x2),1``."""
    runs: list[list[int]] = []
    for count in counts:
        if runs and runs[-1][0] == count:
            runs[-1][1] += 1
        else:
            runs.append([count, 1])
    return ",".join(str(count) if times == 1 else f"{count}(x{times})" for count, times in runs)


def slurm_env(base_env: Mapping[str, str], plan: AttemptPlan, assignment: RankAssignment) -> dict[str, str]:
    """Slurm's task variables with elastic's world, for those the launcher has (none outside Slurm).

    ``SLURM_NTASKS_PER_NODE`` is added where ``SLURM_NTASKS`` is: Lightning refuses a
    Slurm world of several tasks without it.
    """
    if "SLURM_JOB_ID" not in base_env:
        return {}
    nodes = str(len(plan.nodes))
    world = str(plan.world_size)
    per_node = slurm_task_counts([node.nproc for node in plan.nodes])
    values = {
        "SLURM_PROCID": str(assignment.rank),
        "SLURM_LOCALID": str(assignment.local_rank),
        "SLURM_NODEID": str(assignment.group_rank),
        "SLURM_NTASKS": world,
        "SLURM_NPROCS": world,
        "SLURM_STEP_NUM_TASKS": world,
        "SLURM_NNODES": nodes,
        "SLURM_STEP_NUM_NODES": nodes,
        "SLURM_NTASKS_PER_NODE": str(assignment.local_world_size),
        "SLURM_TASKS_PER_NODE": per_node,
        "SLURM_STEP_TASKS_PER_NODE": per_node,
    }
    present = {name for name in values if name in base_env}
    if "SLURM_NTASKS" in base_env:
        present.add("SLURM_NTASKS_PER_NODE")
    return {name: values[name] for name in sorted(present)}
