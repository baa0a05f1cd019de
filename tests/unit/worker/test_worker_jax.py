"""elastic.worker.jax: the arguments of jax.distributed.initialize from the launcher's variables."""

from __future__ import annotations

import subprocess
import sys

import pytest

from elastic.worker.jax import distributed_arguments

RANK_ENV = {"JAX_COORDINATOR_ADDRESS": "10.0.0.1:29600", "WORLD_SIZE": "4", "RANK": "3"}


def test_the_world_comes_from_world_size_and_rank_with_detection_off() -> None:
    """JAX reads no process count or id from plain variables: they are passed, and Slurm's are never looked at."""
    slurm = {"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}
    expected = {
        "coordinator_address": "10.0.0.1:29600",
        "num_processes": 4,
        "process_id": 3,
        "cluster_detection_method": "deactivate",
    }
    assert expected == distributed_arguments({**RANK_ENV, **slurm})


def test_local_device_ids_are_passed_when_the_launcher_set_them() -> None:
    """With JAX_LOCAL_DEVICE_IDS all four arguments are given, so JAX detects nothing."""
    arguments = distributed_arguments({**RANK_ENV, "JAX_LOCAL_DEVICE_IDS": "1"})
    assert [1] == arguments["local_device_ids"]
    assert "cluster_detection_method" not in arguments


def test_elastic_coordinator_address_is_enough() -> None:
    """ELASTIC_COORDINATOR_ADDRESS stands in for JAX_COORDINATOR_ADDRESS."""
    env = {"ELASTIC_COORDINATOR_ADDRESS": "h:1", "WORLD_SIZE": "1", "RANK": "0"}
    assert "h:1" == distributed_arguments(env)["coordinator_address"]


def test_outside_the_launcher_the_error_names_what_is_missing() -> None:
    """A script run without `elastic run` gets one line naming the variables."""
    with pytest.raises(RuntimeError, match=r"JAX_COORDINATOR_ADDRESS, WORLD_SIZE, RANK not set; run the script under `elastic run`"):
        distributed_arguments({})


def test_importing_the_helper_does_not_import_jax() -> None:
    """elastic.worker.jax imports JAX only when initialize() is called."""
    code = "import sys, elastic.worker.jax; print('jax' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "False" == loaded.stdout.strip()
