"""The ray backend on a real loopback cluster: placement, restarts, node loss, teardown races."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from harness import (
    Finished,
    Launcher,
    Samples,
    agent_of,
    elastic_command,
    heartbeat_age,
    is_alive,
    launcher_env,
    per_rank,
    read_pids,
    scrape,
    script,
    wait_for,
)

from elastic.backends.ray.backend import RayBackend
from elastic.core.options.config import RunConfig
from elastic.run.driver import Driver
from elastic.run.records.journal import RunDirectory
from elastic.core.messages import Outcome
from elastic.testing import (
    DiesOnCloseRayNodeAgent,
    UnavailableOnceRayNodeAgent,
    capture_events,
)

GONE_BOUND_S = 5.0  # generous bound on "dies within 1 s"


def run_on(cluster: Any, launcher: Launcher, *options: object, command: list[str], timeout_s: float = 90) -> Finished:
    return launcher.run("--backend", "ray", "--address", cluster.address, *options, command=command,
                        timeout_s=timeout_s)


def envs_of(directory: Path, attempt: int) -> dict[int, dict[str, str]]:
    found = {}
    for path in directory.glob(f"attempt-{attempt}-rank-*.json"):
        env = json.loads(path.read_text())
        found[int(env["RANK"])] = env
    return found


def test_ranks_span_nodes_consistently_and_restart_together(ray_cluster: Any, launcher: Launcher, tmp_path: Path) -> None:
    """Two nodes x two ranks: dense ranks, one rendezvous, and a failure on node 1 restarts all four."""
    out = tmp_path / "envs"
    out.mkdir()
    finished = run_on(
        ray_cluster, launcher, "--nnodes", "2", "--nproc-per-node", 2, "--max-restarts", 1,
        command=per_rank(*[["dump_env.py", out]] * 3,
                         ["dump_env.py", out, "--exit", 3, "--attempt", 0, "--after-ranks", 4]),
    )

    assert 0 == finished.returncode, finished.explain()
    first, second = envs_of(out, 0), envs_of(out, 1)
    assert [0, 1, 2, 3] == sorted(first) == sorted(second)
    for env in first.values():
        rank = int(env["RANK"])
        assert (str(rank // 2), str(rank % 2), "4", "2") == (
            env["GROUP_RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"])
    for envs in (first, second):
        assert 1 == len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs.values()})
    assert first[0]["MASTER_PORT"] != second[0]["MASTER_PORT"]
    assert 2 == len({e["ELASTIC_RUN_ID"] + e["GROUP_RANK"] for e in first.values()})
    cause = finished.report()["attempts"][0]["root_cause"]
    assert ("exited", 3) == (cause["kind"], cause["rank"])


def test_no_ray_variable_of_the_actor_reaches_a_rank(ray_cluster: Any, launcher: Launcher, tmp_path: Path) -> None:
    """A rank's RAY_* variables are exactly the launcher's own: nothing of the actor leaks in."""
    out = tmp_path / "envs"
    out.mkdir()
    finished = run_on(ray_cluster, launcher, "--nproc-per-node", 1, command=script("dump_env.py", out))

    assert 0 == finished.returncode, finished.explain()
    env = envs_of(out, 0)[0]
    ours = {k: v for k, v in launcher_env().items() if k.startswith("RAY_")}
    assert ours == {k: v for k, v in env.items() if k.startswith("RAY_")}
    assert "CUDA_VISIBLE_DEVICES" not in env or env["CUDA_VISIBLE_DEVICES"] == os.environ.get("CUDA_VISIBLE_DEVICES")


def run_losing_a_node(cluster: Any, launcher: Launcher, pid_dir: Path, *options: object) -> Finished:
    """Run one sleeping rank per node on three nodes, remove one of them, wait for the end."""
    process = launcher.start("--backend", "ray", "--address", cluster.address, "--nproc-per-node", 1,
                             *options, command=script("sleep_on_attempt.py", pid_dir, 0))
    try:
        read_pids(pid_dir, 3)
        cluster.remove_node(cluster.workers[-1])
        return launcher.finished(process, timeout_s=90)
    finally:
        cluster.restore()


def test_a_removed_node_continues_on_the_survivors_without_charging_restarts(
    ray_cluster: Any, launcher: Launcher, pid_dir: Path
) -> None:
    """With --nnodes 2:3 and --max-restarts 0, losing one of three nodes relaunches on two."""
    finished = run_losing_a_node(ray_cluster, launcher, pid_dir, "--nnodes", "2:3",
                                 "--max-restarts", 0, "--node-wait-timeout", 30)

    assert 0 == finished.returncode, finished.explain()
    report = finished.report()
    assert [3, 2] == [a["world_size"] for a in report["attempts"]]
    assert "node-lost" == report["attempts"][0]["root_cause"]["kind"]
    assert [False, True] == [e["world_changed"] for e in finished.events("attempt_started")]
    assert "budget_exhausted" not in [e["event"] for e in finished.journal()]


def test_losing_nodes_below_the_minimum_fails_after_the_wait(
    ray_cluster: Any, launcher: Launcher, pid_dir: Path
) -> None:
    """With --nnodes 3 and a node gone for good, the run fails with 75 and says what it saw."""
    finished = run_losing_a_node(ray_cluster, launcher, pid_dir, "--nnodes", "3", "--node-wait-timeout", 2)

    assert 75 == finished.returncode, finished.explain()
    assert "needed at least 3 nodes, 2 available" in finished.stderr


def test_a_run_that_never_gets_its_nodes_reads_the_same_in_elastic_runs_and_its_summary(
    ray_cluster: Any, launcher: Launcher, tmp_path: Path
) -> None:
    """More nodes than the cluster has, nothing launched: the summary and `elastic runs` count the
    same attempt and give the same reason (the list showed 0 attempts and no cause)."""
    launcher.run_dir = tmp_path / "elastic-runs" / "too-few"
    finished = run_on(ray_cluster, launcher, "--run-id", "too-few", "--nnodes", 9, "--node-wait-timeout", 2,
                      command=script("exit_with.py", 0))
    listed = elastic_command("runs", cwd=tmp_path)

    assert 75 == finished.returncode, finished.explain()
    [summary] = [line for line in finished.stderr.splitlines() if line.startswith("elastic: run too-few ")]
    assert " failed after 1 attempt in " in summary, summary
    [why] = [line.strip() for line in finished.stderr.splitlines() if line.strip().startswith("why it stopped: ")]
    reason = why.removeprefix("why it stopped: ")
    assert reason.startswith("needed at least 9 nodes, "), why
    _, row = listed.stdout.splitlines()
    assert ["too-few", "failed", "1", "75", f"attempt 0: {reason}"] == [
        row.split()[0], *re.split(r"\s{2,}", row)[2:]], row


def test_sigkill_of_an_agent_kills_its_ranks_and_the_run_recovers(
    ray_cluster: Any, launcher: Launcher, pid_dir: Path
) -> None:
    """An agent SIGKILLed takes its ranks with it at once; a new agent on the node restarts them."""
    process = launcher.start("--backend", "ray", "--address", ray_cluster.address, "--nnodes", "2",
                             "--nproc-per-node", 1, command=script("sleep_on_attempt.py", pid_dir, 0))
    ranks = read_pids(pid_dir, 2)
    agent = agent_of(ranks[1])
    killed_at = time.monotonic()
    os.kill(agent, signal.SIGKILL)
    wait_for(lambda: not is_alive(ranks[1]), f"rank {ranks[1]} gone after its agent {agent}", GONE_BOUND_S)
    elapsed_s = time.monotonic() - killed_at
    finished = launcher.finished(process, timeout_s=90)

    assert 0 == finished.returncode, finished.explain()
    assert elapsed_s < GONE_BOUND_S, f"rank outlived its agent by {elapsed_s:.2f}s"
    assert "node-lost" == finished.report()["attempts"][0]["root_cause"]["kind"]


def _driver(cluster: Any, tmp_path: Path, backend: RayBackend) -> Driver:
    config = RunConfig(command=(sys.executable, "-c", "pass"), run_id="inproc", run_dir=tmp_path / "run",
                       nproc_per_node=1, backend="ray", address=cluster.address)
    return Driver(config, backend, RunDirectory.create(config.run_dir), base_env=launcher_env())


def test_teardown_errors_never_turn_success_into_failure(ray_cluster: Any, tmp_path: Path) -> None:
    """Every rank succeeded; a dead actor at close and a raising ray.kill are only logged."""
    import ray.exceptions

    def raising_kill(actor: object) -> None:
        raise ray.exceptions.RaySystemError("injected: GCS connection torn down")

    backend = RayBackend(address=ray_cluster.address, agent_class=DiesOnCloseRayNodeAgent, kill_actor=raising_kill)
    with capture_events() as events:
        result = _driver(ray_cluster, tmp_path, backend).run()

    assert (Outcome.SUCCEEDED, 0) == (result.outcome, result.exit_status)
    noise = [e for e in events if e["event"] == "teardown_error_ignored"]
    assert {"close", "kill"} == {e["step"] for e in noise}


def test_a_transient_actor_error_is_retried_and_the_run_succeeds(ray_cluster: Any, tmp_path: Path) -> None:
    """ActorUnavailableError on launch is retried (tenacity), not counted as a failure."""
    backend = RayBackend(address=ray_cluster.address, agent_class=UnavailableOnceRayNodeAgent)
    with capture_events() as events:
        result = _driver(ray_cluster, tmp_path, backend).run()

    assert (Outcome.SUCCEEDED, 0, 1) == (result.outcome, result.exit_status, len(result.attempts))
    retried = [e["error"] for e in events if e["event"] == "rpc_retried"]
    assert 1 == len(retried) and "ActorUnavailableError" in retried[0]


def test_sigkill_of_the_driver_ends_its_agents_and_their_ranks(
    ray_cluster: Any, launcher: Launcher, pid_dir: Path
) -> None:
    """The launcher SIGKILLed: Ray ends its actors, and every rank dies with its agent."""
    process = launcher.start("--backend", "ray", "--address", ray_cluster.address, "--nnodes", "2",
                             "--nproc-per-node", 1, command=script("sleep_on_attempt.py", pid_dir, 0))
    ranks = read_pids(pid_dir, 2)
    agents = [agent_of(rank) for rank in ranks]
    killed_at = time.monotonic()
    os.kill(process.pid, signal.SIGKILL)
    process.wait(10)
    wait_for(lambda: not any(is_alive(pid) for pid in ranks + agents), "ranks and agents gone", 30)
    elapsed_s = time.monotonic() - killed_at
    assert elapsed_s < 30, f"ranks outlived their driver by {elapsed_s:.2f}s"


def test_joining_a_cluster_without_token_auth_warns(ray_cluster: Any, launcher: Launcher) -> None:
    """The test cluster runs without token authentication; the launcher says so loudly."""
    finished = run_on(ray_cluster, launcher, "--nproc-per-node", 1, command=script("exit_with.py", 0))
    assert 0 == finished.returncode, finished.explain()
    assert "unauthenticated_cluster_joined" in finished.stderr


def test_a_driver_with_a_token_still_warns_about_a_cluster_without_token_auth(ray_cluster: Any) -> None:
    """Ray turns token auth on in a driver when ~/.ray/auth_token exists; the cluster is asked itself."""
    code = ("import ray; from elastic.backends.ray.cluster.connect import auth_mode, connect; "
            f"connect({ray_cluster.address!r}); print('driver mode', auth_mode()); ray.shutdown()")
    joined = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env=launcher_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="7f" * 32),
                            stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    assert 0 == joined.returncode, joined.stderr[-3000:]
    assert "driver mode token" in joined.stdout
    assert "unauthenticated_cluster_joined" in joined.stdout + joined.stderr


def test_a_node_that_joins_grows_the_world_at_the_next_checkpoint(
    ray_cluster: Any, launcher: Launcher, tmp_path: Path
) -> None:
    """--nnodes 2:3 started on two nodes: a third joining relaunches at three after a checkpoint."""
    checkpoints, out = tmp_path / "ckpt", tmp_path / "out"
    checkpoints.mkdir()
    out.mkdir()
    ray_cluster.remove_node(ray_cluster.workers[-1])
    try:
        process = launcher.start("--backend", "ray", "--address", ray_cluster.address, "--nnodes", "2:3",
                                 "--nproc-per-node", 1, "--checkpoint-dir", checkpoints,
                                 "--scale-up-interval", 0,
                                 command=script("save_steps.py", checkpoints, out))
        launcher.wait_for_event("phase_changed", timeout_s=60)
        wait_for(lambda: any(checkpoints.glob("step_*")), "a first checkpoint", 60)
        ray_cluster.restore()
        finished = launcher.finished(process, timeout_s=120)
    finally:
        ray_cluster.restore()

    assert 0 == finished.returncode, finished.explain()
    assert [2, 3] == [a["world_size"] for a in finished.report()["attempts"]]
    assert 1 == len(finished.events("scale_up_scheduled"))
    assert {"3 1"} == {p.read_text().strip() for p in out.glob("attempt-1-rank-*")}
    assert "budget_exhausted" not in [e["event"] for e in finished.journal()]


def _node_of(pid: int, cluster: Any) -> Any:
    """The cluster node whose raylet is an ancestor of ``pid``."""
    ancestors = {p.pid for p in psutil.Process(pid).parents()}
    return next(n for n in cluster.workers if n.all_processes["raylet"][0].process.pid in ancestors)


def test_a_vanished_machine_is_the_root_cause_not_the_peers_it_broke(
    ray_cluster: Any, launcher: Launcher, pid_dir: Path
) -> None:
    """A node SIGKILLed without notice: its peer fails first, yet node-lost is the root cause."""
    process = launcher.start("--backend", "ray", "--address", ray_cluster.address, "--nnodes", "1:2",
                             "--nproc-per-node", 1, "--max-restarts", 0, "--grace-period", 2,
                             command=script("peer_link.py", pid_dir))
    try:
        ranks = read_pids(pid_dir, 2)
        victim = _node_of(ranks[1], ray_cluster)
        ray_cluster.workers.remove(victim)
        ray_cluster.cluster.remove_node(victim, allow_graceful=False)
        finished = launcher.finished(process, timeout_s=90)
    finally:
        ray_cluster.restore()

    assert 0 == finished.returncode, finished.explain()
    cause = finished.report()["attempts"][0]["root_cause"]
    assert ("node-lost", 1) == (cause["kind"], cause["rank"])
    # The journal is append-only, so which of two stories it tells depends on what the
    # driver heard of first: the lost node, and the peer is recorded as collateral; or the
    # peer's exit, recorded as it was seen, followed by the root cause being revised.
    peer = [e["kind"] for e in finished.events("worker_failed") if e["rank"] == 0 and e["attempt"] == 0]
    revised = finished.events("root_cause_revised")
    if set(peer) <= {"collateral"}:
        assert [] == revised, finished.journal()
    else:
        assert 1 == len(revised) and "rank 0" in revised[0]["previous"], finished.journal()
        assert "rank 1 lost with node" in revised[0]["revised"], finished.journal()


def test_elastic_stack_asks_the_agents_on_every_node(
    ray_cluster: Any, launcher: Launcher, tmp_path: Path
) -> None:
    """On Ray, `elastic stack` reaches each node's agent, which dumps its own ranks, and names
    each node as the run does."""
    from elastic.node.probes.stacks import find_py_spy

    if find_py_spy() is None:
        pytest.skip("py-spy is not installed")
    process = launcher.start("--backend", "ray", "--address", ray_cluster.address, "--nnodes", "2",
                             "--nproc-per-node", 1, command=per_rank(
                                 ["stuck_in_function.py", tmp_path / "r0"],
                                 ["stuck_in_function.py", tmp_path / "r1"]))
    try:
        wait_for(lambda: (tmp_path / "r0").exists() and (tmp_path / "r1").exists(), "both ranks stuck", 60)
        shown = subprocess.run([sys.executable, "-m", "elastic", "stack", str(launcher.run_dir)],
                               capture_output=True, text=True, timeout=120, env=launcher_env())
    finally:
        process.terminate()
        finished = launcher.finished(process, timeout_s=60)
    assert 0 == shown.returncode, shown.stderr
    nodes = finished.events("attempt_started")[0]["nodes"]
    assert {f"==== rank {rank} (node {nodes[rank]}, attempt 0) ====" for rank in (0, 1)} == {
        line for line in shown.stdout.splitlines() if line.startswith("==== rank")}
    frames = [line.strip() for line in shown.stdout.splitlines() if "stuck_in_allreduce (" in line]
    assert 2 == sum(frame.startswith("stuck_in_allreduce (stuck_in_function.py:12)") for frame in frames), shown.stdout
    assert 2 == len({line for line in shown.stdout.splitlines() if line.startswith("==== rank")})
    # Native frames, and where each main thread is, from the agents too.
    assert 2 == shown.stdout.count("# main thread is in stuck_in_allreduce (stuck_in_function.py:12), waiting in")
    assert shown.stdout.count("(libc.so") >= 2, shown.stdout


def test_elastic_logs_says_where_the_logs_of_other_nodes_ranks_are(
    ray_cluster: Any, launcher: Launcher
) -> None:
    """With a per-node run directory, `elastic logs` names the node holding each missing log."""
    finished = run_on(ray_cluster, launcher, "--nnodes", "2", "--nproc-per-node", 1,
                      command=script("exit_with.py", 0, "--say", "hi"))
    assert 0 == finished.returncode, finished.explain()
    [started] = finished.events("attempt_started")
    node1, address1 = started["nodes"][1], started["node_addresses"][1]
    # Every node of the test cluster shares this disk; take rank 1's log away as if
    # its node had its own.
    (launcher.run_dir / "attempt-0" / "rank-1.log").unlink()

    everything = subprocess.run([sys.executable, "-m", "elastic", "logs", str(launcher.run_dir)],
                                capture_output=True, text=True, timeout=60, env=launcher_env())
    one = subprocess.run([sys.executable, "-m", "elastic", "logs", str(launcher.run_dir), "--rank", "1"],
                         capture_output=True, text=True, timeout=60, env=launcher_env())

    assert (0, ["[rank 0] hi attempt 0"]) == (everything.returncode, everything.stdout.splitlines())
    assert f"note: rank 1 ran on node {node1} ({address1}); its log is in" in everything.stderr
    assert 2 == one.returncode and f"rank 1 of attempt 0 ran on node {node1} ({address1})" in one.stderr


def test_heartbeat_ages_reach_the_metrics_from_every_node(ray_cluster: Any, launcher: Launcher) -> None:
    """Each node's agent measures its own ranks: the quiet rank on node 1 ages, node 0's stays fresh."""
    process = launcher.start("--backend", "ray", "--address", ray_cluster.address, "--nnodes", "2",
                             "--nproc-per-node", 1, "--metrics-port", 0,
                             command=script("goes_silent.py", "api", 0, 1))
    port = launcher.wait_for_event("metrics_serving", timeout_s=60)["port"]

    def rank_1_quiet() -> Samples | None:
        samples = scrape(port)
        return samples if (heartbeat_age(samples, 1) or 0.0) > 1.5 else None

    try:
        samples = wait_for(rank_1_quiet, "rank 1's heartbeat to age", 60)
    finally:
        process.terminate()
        launcher.finished(process, timeout_s=60)
    assert (heartbeat_age(samples, 0) or 99) < 1.5


def test_an_agent_on_a_node_new_to_the_run_creates_its_directories_0700_and_files_0600(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """The run directory tree an agent makes for rank logs is private, error files included."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from elastic.backends.ray.agents.agent import RayNodeAgent
    from elastic.core.launch.spec import WorkerSpec

    node_root = tmp_path / "other-node"  # what a node that never saw the run has: nothing
    attempt_dir = node_root / "runs" / "r1" / "attempt-0"
    log, error_file = attempt_dir / "rank-0.log", attempt_dir / "rank-0.error.json"
    ray.init(address=ray_cluster.address, namespace="elastic-test", configure_logging=False, log_to_driver=False)
    try:
        node_id = ray_cluster.workers[0].node_id
        agent = ray.remote(num_cpus=0, max_restarts=0)(RayNodeAgent).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
        ).remote(node_id)
        spec = WorkerSpec(attempt=0, rank=0, local_rank=0, node_id=node_id,
                          argv=tuple(script("write_error_file.py")),
                          env={**launcher_env(), "RANK": "0", "TORCHELASTIC_ERROR_FILE": str(error_file)},
                          log_path=str(log))  # fmt: skip
        started = ray.get(agent.launch.remote([spec], None), timeout=60)
        assert [(0, None)] == [(rank, s.warm_kb) for rank, s in started.items()]  # rank 0 started, cold
        exits: list[Any] = []
        deadline_at = time.monotonic() + 60
        while not exits and time.monotonic() < deadline_at:
            exits += ray.get(agent.next_events.remote(1.0), timeout=60).exits
        assert [1] == [e.returncode for e in exits]
        assert "written like torch" in (exits[0].error_message or "")
        ray.get(agent.close.remote(), timeout=60)
        ray.kill(agent)
    finally:
        ray.shutdown()

    modes = {str(p.relative_to(tmp_path)): oct(p.stat().st_mode & 0o777)
             for p in [node_root, *node_root.rglob("*")]}
    expected = {path: oct(0o700 if (tmp_path / path).is_dir() else 0o600) for path in modes}
    assert expected == modes
    assert {"other-node/runs/r1/attempt-0/rank-0.log", "other-node/runs/r1/attempt-0/rank-0.error.json"} <= set(modes)


def test_each_node_says_which_of_its_ranks_started_warm(ray_cluster: Any, launcher: Launcher, tmp_path: Path) -> None:
    """With --prewarm on two nodes, every agent reports the ranks a warm interpreter took: the
    journal and report.json show attempt 0 cold and attempt 1 warm on both nodes."""
    out = tmp_path / "records"
    out.mkdir()
    finished = run_on(ray_cluster, launcher, "--nnodes", 2, "--nproc-per-node", 1, "--max-restarts", 1,
                      "--prewarm", "prewarm_early", "--prewarm-delay", 0,
                      command=script("prewarm_probe.py", out, "--fail-rank", 1))

    assert 0 == finished.returncode, finished.explain()
    expected = [([], [0, 1]), ([0, 1], [])]
    started = [a["ranks_started"] for a in finished.report()["attempts"]]
    assert expected == [(s["warm"], s["cold"]) for s in started]
    assert started[1]["warm_resident_mb"] > 0  # each node's warm interpreters, counted
    assert [None, None] == [json.loads((out / f"attempt-1-rank-{r}.json").read_text())["early_module_rank_at_import"]
                            for r in range(2)]
