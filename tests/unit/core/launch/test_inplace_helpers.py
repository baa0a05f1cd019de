"""What an attempt with --spares starts beside its ranks: the store's host and the warm spares. Pure."""

from __future__ import annotations

from pathlib import Path

from elastic.core.launch.inplace_helpers import spare_specs, store_host_spec
from elastic.core.launch.plan import AttemptPlan, NodeSlot, plan_attempt
from elastic.core.launch.spec import Role, worker_env, worker_specs
from elastic.core.run_layout import RunLayout
from elastic.worker.inplace.notice import GENERATION_VAR, NOTICE_VAR, SPARE_VAR, STORE_VAR

LAYOUT = RunLayout(Path("/runs/r1"))
COMMAND = ("/venv/bin/python", "train.py", "--steps", "9")
IDENTITY = {"RANK", "LOCAL_RANK", "GLOBAL_RANK", "ELASTIC_HEARTBEAT_FILE", "ELASTIC_STARTUP_FILE",
            "ELASTIC_SIGNALS_FILE", "ELASTIC_PREEMPTION_FILE", "TORCHELASTIC_ERROR_FILE", GENERATION_VAR}


def _plan(store_port: int | None = 29700, attempt: int = 2) -> AttemptPlan:
    nodes = [NodeSlot("a", "10.0.0.1", 2), NodeSlot("b", "10.0.0.2", 2)]
    return plan_attempt(run_id="r1", attempt=attempt, max_restarts=3, nodes=nodes, master_addr=None,
                        master_port=29500, coordinator_port=29600, inplace_store_port=store_port)


def test_the_store_is_on_the_first_node_and_every_rank_is_told_where_and_its_notice_file() -> None:
    plan = _plan()
    assert "10.0.0.1:29700" == plan.inplace_store
    for assignment in plan.ranks:
        env = worker_env({}, plan, assignment, LAYOUT)
        assert ("10.0.0.1:29700", "0") == (env[STORE_VAR], env[GENERATION_VAR])
        assert f"/runs/r1/attempt-2/rank-{assignment.rank}.inplace" == env[NOTICE_VAR]


def test_without_spares_no_rank_gets_the_variables_not_even_inherited_ones() -> None:
    """An `elastic run` inside a rank of another must not join the outer one's store."""
    plan = _plan(store_port=None)
    inherited = {STORE_VAR: "10.9.9.9:1", NOTICE_VAR: "/x", GENERATION_VAR: "3", SPARE_VAR: "1"}
    env = worker_env(inherited, plan, plan.ranks[0], LAYOUT)
    assert not {STORE_VAR, NOTICE_VAR, GENERATION_VAR, SPARE_VAR} & env.keys()


def test_the_store_host_runs_with_the_ranks_python_on_the_plans_address_and_writes_where_it_listens() -> None:
    plan = _plan()
    ranks = worker_specs(plan, COMMAND, {"PATH": "/bin"}, LAYOUT)
    store = store_host_spec(plan, ranks, LAYOUT)
    assert (Role.STORE, "a") == (store.role, store.node_id)
    assert ("/venv/bin/python", "-m", "elastic.worker.inplace.store_host", "10.0.0.1", "29700",
            "/runs/r1/attempt-2/inplace-store.address") == store.argv
    assert "/runs/r1/attempt-2/inplace-store.log" == store.log_path
    assert not IDENTITY & store.env.keys() and "/bin" == store.env["PATH"]


def test_each_node_gets_its_spares_of_the_command_with_no_rank_identity_and_a_notice_file_each() -> None:
    plan = _plan()
    ranks = worker_specs(plan, COMMAND, {}, LAYOUT)
    spares = spare_specs(plan, ranks, LAYOUT, 2)
    assert [("a", 0), ("a", 1), ("b", 0), ("b", 1)] == [(s.node_id, s.spare_index) for s in spares]
    for spare in spares:
        node_rank = "ab".index(spare.node_id)
        assert (Role.SPARE, COMMAND) == (spare.role, spare.argv)
        assert "1" == spare.env[SPARE_VAR] and "10.0.0.1:29700" == spare.env[STORE_VAR]
        assert f"/runs/r1/attempt-2/spare-{node_rank}-{spare.spare_index}.inplace" == spare.env[NOTICE_VAR]
        assert f"/runs/r1/attempt-2/spare-{node_rank}-{spare.spare_index}.log" == spare.log_path
        assert not IDENTITY & spare.env.keys()
        assert (None, None, (), 0.0) == (spare.hang, spare.progress, spare.prewarm, spare.prewarm_memory_pct)


def test_no_spares_asked_for_none_started() -> None:
    plan = _plan()
    assert () == spare_specs(plan, worker_specs(plan, COMMAND, {}, LAYOUT), LAYOUT, 0)
