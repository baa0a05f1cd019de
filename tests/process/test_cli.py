"""The command line for real: usage errors, `elastic status`, and running a script without '--'."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from harness import RUN_TIMEOUT_S, Launcher, elastic_command, is_alive, launcher_env, read_pids, script, wait_for


@pytest.mark.parametrize(
    ("options", "flag"),
    [
        (["--nproc-per-node", "0"], "--nproc-per-node"),
        (["--max-restarts", "-1"], "--max-restarts"),
        (["--grace-period", "-5"], "--grace-period"),
        (["--exit-timeout", "1e300"], "--exit-timeout"),
        (["--failure-grace", "1e300"], "--failure-grace"),
    ],
    ids=["nproc-0", "max-restarts-negative", "grace-period-negative", "exit-timeout-too-long",
         "failure-grace-too-long"],
)
def test_bad_flag_is_a_one_line_usage_error_and_nothing_starts(
    launcher: Launcher, tmp_path: Path, options: list[str], flag: str
) -> None:
    """A bad value exits 2 with one stderr line naming the flag; no run dir, no rank started."""
    marker = tmp_path / "launched"
    marker.mkdir()
    finished = launcher.run(*options, command=script("dump_env.py", marker))

    assert 2 == finished.returncode, finished.explain()
    lines = finished.stderr.splitlines()
    assert 1 == len(lines), finished.stderr
    assert flag in lines[0]
    assert not launcher.run_dir.exists()
    assert [] == list(marker.iterdir())


@pytest.mark.parametrize("after", [[], ["--"]], ids=["nothing", "nothing-after-dashes"])
def test_missing_command_is_a_one_line_usage_error(launcher: Launcher, after: list[str]) -> None:
    """Without a command the launcher exits 2 with one stderr line and creates no run directory."""
    finished = launcher.run(raw_argv=launcher.argv([], None) + after, command=None)

    assert 2 == finished.returncode, finished.explain()
    lines = finished.stderr.splitlines()
    assert 1 == len(lines), finished.stderr
    assert "command" in lines[0].lower()
    assert not launcher.run_dir.exists()


def test_a_metrics_port_in_use_is_a_one_line_usage_error_and_nothing_starts(
    launcher: Launcher, tmp_path: Path
) -> None:
    """A --metrics-port another socket listens on exits 2 with one line naming the flag and
    the cause, before the run directory is made (so `elastic status` sees no dead driver)."""
    marker = tmp_path / "launched"
    marker.mkdir()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        finished = launcher.run("--metrics-port", port, command=script("dump_env.py", marker))

    assert 2 == finished.returncode, finished.explain()
    [line] = finished.stderr.splitlines()
    assert line.startswith("elastic: error: --metrics-port:"), line
    assert f"127.0.0.1:{port}" in line and "in use" in line, line
    assert not launcher.run_dir.exists()
    assert [] == list(marker.iterdir())


def test_a_metrics_host_that_resolves_nowhere_is_a_one_line_usage_error_and_nothing_starts(
    launcher: Launcher, tmp_path: Path
) -> None:
    """--metrics-host no.such.host.invalid exits 2 with one line naming the flag and the host."""
    marker = tmp_path / "launched"
    marker.mkdir()
    finished = launcher.run("--metrics-port", 0, "--metrics-host", "no.such.host.invalid",
                            command=script("dump_env.py", marker))

    assert 2 == finished.returncode, finished.explain()
    [line] = finished.stderr.splitlines()
    assert line.startswith("elastic: error: --metrics-host:"), line
    assert "'no.such.host.invalid'" in line, line
    assert not launcher.run_dir.exists()
    assert [] == list(marker.iterdir())

def test_status_of_a_finished_run_shows_phase_attempts_failures_and_root_cause(
    launcher: Launcher,
) -> None:
    """`elastic status` on a finished run shows phase done, attempts, failures and root cause."""
    finished = launcher.run(
        "--max-restarts", 1, "--run-id", "status-test", command=script("exit_with.py", 3)
    )
    assert 3 == finished.returncode, finished.explain()

    shown = elastic_command("status", launcher.run_dir)

    assert 0 == shown.returncode, shown.stderr
    out = shown.stdout
    assert "status-test" in out and "phase done" in out and "2 attempts" in out, out
    assert "failures: 2" in out, out
    assert "root cause: attempt 1: rank 0" in out and "exit code 3" in out, out


def test_status_of_a_journal_with_a_corrupt_line_names_the_file_and_line(
    launcher: Launcher,
) -> None:
    """A corrupt journal line: `elastic status` exits 2 with one line naming file and line."""
    assert 3 == launcher.run(command=script("exit_with.py", 3)).returncode
    journal = launcher.run_dir / "journal.jsonl"
    lines = journal.read_text().splitlines()
    lines[2] = '{"event": "worker_fai'
    journal.write_text("\n".join(lines) + "\n")

    shown = elastic_command("status", launcher.run_dir)

    assert 2 == shown.returncode
    assert 1 == len(shown.stderr.splitlines()), shown.stderr
    assert f"{journal}:3" in shown.stderr


def test_status_of_a_directory_without_a_journal_is_a_one_line_error(tmp_path: Path) -> None:
    """`elastic status` on a directory holding no run exits 2 with one line naming the journal."""
    shown = elastic_command("status", tmp_path)

    assert 2 == shown.returncode
    assert 1 == len(shown.stderr.splitlines()), shown.stderr
    assert str(tmp_path / "journal.jsonl") in shown.stderr


def test_status_of_a_live_run_shows_it_running(launcher: Launcher, pid_dir: Path) -> None:
    """`elastic status` on a run still in progress shows phase running, its one attempt and its rank's pid."""
    process = launcher.start(command=script("sleep_forever.py", pid_dir))
    [rank_pid] = read_pids(pid_dir, 1)
    wait_for(
        lambda: "phase running" in elastic_command("status", launcher.run_dir).stdout, "the journal to say running"
    )

    shown = elastic_command("status", launcher.run_dir)
    os.kill(process.pid, signal.SIGTERM)
    assert 143 == launcher.finished(process).returncode

    assert 0 == shown.returncode, shown.stderr
    assert "phase running, 1 attempt" in shown.stdout, shown.stdout
    assert "failures: 0" in shown.stdout, shown.stdout
    assert "live: phase running, attempt 0, world 1 on 1 node, 1 rank alive" in shown.stdout
    assert f"pids of attempt 0: rank 0 {rank_pid} (node " in shown.stdout, shown.stdout


def test_status_of_a_live_run_names_the_latest_checkpoint_in_the_directory(launcher: Launcher, tmp_path: Path) -> None:
    """Rank 0 saves a checkpoint every 0.3 s: `elastic status` mid-run names the latest complete
    one in --checkpoint-dir, at least the one there before it was asked (it said `none` until the
    attempt ended: the driver scans the directory only at an attempt's start and end)."""
    checkpoints, out = tmp_path / "ckpt", tmp_path / "out"
    checkpoints.mkdir()
    out.mkdir()
    process = launcher.start("--checkpoint-dir", checkpoints, command=script("save_steps.py", checkpoints, out))
    wait_for(lambda: (checkpoints / "step_3.pt").exists(), "rank 0's checkpoint of step 3")

    def live() -> subprocess.CompletedProcess[str] | None:
        shown = elastic_command("status", launcher.run_dir)
        return shown if "live: phase running" in shown.stdout else None

    shown = wait_for(live, "the live status of a running attempt")
    os.kill(process.pid, signal.SIGTERM)
    assert 143 == launcher.finished(process).returncode

    named = re.search(r"last checkpoint step: (\S+),", shown.stdout)
    assert named is not None and named.group(1).isdigit() and int(named.group(1)) >= 3, shown.stdout


def test_status_says_when_the_driver_died(launcher: Launcher, pid_dir: Path) -> None:
    """A run whose launcher was SIGKILLed is reported as such, with how to continue it."""
    process = launcher.start("--run-id", "orphaned", command=script("sleep_forever.py", pid_dir))
    read_pids(pid_dir, 1)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(10)

    shown = elastic_command("status", launcher.run_dir)

    assert "is not running: it died; rerun the same command with --run-id orphaned" in shown.stdout


def _elastic(*argv: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "elastic", *map(str, argv)], check=False, capture_output=True,
        text=True, timeout=RUN_TIMEOUT_S, env=launcher_env(), stdin=subprocess.DEVNULL,
    )


def test_logs_show_an_attempt_prefixed_or_one_rank_plain(launcher: Launcher) -> None:
    """`elastic logs` prints the latest attempt's ranks prefixed; --rank/--attempt pick one."""
    finished = launcher.run("--nproc-per-node", 2, "--max-restarts", 1,
                            command=script("exit_with.py", 3, "--attempt", 0, "--say", "hello"))
    assert 0 == finished.returncode, finished.explain()

    everything = _elastic("logs", launcher.run_dir)
    one = _elastic("logs", launcher.run_dir, "--rank", 1, "--attempt", 1)

    assert ["[rank 0] hello attempt 1", "[rank 1] hello attempt 1"] == everything.stdout.splitlines()
    assert ["hello attempt 1"] == one.stdout.splitlines()


def test_logs_of_a_missing_rank_or_a_non_run_is_a_one_line_error(launcher: Launcher, tmp_path: Path) -> None:
    """A rank the attempt does not have, or a directory without a run: exit 2, one line."""
    assert 0 == launcher.run(command=script("exit_with.py", 0)).returncode
    for shown, names in ((_elastic("logs", launcher.run_dir, "--rank", 5), "--rank"),
                         (_elastic("logs", tmp_path / "nothing"), "not a run directory")):
        assert 2 == shown.returncode
        assert 1 == len(shown.stderr.splitlines()) and names in shown.stderr, shown.stderr


def test_logs_follow_ends_when_the_run_finishes(launcher: Launcher, pid_dir: Path) -> None:
    """`elastic logs --follow` streams a live run and returns once it has finished."""
    process = launcher.start(command=script("exit_with.py", 0, "--say", "bye",
                                            "--wait-for", pid_dir / "go"))
    launcher.wait_for_event("attempt_started")
    follower = subprocess.Popen([sys.executable, "-m", "elastic", "logs", str(launcher.run_dir), "--follow"],
                                stdout=subprocess.PIPE, text=True, env=launcher_env(),
                                stdin=subprocess.DEVNULL)
    try:
        (pid_dir / "go").write_text("")
        assert 0 == launcher.finished(process).returncode
        out, _ = follower.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait(10)
    assert "[rank 0] bye attempt 0" in out


def test_logs_follow_ends_when_the_driver_is_killed_saying_how_to_continue(
    launcher: Launcher, pid_dir: Path
) -> None:
    """The driver SIGKILLed while `elastic logs --follow` follows: the follower ends (it would
    wait for a run_finished that never comes) with the line `elastic status` prints for a dead
    driver, naming its pid and the --run-id that continues the run."""
    process = launcher.start("--run-id", "followed", command=script("sleep_forever.py", pid_dir))
    [rank] = read_pids(pid_dir, 1)
    follower = subprocess.Popen([sys.executable, "-m", "elastic", "logs", str(launcher.run_dir), "--follow"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=launcher_env(), stdin=subprocess.DEVNULL)
    try:
        os.kill(process.pid, signal.SIGKILL)  # by pid: the launcher this test started
        process.wait(10)
        wait_for(lambda: not is_alive(rank), f"rank {rank} gone with its driver", 5)
        _, err = follower.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait(10)
    assert 0 == follower.returncode, err
    said = f"driver (pid {process.pid}) is not running: it died; rerun the same command with --run-id followed"
    assert [said + " to continue"] == err.splitlines()
    assert said in elastic_command("status", launcher.run_dir).stdout


def test_a_script_given_without_dashes_runs_with_the_launchers_python(
    launcher: Launcher, tmp_path: Path
) -> None:
    """`elastic run [options] script.py args` runs the script with this Python, args untouched."""
    out = tmp_path / "argv.json"
    recorder = str(Path(script("record_argv.py")[1]))
    script_argv = [recorder, str(out), "--lr", "3e-4", "--max-restarts", "7"]

    finished = launcher.run(raw_argv=launcher.argv([], None) + script_argv, command=None)

    assert 0 == finished.returncode, finished.explain()
    assert [sys.executable, *script_argv] == json.loads(out.read_text())
    [started] = finished.events("run_started")
    assert 0 == started["max_restarts"]


def test_a_run_directory_that_holds_a_run_is_refused_and_left_untouched(launcher: Launcher) -> None:
    """Reusing a run directory exits 2 with one line naming --run-dir; the old run is untouched."""
    assert 3 == launcher.run(command=script("exit_with.py", 3)).returncode
    files = ("journal.jsonl", "state.json", "report.json")
    before = {name: (launcher.run_dir / name).read_bytes() for name in files}

    finished = launcher.run(command=script("exit_with.py", 0))

    assert 2 == finished.returncode, finished.explain()
    assert 1 == len(finished.stderr.splitlines()), finished.stderr
    assert "--run-dir" in finished.stderr
    assert before == {name: (launcher.run_dir / name).read_bytes() for name in files}
    assert not (launcher.run_dir / "attempt-1").exists()


def test_without_run_dir_the_run_lands_in_elastic_runs_under_the_run_id(
    launcher: Launcher, tmp_path: Path
) -> None:
    """With --run-id and no --run-dir, the run lands in ./elastic-runs/<run-id> of the cwd."""
    argv = [
        sys.executable,
        "-m",
        "elastic",
        "run",
        "--log-format",
        "json",
        "--run-id",
        "where-test",
        "--",
        *script("exit_with.py", 0),
    ]

    finished = launcher.run(raw_argv=argv, command=None)

    assert 0 == finished.returncode, finished.explain()
    assert (tmp_path / "elastic-runs" / "where-test" / "report.json").is_file()
