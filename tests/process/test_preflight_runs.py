"""``--preflight`` on the local backend: a real command checks the node before the ranks start."""

from __future__ import annotations

import json
import os
import shlex
import signal
from pathlib import Path

from harness import Launcher, elastic_command, is_alive, read_pids, script, wait_for

GONE_BOUND_S = 5.0  # a bound on "gone", not a measurement: within a second when the machine is idle


def _preflight(*args: object) -> str:
    return shlex.join(script("preflight_check.py", *args))


def test_a_failing_preflight_fails_the_run_before_launch_in_one_line(launcher: Launcher, tmp_path: Path) -> None:
    """The only node's check exits 3: no rank starts, the run fails with the requeue status and one
    line naming --preflight and what the check said; the journal and `elastic status` keep it."""
    checks, ranks = tmp_path / "checks", tmp_path / "ranks"
    checks.mkdir()
    ranks.mkdir()
    finished = launcher.run("--max-restarts", 3, "--nproc-per-node", 2,
                            "--preflight", _preflight(checks, "--fail-on", "all"),
                            command=script("dump_env.py", ranks))

    assert 75 == finished.returncode, finished.explain()
    assert [] == list(ranks.iterdir())  # nothing launched
    node = finished.report()["excluded_nodes"][0]["node"]
    why = [line for line in finished.stderr.splitlines() if line.startswith("  why it stopped: ")]
    assert [f"  why it stopped: --preflight failed on node {node} (exit code 3): GPU 00000000:3B:00.0: "
            "Volatile Uncorrectable ECC errors: 2; 0 usable nodes left, --nnodes needs at least 1"] == why, \
        finished.stderr
    [ran] = finished.events("preflight_ran")
    [result] = ran["results"]
    assert (node, False, 3) == (result["node"], result["passed"], result["exit_code"])
    assert [f"checking {node}", "GPU 00000000:3B:00.0: Volatile Uncorrectable ECC errors: 2"] == result["output"]
    [excluded] = finished.events("node_excluded")
    assert "--preflight failed (exit code 3): GPU 00000000:3B:00.0: Volatile Uncorrectable ECC errors: 2" == \
        excluded["reason"]
    assert "    | checking " + node in finished.stderr.splitlines()  # its output under the excluded node
    assert [] == finished.events("attempt_started")
    shown = elastic_command("status", launcher.run_dir).stdout
    assert "--preflight failed on node" in shown and "excluded nodes: 1" in shown, shown


def test_a_passing_preflight_runs_with_the_first_rank_s_environment_and_the_run_proceeds(
    launcher: Launcher, tmp_path: Path
) -> None:
    """The check exits 0: the ranks run, the journal holds its result, and it saw rank 0's variables."""
    checks, ranks = tmp_path / "checks", tmp_path / "ranks"
    checks.mkdir()
    ranks.mkdir()
    finished = launcher.run("--nproc-per-node", 2, "--preflight", _preflight(checks),
                            command=script("dump_env.py", ranks))

    assert 0 == finished.returncode, finished.explain()
    [ran] = finished.events("preflight_ran")
    [result] = ran["results"]
    assert (True, 0, False) == (result["passed"], result["exit_code"], result["timed_out"]), ran
    [check] = [json.loads(p.read_text()) for p in checks.glob("preflight-*.json")]
    rank_0 = json.loads((ranks / "attempt-0-rank-0.json").read_text())
    for name in ("ELASTIC_NODE", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT", "ELASTIC_RUN_ID"):
        assert rank_0[name] == check[name], name
    assert [result["node"]] == [check["ELASTIC_NODE"]]
    assert 2 == len(list(ranks.glob("attempt-0-rank-*.json")))


def test_a_preflight_past_its_timeout_is_killed_and_fails(launcher: Launcher, tmp_path: Path) -> None:
    """A check that hangs is killed at --preflight-timeout and counts as failed."""
    checks = tmp_path / "checks"
    checks.mkdir()
    finished = launcher.run("--preflight-timeout", 1, "--preflight",
                            _preflight(checks, "--fail-on", "all", "--sleep", 120),
                            command=["true"])

    assert 75 == finished.returncode, finished.explain()
    [result] = finished.events("preflight_ran")[0]["results"]
    assert (True, None) == (result["timed_out"], result["exit_code"]), result
    assert "(timed out after 1s, --preflight-timeout): checking" in finished.stderr, finished.stderr


def test_a_sigkilled_launcher_takes_its_running_preflight_and_its_daemon_with_it(
    launcher: Launcher, pid_dir: Path
) -> None:
    """SIGKILL to the launcher while a --preflight hangs: the check, and the setsid daemon it left, go too."""
    check = shlex.join(script("start_daemon.py", pid_dir, "--double-fork"))  # then sleeps 300 s
    process = launcher.start("--preflight-timeout", 300, "--preflight", check, command=["true"])
    command, daemon = read_pids(pid_dir, 1)
    assert is_alive(command) and is_alive(daemon)

    os.kill(process.pid, signal.SIGKILL)
    process.wait(10)

    wait_for(lambda: not (is_alive(command) or is_alive(daemon)), f"check {command}, daemon {daemon} gone",
             GONE_BOUND_S)


def test_a_daemon_a_passing_preflight_left_behind_is_gone_before_the_ranks_start(
    launcher: Launcher, pid_dir: Path
) -> None:
    """A check that starts a setsid daemon and exits 0 passes; the daemon does not outlive the check."""
    check = shlex.join(script("start_daemon.py", pid_dir, "--double-fork", "--exit", 0))
    finished = launcher.run("--preflight", check, command=["true"])

    assert 0 == finished.returncode, finished.explain()
    [result] = finished.events("preflight_ran")[0]["results"]
    assert result["passed"], result
    command, daemon = read_pids(pid_dir, 1)
    assert not is_alive(daemon), f"daemon {daemon} of check {command} outlived it"
