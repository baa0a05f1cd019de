"""JAX's own idiom under the launcher: a bare ``jax.distributed.initialize()`` joins elastic's world,
one world of N processes, also inside a Slurm job step, an Open MPI job or a Kubernetes pod whose
variables describe a world of 1."""

from __future__ import annotations

import re

import pytest
from harness import Finished, Launcher, launcher_env, script, skip_unless_installed

skip_unless_installed("jax")

RUN_TIMEOUT_S = 180.0  # N processes importing JAX on a loaded 2-core machine
pytestmark = pytest.mark.timeout(RUN_TIMEOUT_S + 30)
WORLD_LINE = re.compile(r"world process=(\d+) count=(\d+) devices=(\d+) sum=(\d+) coordinator=(\S+) given=(\S+)")
# What a launcher started inside a Slurm job step of one task inherits (srun -n1 elastic run ...).
JOB_STEP = {
    "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0", "SLURM_NTASKS": "1", "SLURM_NPROCS": "1", "SLURM_STEP_NUM_TASKS": "1",
    "SLURM_NNODES": "1", "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_NODELIST": "localhost",
    "SLURM_JOB_NODELIST": "localhost", "SLURM_TASKS_PER_NODE": "1",
}


# What a launcher started by `mpirun -n 1` inside a Kubernetes pod inherits.
MPI_IN_A_POD = {
    "OMPI_MCA_orte_hnp_uri": "1531576320.0;tcp://10.96.0.1:34911", "OMPI_COMM_WORLD_SIZE": "1",
    "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "0", "KUBERNETES_SERVICE_HOST": "10.96.0.2",
}


def _run(launcher: Launcher, ranks: int, *options: object, slurm: bool = False,
         extra: dict[str, str] | None = None) -> Finished:
    env = launcher_env(JAX_PLATFORMS="cpu", **(JOB_STEP if slurm else {}), **(extra or {}))
    return launcher.run("--nproc-per-node", ranks, *options, command=script("jax_bare_init.py"), env=env,
                        timeout_s=RUN_TIMEOUT_S)


def _worlds(run: Finished, ranks: int) -> list[tuple[int, int, int, int, bool]]:
    """Each rank's process id, count, global devices, gathered sum, and whether JAX connected
    to the attempt's coordinator."""
    found = []
    for rank in range(ranks):
        match = WORLD_LINE.search(run.rank_log(0, rank))
        assert match is not None, run.rank_log(0, rank)[-3000:]
        process, count, devices, total = (int(group) for group in match.groups()[:4])
        found.append((process, count, devices, total, match.group(5) == match.group(6)))
    return found


@pytest.mark.parametrize("slurm", [False, True], ids=["plain", "slurm-job-step"])
@pytest.mark.parametrize("ranks", [2, 4])
def test_a_bare_initialize_joins_one_world_of_n(launcher: Launcher, ranks: int, slurm: bool) -> None:
    """Each rank is process RANK of WORLD_SIZE, sees every process's device, sums with all of them,
    and connected to the attempt's coordinator (never a Slurm-derived or fixed port)."""
    run = _run(launcher, ranks, slurm=slurm)
    assert 0 == run.returncode, run.explain()
    total = ranks * (ranks + 1) // 2
    assert [(rank, ranks, ranks, total, True) for rank in range(ranks)] == _worlds(run, ranks)


def test_open_mpi_and_kubernetes_variables_do_not_split_the_world(launcher: Launcher) -> None:
    """JAX's Open MPI detection (and Kubernetes', after it) would make each rank process 0 of 1:
    elastic's comes first."""
    run = _run(launcher, 2, extra=MPI_IN_A_POD)
    assert 0 == run.returncode, run.explain()
    assert [(0, 2, 2, 3, True), (1, 2, 2, 3, True)] == _worlds(run, 2)


def test_inside_slurm_even_without_the_bootstrap_jax_sees_elastics_world(launcher: Launcher) -> None:
    """--rank-bootstrap off: JAX's own Slurm detection reads the task variables, which are elastic's world."""
    run = _run(launcher, 2, "--rank-bootstrap", "off", slurm=True)
    assert 0 == run.returncode, run.explain()
    assert [(0, 2, 2, 3, True), (1, 2, 2, 3, True)] == _worlds(run, 2)


def test_without_the_bootstrap_a_bare_initialize_has_no_world(launcher: Launcher) -> None:
    """--rank-bootstrap off outside Slurm: JAX finds no process count, as it would without elastic."""
    run = _run(launcher, 2, "--rank-bootstrap", "off", "--max-restarts", 0)
    assert 0 != run.returncode
    # The rank that fails first is the one to say it: its peer may be stopped as collateral
    # before it gets that far (under load, still importing JAX).
    assert any("Number of processes must be defined" in run.rank_log(0, rank) for rank in range(2)), run.explain()

