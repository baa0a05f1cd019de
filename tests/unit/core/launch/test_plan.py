"""Rank assignment, worker environments and GPU visibility: pure functions."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic.node.probes.gpus import visible_gpu_ids
from elastic.core.run_layout import RunLayout
from elastic.core.launch.spec import isolated_device, resume_placeholder_error, worker_env, worker_specs
from elastic.core.launch.plan import GpuVendor, NodeSlot, plan_attempt

LAYOUT = RunLayout(Path("/runs/r1"))


def two_nodes(nproc: int = 2) -> list[NodeSlot]:
    return [NodeSlot("a", "10.0.0.1", nproc), NodeSlot("b", "10.0.0.2", nproc)]


def plan(nodes: list[NodeSlot], attempt: int = 0, previous=None):  # type: ignore[no-untyped-def]
    return plan_attempt(run_id="r1", attempt=attempt, max_restarts=3, nodes=nodes, master_addr=None,
                        master_port=29500 + attempt, coordinator_port=29600, previous=previous)


def test_ranks_are_dense_and_node_major() -> None:
    """Node 0 holds ranks 0..n-1, node 1 the next n; local ranks restart per node."""
    ranks = plan(two_nodes(3)).ranks
    assert [0, 1, 2, 3, 4, 5] == [r.rank for r in ranks]
    assert [0, 1, 2, 0, 1, 2] == [r.local_rank for r in ranks]
    assert [0, 0, 0, 1, 1, 1] == [r.group_rank for r in ranks]


def test_master_addr_defaults_to_the_first_node() -> None:
    """Without --master-addr, rank 0's node hosts the rendezvous."""
    assert "10.0.0.1" == plan(two_nodes()).master_addr


def test_worker_env_has_the_torchrun_and_elastic_variables() -> None:
    """Every variable of DESIGN §8, with values consistent with the plan."""
    p = plan(two_nodes(), attempt=2)
    env = worker_env({"PATH": "/bin"}, p, p.ranks[3], LAYOUT)
    expected = {
        "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "ROLE_NAME": "default", "ROLE_RANK": "3",
        "ROLE_WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29502",
        "TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_MAX_RESTARTS": "3",
        "TORCHELASTIC_RUN_ID": "r1", "TORCHELASTIC_ERROR_FILE": "/runs/r1/attempt-2/rank-3.error.json",
        "TORCHELASTIC_USE_AGENT_STORE": "False", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
        "NODE_RANK": "1", "GLOBAL_RANK": "3", "NPROCS": "4", "ELASTIC_RUN_ID": "r1",
        "ELASTIC_ATTEMPT": "2", "ELASTIC_NODE": "b", "ELASTIC_HEARTBEAT_FILE": "/runs/r1/attempt-2/rank-3.heartbeat",
        "ELASTIC_PREEMPTION_FILE": "/runs/r1/attempt-2/rank-3.preempt",
        "ELASTIC_SIGNALS_FILE": "/runs/r1/attempt-2/rank-3.signals",
        "ELASTIC_STARTUP_FILE": "/runs/r1/attempt-2/rank-3.startup",
        "ELASTIC_COORDINATOR_ADDRESS": "10.0.0.1:29600", "ELASTIC_WORLD_CHANGED": "0",
        "JAX_COORDINATOR_ADDRESS": "10.0.0.1:29600",
        "JAX_COORDINATOR_IP": "10.0.0.1", "JAX_COORDINATOR_PORT": "29600", "NNODES": "2",
        "JOB_INDEX": "0", "JOB_COMPLETION_INDEX": "3", "PROCESSES_IN_JOB": "4", "JAX_PROCESS_COUNT": "4",
        "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1", "PYTHONUNBUFFERED": "1", "PATH": "/bin",
    }
    assert expected == env


def test_a_later_run_of_an_rdzv_id_gives_its_ranks_the_id_as_typed() -> None:
    """Run job-7.2 of `--rdzv-id job-7`: TORCHELASTIC_RUN_ID as torchrun sets it, ELASTIC_RUN_ID the run's own."""
    p = plan_attempt(run_id="job-7.2", attempt=0, max_restarts=3, nodes=two_nodes(), master_addr=None,
                     master_port=29500, coordinator_port=29600, torchelastic_run_id="job-7")
    env = worker_env({}, p, p.ranks[0], LAYOUT)
    assert ("job-7", "job-7.2") == (env["TORCHELASTIC_RUN_ID"], env["ELASTIC_RUN_ID"])


def test_user_settings_win_over_defaults() -> None:
    """OMP_NUM_THREADS and PYTHONFAULTHANDLER are only defaults."""
    p = plan(two_nodes())
    env = worker_env({"OMP_NUM_THREADS": "8", "PYTHONFAULTHANDLER": ""}, p, p.ranks[0], LAYOUT)
    assert ("8", "") == (env["OMP_NUM_THREADS"], env["PYTHONFAULTHANDLER"])


def test_single_rank_nodes_leave_omp_threads_alone() -> None:
    """OMP_NUM_THREADS=1 is only set when ranks share a node."""
    p = plan(two_nodes(1))
    assert "OMP_NUM_THREADS" not in worker_env({}, p, p.ranks[0], LAYOUT)


def test_plan_variables_override_inherited_ones() -> None:
    """A RANK left in the launcher's own environment never reaches a worker."""
    p = plan(two_nodes())
    assert "1" == worker_env({"RANK": "99"}, p, p.ranks[1], LAYOUT)["RANK"]


def test_world_changed_only_when_the_world_differs() -> None:
    """ELASTIC_WORLD_CHANGED is 1 when the nodes differ from the previous attempt."""
    first = plan(two_nodes())
    same = plan(two_nodes(), attempt=1, previous=first)
    smaller = plan(two_nodes()[:1], attempt=2, previous=same)
    assert (False, False, True) == (first.world_changed, same.world_changed, smaller.world_changed)


def test_isolate_gpus_gives_each_local_rank_its_own_device() -> None:
    """With --isolate-gpus each rank sees the local_rank-th visible device."""
    nodes = [NodeSlot("a", "h", 2, GpuVendor.CUDA, ("3", "5"))]
    p = plan(nodes)
    envs = [worker_env({}, p, r, LAYOUT, isolate_gpus=True) for r in p.ranks]
    assert ["3", "5"] == [e["CUDA_VISIBLE_DEVICES"] for e in envs]
    assert all("HIP_VISIBLE_DEVICES" not in e for e in envs)


def test_isolate_gpus_on_rocm_sets_hip_too() -> None:
    """ROCm ranks get HIP_VISIBLE_DEVICES as well."""
    p = plan([NodeSlot("a", "h", 1, GpuVendor.ROCM, ("0",))])
    env = worker_env({}, p, p.ranks[0], LAYOUT, isolate_gpus=True)
    assert ("0", "0") == (env["CUDA_VISIBLE_DEVICES"], env["HIP_VISIBLE_DEVICES"])


def test_jax_reads_the_coordinator_and_an_inherited_one_is_replaced() -> None:
    """JAX_COORDINATOR_ADDRESS is this attempt's coordinator on rank 0's node, whatever the launcher inherited."""
    p = plan(two_nodes())
    env = worker_env({"JAX_COORDINATOR_ADDRESS": "elsewhere:1"}, p, p.ranks[2], LAYOUT)
    assert "10.0.0.1:29600" == env["JAX_COORDINATOR_ADDRESS"] == env["ELASTIC_COORDINATOR_ADDRESS"]


@pytest.mark.parametrize(
    ("node", "isolate", "expected"),
    [
        pytest.param(NodeSlot("a", "h", 2, GpuVendor.CUDA, ("3", "5")), False, ["0", "1"], id="shared-gpu-node"),
        pytest.param(NodeSlot("a", "h", 2, GpuVendor.CUDA, ("3", "5")), True, ["0", "0"], id="isolated"),
        pytest.param(NodeSlot("a", "h", 1, GpuVendor.CUDA, ("3", "5")), False, [None], id="one-process-all-gpus"),
        pytest.param(NodeSlot("a", "h", 2), False, [None, None], id="cpu-node"),
        pytest.param(NodeSlot("a", "h", 3, GpuVendor.ROCM, ("0", "1")), False, ["0", "1", None], id="more-ranks-than-gpus"),
    ],
)
def test_jax_local_device_ids_give_each_process_of_a_gpu_node_one_device(
    node: NodeSlot, isolate: bool, expected: list[str | None]
) -> None:
    """As JAX's Slurm detection does: several processes on a GPU node use one device each; one process uses all."""
    p = plan([node])
    envs = [worker_env({}, p, r, LAYOUT, isolate_gpus=isolate) for r in p.ranks]
    assert expected == [e.get("JAX_LOCAL_DEVICE_IDS") for e in envs]


def test_isolated_device_refuses_more_ranks_than_gpus() -> None:
    """A rank without a GPU of its own is an error, not a shared device."""
    with pytest.raises(ValueError, match="no GPU of its own"):
        isolated_device(2, ("0", "1"))


@pytest.mark.parametrize(
    ("visible", "count", "expected"),
    [(None, 3, ("0", "1", "2")), ("2,3", 8, ("2", "3")), ("", 4, ()),
     ("GPU-ab12, GPU-cd34", 2, ("GPU-ab12", "GPU-cd34"))],
)
def test_visible_gpu_ids_follow_cuda_visible_devices(visible: str | None, count: int, expected: tuple[str, ...]) -> None:
    """The node's own CUDA_VISIBLE_DEVICES narrows and orders what ranks can get."""
    assert expected == visible_gpu_ids(visible, count)


def test_worker_specs_log_into_the_attempt_directory() -> None:
    """Each rank writes its own log file under attempt-K/."""
    p = plan(two_nodes(1), attempt=1)
    specs = worker_specs(p, ["python", "train.py"], {}, LAYOUT)
    assert ["/runs/r1/attempt-1/rank-0.log", "/runs/r1/attempt-1/rank-1.log"] == [s.log_path for s in specs]
    assert ("python", "train.py") == specs[0].argv


def test_each_rank_spec_says_how_many_gpus_the_plan_gave_it() -> None:
    """Its node's visible GPUs, its own one with --isolate-gpus, none on a node that shows none: what
    makes a rank's "No CUDA GPUs are available" its node's fault or its code's."""
    p = plan([NodeSlot("a", "h", 2, GpuVendor.CUDA, ("3", "5")), NodeSlot("b", "h2", 2)])
    assert [2, 2, 0, 0] == [s.gpus for s in worker_specs(p, ["t"], {}, LAYOUT)]
    gpu_node = plan([NodeSlot("a", "h", 2, GpuVendor.CUDA, ("3", "5"))])
    assert [1, 1] == [s.gpus for s in worker_specs(gpu_node, ["t"], {}, LAYOUT, isolate_gpus=True)]


def test_checkpoint_variables_and_command_placeholders_follow_the_resume_point() -> None:
    """ELASTIC_RESUME_* and {resume_from}/{resume_step} carry the latest complete checkpoint."""
    base = plan(two_nodes(1))
    resumed = plan_attempt(run_id="r1", attempt=1, max_restarts=3, nodes=two_nodes(1), master_addr=None,
                           master_port=1, coordinator_port=2, checkpoint_dir="/ck",
                           resume_from="/ck/step_40", resume_step=40)
    argv = ["train", "--resume={resume_from}", "--step", "{resume_step}"]
    fresh_spec = worker_specs(base, argv, {"ELASTIC_RESUME_FROM": "/stale"}, LAYOUT)[0]
    spec = worker_specs(resumed, argv, {}, LAYOUT)[0]
    assert ("train", "--resume=", "--step", "") == fresh_spec.argv
    assert "ELASTIC_RESUME_FROM" not in fresh_spec.env
    assert ("train", "--resume=/ck/step_40", "--step", "40") == spec.argv
    assert ("/ck", "/ck/step_40", "40") == (
        spec.env["ELASTIC_CHECKPOINT_DIR"], spec.env["ELASTIC_RESUME_FROM"], spec.env["ELASTIC_RESUME_STEP"])


def test_an_optional_placeholder_is_a_flag_on_resume_and_nothing_on_a_fresh_start() -> None:
    """``{resume_from?FLAG}`` (a whole argument) gives ``FLAG=PATH`` or no argument at all."""
    base = plan(two_nodes(1))
    resumed = plan_attempt(run_id="r1", attempt=1, max_restarts=3, nodes=two_nodes(1), master_addr=None,
                           master_port=1, coordinator_port=2, checkpoint_dir="/ck",
                           resume_from="/ck/step_40", resume_step=40)
    argv = ["train", "{resume_from?--resume_from_checkpoint}", "{resume_step?--start}", "--lr", "1"]

    assert ("train", "--lr", "1") == worker_specs(base, argv, {}, LAYOUT)[0].argv
    assert ("train", "--resume_from_checkpoint=/ck/step_40", "--start=40", "--lr", "1") == (
        worker_specs(resumed, argv, {}, LAYOUT)[0].argv)


def test_an_optional_placeholder_inside_an_argument_is_refused() -> None:
    assert resume_placeholder_error(["train", "{resume_from?--ckpt}"]) is None
    problem = resume_placeholder_error(["train", "--x={resume_from?--ckpt}"])
    assert problem is not None and "'--x={resume_from?--ckpt}'" in problem and "whole argument" in problem
