"""What ranks see of other launchers' conventions (XPK's for MaxText, Slurm's task variables) and of
the rank bootstrap: elastic's world, whatever the launcher inherited. Pure functions."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic.core.launch.spec import LAUNCH_VARIABLES, worker_env
from elastic.core.launch.plan import NodeSlot, plan_attempt
from elastic.core.run_layout import RunLayout
from elastic.core.launch.world_env import SLURM_TASK_VARIABLES, XPK_VARIABLES, slurm_task_counts
from elastic.worker.bootstrap import with_bootstrap
from elastic.worker.bootstrap.jax_cluster import World, coordinator_for, world_from_env

LAYOUT = RunLayout(Path("/runs/r1"))
BOOT = "/site/elastic/worker/bootstrap"
# What a launcher started in a Slurm job step inherits: the step's one task.
JOB_STEP = {
    "SLURM_JOB_ID": "812", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
    "SLURM_NTASKS": "1", "SLURM_NPROCS": "1", "SLURM_STEP_NUM_TASKS": "1", "SLURM_NNODES": "1",
    "SLURM_STEP_NUM_NODES": "1", "SLURM_TASKS_PER_NODE": "1", "SLURM_STEP_TASKS_PER_NODE": "1",
    "SLURM_STEP_NODELIST": "n1", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_NUM_NODES": "2",
}


def _plan(per_node: tuple[int, ...] = (2, 2)):  # type: ignore[no-untyped-def]
    nodes = [NodeSlot(f"n{i}", f"10.0.0.{i + 1}", n) for i, n in enumerate(per_node)]
    return plan_attempt(run_id="r1", attempt=0, max_restarts=3, nodes=nodes, master_addr=None,
                        master_port=29500, coordinator_port=29600, previous=None)


def test_maxtext_cpu_path_computes_elastic_rank_and_world() -> None:
    """JOB_INDEX * PROCESSES_IN_JOB + JOB_COMPLETION_INDEX is RANK, of JAX_PROCESS_COUNT = WORLD_SIZE."""
    p = _plan((2, 1))
    for assignment in p.ranks:
        env = worker_env({}, p, assignment, LAYOUT)
        process_id = int(env["JOB_INDEX"]) * int(env["PROCESSES_IN_JOB"]) + int(env["JOB_COMPLETION_INDEX"])
        assert (assignment.rank, 3) == (process_id, int(env["JAX_PROCESS_COUNT"]))


def test_maxtext_gpu_path_reads_the_attempt_coordinator_and_one_process_a_node() -> None:
    """JAX_COORDINATOR_IP:JAX_COORDINATOR_PORT is the attempt's coordinator; NNODES and NODE_RANK count nodes."""
    p = _plan((2, 2))
    env = worker_env({"NNODES": "9"}, p, p.ranks[3], LAYOUT)
    assert env["ELASTIC_COORDINATOR_ADDRESS"] == f"{env['JAX_COORDINATOR_IP']}:{env['JAX_COORDINATOR_PORT']}"
    assert ("2", "1") == (env["NNODES"], env["NODE_RANK"])


def test_with_the_bootstrap_jax_coordinator_address_is_the_host_alone_and_pythonpath_starts_with_it() -> None:
    """MaxText's CPU path resolves JAX_COORDINATOR_ADDRESS as a host name; the user's PYTHONPATH follows the bootstrap."""
    p = _plan()
    env = worker_env({"PYTHONPATH": "/mine:/theirs"}, p, p.ranks[1], LAYOUT, bootstrap_dir=BOOT)
    assert ("10.0.0.1", "10.0.0.1:29600") == (env["JAX_COORDINATOR_ADDRESS"], env["ELASTIC_COORDINATOR_ADDRESS"])
    assert f"{BOOT}:/mine:/theirs" == env["PYTHONPATH"]


def test_without_the_bootstrap_pythonpath_is_the_users_and_the_address_is_host_port() -> None:
    """--rank-bootstrap off: JAX_COORDINATOR_ADDRESS in JAX's own form, PYTHONPATH untouched (or absent)."""
    p = _plan()
    assert "/mine" == worker_env({"PYTHONPATH": "/mine"}, p, p.ranks[0], LAYOUT)["PYTHONPATH"]
    env = worker_env({}, p, p.ranks[0], LAYOUT)
    assert ("10.0.0.1:29600", None) == (env["JAX_COORDINATOR_ADDRESS"], env.get("PYTHONPATH"))


@pytest.mark.parametrize(
    ("pythonpath", "expected"),
    [
        (None, BOOT),
        ("", BOOT),  # an empty PYTHONPATH adds nothing; "BOOT:" would add the working directory
        ("/a", f"{BOOT}:/a"),
        ("/a::/b", f"{BOOT}:/a::/b"),  # the user's own empty entry (the working directory) is kept
        (f"{BOOT}:/a", f"{BOOT}:/a"),  # an elastic run inside a rank: once
        (f"/a:{BOOT}", f"{BOOT}:/a"),
    ],
)
def test_the_bootstrap_goes_first_once_and_keeps_the_rest(pythonpath: str | None, expected: str) -> None:
    """with_bootstrap prepends the folder once and never turns an empty PYTHONPATH into the working directory."""
    assert expected == with_bootstrap(pythonpath, BOOT)


def test_inside_a_slurm_job_step_the_task_variables_are_elastics_world() -> None:
    """A launcher in a one-task job step: each rank's SLURM_PROCID, SLURM_NTASKS... describe elastic's world."""
    p = _plan((2, 1))
    env = worker_env(JOB_STEP, p, p.ranks[2], LAYOUT)
    expected = {
        "SLURM_PROCID": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "1", "SLURM_NTASKS": "3",
        "SLURM_NPROCS": "3", "SLURM_STEP_NUM_TASKS": "3", "SLURM_NNODES": "2", "SLURM_STEP_NUM_NODES": "2",
        "SLURM_NTASKS_PER_NODE": "1", "SLURM_TASKS_PER_NODE": "2,1", "SLURM_STEP_TASKS_PER_NODE": "2,1",
        # the allocation's own facts stay
        "SLURM_JOB_ID": "812", "SLURM_STEP_NODELIST": "n1", "SLURM_JOB_NODELIST": "n[1-2]",
        "SLURM_JOB_NUM_NODES": "2",
    }
    assert expected == {name: value for name, value in env.items() if name.startswith("SLURM_")}


def test_only_the_task_variables_the_launcher_has_are_rewritten() -> None:
    """A batch script without --ntasks has no SLURM_NTASKS: none is invented (Lightning would take it for srun)."""
    p = _plan()
    batch = {"SLURM_JOB_ID": "812", "SLURM_PROCID": "0", "SLURM_NODEID": "0", "SLURM_LOCALID": "0"}
    env = worker_env(batch, p, p.ranks[3], LAYOUT)
    assert {"SLURM_JOB_ID": "812", "SLURM_PROCID": "3", "SLURM_NODEID": "1", "SLURM_LOCALID": "1"} == {
        name: value for name, value in env.items() if name.startswith("SLURM_")
    }


def test_outside_slurm_no_slurm_variable_is_set() -> None:
    """Fake Slurm variables would make Lightning and others believe they run under Slurm."""
    p = _plan()
    assert [] == [name for name in worker_env({"SLURM_PROCID": "0"}, p, p.ranks[1], LAYOUT) if name != "SLURM_PROCID"
                  and name.startswith("SLURM_")]
    assert "0" == worker_env({"SLURM_PROCID": "0"}, p, p.ranks[1], LAYOUT)["SLURM_PROCID"]  # no job: not ours


def test_the_new_rank_variables_are_launch_variables() -> None:
    """They differ per rank or attempt, so a warm interpreter (--prewarm) is handed them at launch."""
    assert set() == (XPK_VARIABLES | SLURM_TASK_VARIABLES) - LAUNCH_VARIABLES


@pytest.mark.parametrize(
    ("counts", "expected"), [([1], "1"), ([2, 2], "2(x2)"), ([2, 2, 1], "2(x2),1"), ([1, 2, 2], "1,2(x2)")]
)
def test_tasks_per_node_in_slurm_notation(counts: list[int], expected: str) -> None:
    """SLURM_TASKS_PER_NODE's run-length form."""
    assert expected == slurm_task_counts(counts)


RANK_ENV = {"WORLD_SIZE": "4", "RANK": "1", "ELASTIC_COORDINATOR_ADDRESS": "10.0.0.1:29600"}


def test_the_world_comes_from_the_rank_variables_and_is_absent_outside_elastic() -> None:
    """RANK, WORLD_SIZE and ELASTIC_COORDINATOR_ADDRESS, all three, or no world."""
    assert World(4, 1, "10.0.0.1:29600") == world_from_env(RANK_ENV)
    assert None is world_from_env({**RANK_ENV, "RANK": "4"})
    assert None is world_from_env({"WORLD_SIZE": "4", "RANK": "1"})
    assert None is world_from_env({**RANK_ENV, "ELASTIC_COORDINATOR_ADDRESS": "10.0.0.1"})


WORLD = World(4, 1, "10.0.0.1:29600")


@pytest.mark.parametrize(
    ("given", "num_processes", "process_id", "expected", "says"),
    [
        (None, None, None, "10.0.0.1:29600", None),  # bare initialize(): JAX_COORDINATOR_ADDRESS may be a bare host
        ("10.0.0.1:29600", 4, 1, "10.0.0.1:29600", None),  # elastic.worker.jax.initialize()
        ("10.0.0.1:1234", 4, 1, "10.0.0.1:29600", "using this attempt's coordinator"),  # MaxText's CPU path
        ("10.0.0.1:1234", None, None, "10.0.0.1:29600", "using this attempt's coordinator"),
        ("h:5", 2, 0, "h:5", "is not elastic's world"),  # another world keeps its own address
        (None, 2, 0, "10.0.0.1:29600", "is not elastic's world"),
    ],
)
def test_a_call_that_joins_elastics_world_uses_the_attempts_coordinator(
    given: str | None, num_processes: int | None, process_id: int | None, expected: str, says: str | None
) -> None:
    """coordinator_for: the attempt's coordinator for elastic's world; a line says when it replaced one or the world differs."""
    coordinator, notice = coordinator_for(given, num_processes, process_id, WORLD)
    assert expected == coordinator
    assert (says is None) == (notice is None)
    assert says is None or (notice is not None and says in notice)


def test_outside_elastic_the_call_is_left_alone() -> None:
    """No world: nothing changes and nothing is said."""
    assert ("h:5", None) == coordinator_for("h:5", None, None, None)
