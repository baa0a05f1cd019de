"""JAX across Ray nodes on loopback: a bare ``jax.distributed.initialize()`` joins one world spanning
the nodes, inside a Slurm job step too, and MaxText's one-process-a-node GPU path (``hardware=gpu``:
``JAX_COORDINATOR_IP``, ``JAX_COORDINATOR_PORT``, ``NNODES``, ``NODE_RANK``; run on CPU here) joins
elastic's world of one process per node."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from harness import Finished, Launcher, launcher_env, maxtext_command, maxtext_env, maxtext_steps, script, skip_unless_installed

skip_unless_installed("jax")

RUN_TIMEOUT_S = 240.0  # JAX (and MaxText) start-up on several loopback nodes of a loaded 2-core machine
pytestmark = pytest.mark.timeout(RUN_TIMEOUT_S + 60)
WORLD_LINE = re.compile(r"world process=(\d+) count=(\d+) devices=(\d+) sum=(\d+) coordinator=(\S+) given=(\S+)")
JOB_STEP = {"SLURM_JOB_ID": "4243", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
            "SLURM_NTASKS": "1", "SLURM_NNODES": "1", "SLURM_STEP_NODELIST": "localhost"}


def _run(cluster: Any, launcher: Launcher, *options: object, command: list[object], env: dict[str, str]) -> Finished:
    return launcher.run("--backend", "ray", "--address", cluster.address, *options, command=command, env=env,
                        timeout_s=RUN_TIMEOUT_S)


def test_a_bare_initialize_joins_one_world_across_nodes_inside_a_slurm_job_step(
    ray_cluster: Any, launcher: Launcher
) -> None:
    """Two nodes x two ranks: each is process RANK of 4, sees 4 devices, sums with all, through the
    attempt's coordinator, whatever the job step's variables say."""
    env = launcher_env(JAX_PLATFORMS="cpu", **JOB_STEP)
    run = _run(ray_cluster, launcher, "--nnodes", 2, "--nproc-per-node", 2, command=script("jax_bare_init.py"),
               env=env)
    assert 0 == run.returncode, run.explain()
    worlds = []
    for rank in range(4):
        match = WORLD_LINE.search(run.rank_log(0, rank))
        assert match is not None, run.rank_log(0, rank)[-3000:]
        worlds.append((*(int(group) for group in match.groups()[:4]), match.group(5) == match.group(6)))
    assert [(rank, 4, 4, 10, True) for rank in range(4)] == worlds


def test_maxtext_gpu_path_runs_one_process_a_node(ray_cluster: Any, launcher: Launcher, maxtext_python: Path) -> None:
    """hardware=gpu on two nodes, one process each: NNODES=2 and NODE_RANK make MaxText's world
    elastic's (total_weights 2 x 64), to the last step."""
    command = maxtext_command(maxtext_python, launcher.tmp_path / "out", "gpu", 20, "gpu")
    run = _run(ray_cluster, launcher, "--nnodes", 2, "--nproc-per-node", 1, command=command,
               env=maxtext_env())
    assert 0 == run.returncode, run.explain()
    for rank in (0, 1):
        log = run.rank_log(0, rank)
        assert "Jax distributed system initialized on GPU!" in log and "is not elastic's world" not in log
        steps = maxtext_steps(log)
        assert (0, 19, {128}) == (steps[0][0], steps[-1][0], {weights for _, weights in steps})
