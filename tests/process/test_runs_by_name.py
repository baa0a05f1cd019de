"""Runs are found where they are kept: the runs folder, by id, by path, or the latest."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from harness import RUN_TIMEOUT_S, Launcher, elastic_command, launcher_env, read_pids, script, wait_for


def _run_argv(*options: object, code: int = 0) -> list[str]:
    """`python -m elastic run OPTIONS -- exit_with.py CODE --say hello`, with no --run-dir."""
    return [sys.executable, "-m", "elastic", "run", "--log-format", "json", *map(str, options),
            "--", *script("exit_with.py", code, "--say", "hello")]


def _elastic(cwd: Path, *argv: object, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m elastic ARGV` in ``cwd``, with ``env`` added to the launcher's environment."""
    return subprocess.run(
        [sys.executable, "-m", "elastic", *map(str, argv)], capture_output=True, text=True, cwd=cwd,
        timeout=RUN_TIMEOUT_S, env=launcher_env(**env), stdin=subprocess.DEVNULL, check=False,
    )


def _two_runs(launcher: Launcher) -> None:
    """`first` succeeds, then `second` fails (exit 3) after one restart, in ./elastic-runs."""
    assert 0 == launcher.run(raw_argv=_run_argv("--run-id", "first"), command=None).returncode
    second = launcher.run(raw_argv=_run_argv("--run-id", "second", "--max-restarts", 1, code=3), command=None)
    assert 3 == second.returncode, second.explain()


def test_a_run_lands_in_the_runs_folder_the_flag_or_variable_names(launcher: Launcher, tmp_path: Path) -> None:
    """`--runs-dir DIR` (or `ELASTIC_RUNS_DIR`) puts a run without --run-dir in DIR/<run-id>."""
    by_flag = launcher.run(raw_argv=_run_argv("--runs-dir", "kept", "--run-id", "one"), command=None)
    by_variable = launcher.run(
        raw_argv=_run_argv("--run-id", "two"), command=None, env=launcher_env(ELASTIC_RUNS_DIR="held")
    )

    assert 0 == by_flag.returncode, by_flag.explain()
    assert 0 == by_variable.returncode, by_variable.explain()
    assert (tmp_path / "kept" / "one" / "report.json").is_file()
    assert (tmp_path / "held" / "two" / "report.json").is_file()
    assert not (tmp_path / "elastic-runs").exists()


def test_status_logs_report_and_stack_find_a_run_by_its_id(launcher: Launcher, tmp_path: Path) -> None:
    """From the folder that holds elastic-runs/, a bare run id is the run elastic-runs/<id>
    (`elastic status 20261204-130603-ed243b` said `journal.jsonl: cannot read the journal`)."""
    _two_runs(launcher)

    status = elastic_command("status", "first", cwd=tmp_path)
    logs = elastic_command("logs", "first", cwd=tmp_path)
    report = elastic_command("report", "first", cwd=tmp_path)
    stack = elastic_command("stack", "first", cwd=tmp_path)

    assert 0 == status.returncode, status.stderr
    assert status.stdout.startswith("run first: phase done, 1 attempt\noutcome: succeeded"), status.stdout
    assert (0, ["[rank 0] hello attempt 0"]) == (logs.returncode, logs.stdout.splitlines())
    assert (0, "elastic-runs/first/timeline.html\n") == (report.returncode, report.stdout)
    assert (tmp_path / "elastic-runs" / "first" / "timeline.html").is_file()
    assert 2 == stack.returncode
    assert ["elastic: error: run first has finished (succeeded): no ranks to dump"] == stack.stderr.splitlines()


def test_with_no_run_named_each_reads_the_latest_run(launcher: Launcher, tmp_path: Path) -> None:
    """`elastic status`, `logs` and `report` with no run read the newest run of elastic-runs/."""
    _two_runs(launcher)

    status = elastic_command("status", cwd=tmp_path)
    logs = elastic_command("logs", cwd=tmp_path)
    report = elastic_command("report", cwd=tmp_path)

    assert status.stdout.startswith("run second: phase done, 2 attempts"), status.stdout
    assert ["[rank 0] hello attempt 1"] == logs.stdout.splitlines()
    assert "elastic-runs/second/timeline.html\n" == report.stdout


def test_the_runs_folder_is_the_flags_or_the_variables(launcher: Launcher, tmp_path: Path) -> None:
    """`--runs-dir DIR` or `ELASTIC_RUNS_DIR` is where a run id, or the latest run, is looked up."""
    assert 0 == launcher.run(raw_argv=_run_argv("--runs-dir", "kept", "--run-id", "one"), command=None).returncode

    by_flag = _elastic(tmp_path, "status", "one", "--runs-dir", "kept")
    by_variable = _elastic(tmp_path, "status", ELASTIC_RUNS_DIR="kept")

    assert by_flag.stdout.startswith("run one: phase done"), by_flag.stderr
    assert by_variable.stdout.startswith("run one: phase done"), by_variable.stderr


def test_a_name_that_matches_no_run_is_one_line_saying_where_it_looked(launcher: Launcher, tmp_path: Path) -> None:
    """An id of no run, or no run at all: exit 2, one line naming the folder looked in."""
    _two_runs(launcher)
    empty = tmp_path / "empty"
    empty.mkdir()

    unknown = elastic_command("status", "third", cwd=tmp_path)
    none_there = elastic_command("logs", cwd=empty)

    assert 2 == unknown.returncode
    assert [
        f"elastic: error: no run third: no directory third here, and none in {tmp_path / 'elastic-runs'}"
    ] == unknown.stderr.splitlines()
    assert 2 == none_there.returncode
    assert [
        f"elastic: error: no run in {empty / 'elastic-runs'}: give a run directory or a run id, or --runs-dir"
    ] == none_there.stderr.splitlines()


def test_elastic_runs_lists_each_run_newest_first(launcher: Launcher, tmp_path: Path, pid_dir: Path) -> None:
    """`elastic runs`: a header, then one line a run, newest first: id, start, state (its outcome,
    `running` while its driver lives, `driver died` after), attempts, exit status, root cause."""
    _two_runs(launcher)
    launcher.run_dir = tmp_path / "elastic-runs" / "third"
    process = launcher.start(command=script("sleep_forever.py", pid_dir))
    read_pids(pid_dir, 1)

    live = wait_for(lambda: _listed(tmp_path, "third", "running"), "the live run listed as running")
    os.kill(process.pid, signal.SIGKILL)  # by pid: the launcher this test started
    process.wait(10)
    after = elastic_command("runs", cwd=tmp_path)

    assert 0 == after.returncode, after.stderr
    header, *rows = after.stdout.splitlines()
    assert ["RUN", "STARTED", "STATE", "ATTEMPTS", "EXIT", "ROOT", "CAUSE"] == header.split()
    assert ["third", "second", "first"] == [row.split()[0] for row in rows]
    when = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
    assert re.fullmatch(rf"third +{when} +driver died +1 +-", rows[0]), rows[0]
    assert re.fullmatch(rf"second +{when} +failed +2 +3 +attempt 1: rank 0 exited \(exit code 3\)", rows[1]), rows[1]
    assert re.fullmatch(rf"first +{when} +succeeded +1 +0", rows[2]), rows[2]
    assert re.fullmatch(rf"third +{when} +running +1 +-", live), live


def _listed(cwd: Path, run: str, state: str) -> str | None:
    """The line of `elastic runs` for ``run`` once it says ``state``."""
    for line in elastic_command("runs", cwd=cwd).stdout.splitlines():
        if line.split()[:1] == [run] and f" {state} " in f"{line} ":
            return line
    return None
