"""Node health on a real Ray cluster of three nodes: a node whose GPU is at fault, or whose
``--preflight`` fails, is left out."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from harness import Launcher, launcher_env, script


def test_a_node_with_an_ecc_error_is_excluded_and_the_run_goes_on_without_it(
    ray_cluster: Any, launcher: Launcher, tmp_path: Path
) -> None:
    """Three nodes, --nnodes 2:3: group rank 2's GPU has an uncorrectable ECC error. Attempt 1 runs on
    the other two, charged to the preemption budget (--max-restarts 0 is left whole), and
    report.json names the node, as the console does by default. Each rank saw its node as ELASTIC_NODE.

    The test cluster's raylets share this machine's host name, so each node is named by the host
    and six digits of its Ray id, the same in ELASTIC_NODE, the journal, the console, the summary,
    `elastic status` and report.json, and none of them shows a Ray id."""
    out = tmp_path / "nodes"
    out.mkdir()
    argv = [sys.executable, "-m", "elastic", "run", "--run-dir", str(launcher.run_dir),  # the console in words
            "--backend", "ray", "--address", ray_cluster.address, "--nnodes", "2:3", "--nproc-per-node", "1",
            "--max-restarts", "0", "--node-wait-timeout", "30", "--", *script("gpu_fault_on_node.py", out)]
    finished = launcher.run(raw_argv=argv, command=None, timeout_s=120)

    assert 0 == finished.returncode, finished.explain()
    started = finished.events("attempt_started")
    first_nodes, second_nodes = started[0]["nodes"], started[1]["nodes"]
    assert 3 == len(first_nodes) and 2 == len(second_nodes)
    faulty = (out / "attempt-0-rank-2.node").read_text()
    assert faulty == first_nodes[2] and faulty not in second_nodes
    assert {(out / f"attempt-1-rank-{r}.node").read_text() for r in (0, 1)} == set(second_nodes)
    report = finished.report()
    [excluded] = report["excluded_nodes"]
    assert (faulty, 0) == (excluded["node"], excluded["attempt"])
    assert excluded["reason"].startswith("ecc-error: the node is at fault")
    [scheduled] = finished.events("restart_scheduled")
    assert "preemptions" == scheduled["budget"]
    # The console says so as it happens, without -v: the node, and why.
    assert any(line.startswith(f"elastic: attempt 0: node {faulty} left out of the next attempts: "
                               "ecc-error: the node is at fault") for line in finished.stderr.splitlines()), \
        finished.stderr
    # Named for people: the host and a short id, as the journal's plan records Ray's id for each.
    ray_ids = started[0]["node_ids"]
    assert [f"{socket.gethostname()}·{ray_ids[n][:6]}" for n in first_nodes] == first_nodes
    assert re.fullmatch(re.escape(socket.gethostname()) + "·[0-9a-f]{6}", faulty), faulty
    assert any(line.strip().startswith(f"node {faulty} excluded after attempt 0: ecc-error: the node is at fault")
               for line in finished.stderr.splitlines()), finished.stderr  # the summary
    status = subprocess.run([sys.executable, "-m", "elastic", "status", str(launcher.run_dir)],
                            capture_output=True, text=True, timeout=60, env=launcher_env())
    assert f"  {faulty} after attempt 0: ecc-error" in status.stdout, status.stdout
    for shown in (finished.stderr, status.stdout, json.dumps(report)):
        assert not any(ray_id[:12] in shown for ray_id in ray_ids.values()), shown


def test_an_idle_node_of_the_cluster_takes_the_place_of_a_node_with_an_ecc_error(
    ray_cluster: Any, launcher: Launcher, tmp_path: Path
) -> None:
    """Three nodes, --nnodes 2: attempt 0 runs on two of them, the third idles. Group rank 1's GPU
    has an uncorrectable ECC error: its node is excluded (not kept for want of nodes: the idle one
    counts), and attempt 1 runs on the other two, the idle one included; the run succeeds."""
    out = tmp_path / "nodes"
    out.mkdir()
    argv = [sys.executable, "-m", "elastic", "run", "--run-dir", str(launcher.run_dir),
            "--backend", "ray", "--address", ray_cluster.address, "--nnodes", "2", "--nproc-per-node", "1",
            "--max-restarts", "0", "--node-wait-timeout", "30", "--", *script("gpu_fault_on_node.py", out, 1)]
    finished = launcher.run(raw_argv=argv, command=None, timeout_s=120)

    assert 0 == finished.returncode, finished.explain()
    started = finished.events("attempt_started")
    first_nodes, second_nodes = started[0]["nodes"], started[1]["nodes"]
    assert 2 == len(first_nodes) == len(second_nodes)
    cluster = {f"{socket.gethostname()}·{worker.node_id[:6]}" for worker in ray_cluster.workers}
    [idle] = cluster - set(first_nodes)
    faulty = (out / "attempt-0-rank-1.node").read_text()
    assert faulty == first_nodes[1]
    assert {first_nodes[0], idle} == set(second_nodes)
    assert {(out / f"attempt-1-rank-{r}.node").read_text() for r in (0, 1)} == set(second_nodes)
    [excluded] = finished.events("node_excluded")
    assert faulty == excluded["node"] and excluded["reason"].startswith("ecc-error: the node is at fault")
    assert [] == finished.events("node_kept")
    [scheduled] = finished.events("restart_scheduled")
    assert "preemptions" == scheduled["budget"]


def test_a_rank_given_gpus_that_finds_none_has_its_node_excluded_and_the_run_restarted_elsewhere(
    ray_cluster: Any, launcher: Launcher, tmp_path: Path
) -> None:
    """Three nodes of two (fake) GPUs each, --nnodes 2: group rank 1, given its node's GPUs, raises
    torch's ``RuntimeError: No CUDA GPUs are available`` (its GPU fell off the bus). That is its
    node's fault, not the code's (before: deterministic, and the run stopped with restarts left):
    the node is excluded, attempt 1 runs on the idle node, charged to the preemption budget."""
    out = tmp_path / "nodes"
    out.mkdir()
    argv = [sys.executable, "-m", "elastic", "run", "--run-dir", str(launcher.run_dir),
            "--backend", "ray", "--address", ray_cluster.address, "--nnodes", "2", "--nproc-per-node", "1",
            "--max-restarts", "0", "--node-wait-timeout", "30", "--",
            *script("gpu_fault_on_node.py", out, 1, "no-gpu")]
    finished = launcher.run(raw_argv=argv, command=None, timeout_s=120)

    assert 0 == finished.returncode, finished.explain()
    first, _ = finished.report()["attempts"]
    diagnosis = first["root_cause"]["diagnosis"]
    assert ("no-gpu", "node", "RuntimeError: No CUDA GPUs are available") == (
        diagnosis["signature"], diagnosis["class"], diagnosis["line"]), diagnosis
    assert "fallen off the bus" in diagnosis["hint"]
    started = finished.events("attempt_started")
    faulty = (out / "attempt-0-rank-1.node").read_text()
    assert faulty == started[0]["nodes"][1] and faulty not in started[1]["nodes"]
    [excluded] = finished.events("node_excluded")
    assert faulty == excluded["node"] and excluded["reason"].startswith("no-gpu: the node is at fault")
    [scheduled] = finished.events("restart_scheduled")
    assert "preemptions" == scheduled["budget"]


def test_a_node_failing_the_preflight_is_excluded_before_launch_and_the_run_succeeds_on_the_others(
    ray_cluster: Any, launcher: Launcher, tmp_path: Path
) -> None:
    """Three nodes, --nnodes 2:3: --preflight fails on one of them (it reads its ELASTIC_NODE). The
    node is excluded with its output before anything is launched, attempt 0 is planned again on the
    other two (not checked again: they passed a moment ago), and the run succeeds there."""
    checks, ranks = tmp_path / "checks", tmp_path / "ranks"
    checks.mkdir()
    ranks.mkdir()
    bad = f"{socket.gethostname()}·{ray_cluster.workers[1].node_id[:6]}"  # its name: the host is shared
    preflight = shlex.join(script("preflight_check.py", checks, "--fail-on", bad))
    argv = [sys.executable, "-m", "elastic", "run", "--run-dir", str(launcher.run_dir),
            "--backend", "ray", "--address", ray_cluster.address, "--nnodes", "2:3", "--nproc-per-node", "1",
            "--max-restarts", "0", "--node-wait-timeout", "30", "--preflight", preflight,
            "--", *script("dump_env.py", ranks)]
    finished = launcher.run(raw_argv=argv, command=None, timeout_s=120)

    assert 0 == finished.returncode, finished.explain()
    [first] = finished.events("preflight_ran")
    assert {bad: False} == {r["node"]: r["passed"] for r in first["results"] if not r["passed"]}
    assert 3 == len(first["results"])
    [failed] = [r for r in first["results"] if r["node"] == bad]
    assert [f"checking {bad}", "GPU 00000000:3B:00.0: Volatile Uncorrectable ECC errors: 2"] == failed["output"]
    [started] = finished.events("attempt_started")
    assert 2 == len(started["nodes"]) and bad not in started["nodes"], started
    assert {json.loads(p.read_text())["ELASTIC_NODE"] for p in ranks.glob("attempt-0-rank-*.json")} == \
        set(started["nodes"])
    [excluded] = finished.report()["excluded_nodes"]
    assert (bad, 0) == (excluded["node"], excluded["attempt"])
    assert excluded["reason"] == ("--preflight failed (exit code 3): "
                                  "GPU 00000000:3B:00.0: Volatile Uncorrectable ECC errors: 2")
    seen = {json.loads(p.read_text())["ELASTIC_NODE"] for p in checks.glob("preflight-*.json")}
    assert bad in seen and 3 == len(seen) == len(list(checks.glob("preflight-*.json")))  # each node once
