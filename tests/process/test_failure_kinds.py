"""Each failure kind end to end: real ranks fail for real, the launcher sorts and reports them."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from harness import Finished, Launcher, per_rank, script


def _failed(finished: Finished) -> dict[str, Any]:
    events = finished.events("worker_failed")
    assert events, finished.explain()
    return events[0]


def test_rank_exit_code_is_exited_and_becomes_the_exit_status(launcher: Launcher) -> None:
    """A rank exiting 3 is an 'exited' failure and the launcher exits 3."""
    finished = launcher.run(command=script("exit_with.py", 3))

    assert 3 == finished.returncode, finished.explain()
    failed = _failed(finished)
    assert ("exited", 0, 3, None) == (
        failed["kind"],
        failed["rank"],
        failed["exit_code"],
        failed["signal"],
    )
    cause = finished.report()["root_cause"]
    assert ("exited", 3, 3) == (cause["kind"], cause["exit_code"], cause["exit_status"])


def test_rank_segfault_is_crashed_with_status_139_and_a_python_traceback(
    launcher: Launcher,
) -> None:
    """A rank killed by SIGSEGV is 'crashed', exit status 139, and its log holds a traceback."""
    finished = launcher.run(command=script("kill_self.py", "SIGSEGV"))

    assert 139 == finished.returncode, finished.explain()
    failed = _failed(finished)
    assert ("crashed", "SIGSEGV", None) == (failed["kind"], failed["signal"], failed["exit_code"])
    cause = finished.report()["root_cause"]
    assert ("crashed", "SIGSEGV", 11, 139) == (
        cause["kind"],
        cause["signal"],
        cause["signal_number"],
        cause["exit_status"],
    )
    assert "Fatal Python error: Segmentation fault" in finished.rank_log(0, 0)


def test_rank_sigkilled_is_killed_with_status_137(launcher: Launcher) -> None:
    """A rank dying by a SIGKILL the launcher did not send is 'killed'; exit status 137."""
    finished = launcher.run(command=script("kill_self.py", "SIGKILL"))

    assert 137 == finished.returncode, finished.explain()
    failed = _failed(finished)
    assert ("killed", "SIGKILL") == (failed["kind"], failed["signal"])
    assert ("killed", "SIGKILL", 137) == tuple(
        finished.report()["root_cause"][k] for k in ("kind", "signal", "exit_status")
    )


def test_rank_sigterm_from_outside_is_terminated_and_restarted_free_of_charge(
    launcher: Launcher,
) -> None:
    """A rank SIGTERMed by someone else (a preemption) is restarted even with --max-restarts 0."""
    finished = launcher.run(
        "--max-restarts", 0, command=script("kill_self.py", "SIGTERM", "--attempt", 0)
    )

    assert 0 == finished.returncode, finished.explain()
    failed = _failed(finished)
    assert ("terminated", "SIGTERM", 0) == (failed["kind"], failed["signal"], failed["attempt"])
    [scheduled] = finished.events("restart_scheduled")
    assert "preemptions" == scheduled["budget"]
    report = finished.report()
    assert ("succeeded", 2) == (report["outcome"], len(report["attempts"]))
    assert "terminated" == report["attempts"][0]["root_cause"]["kind"]


def test_shell_wrapper_status_128_plus_n_is_read_as_signal_n(launcher: Launcher) -> None:
    """A shell reporting 137 for its SIGKILLed child is 'killed', as if the rank died itself."""
    inner = " ".join(script("kill_self.py", "SIGKILL"))
    finished = launcher.run(command=["bash", "-c", f"{inner}; exit $?"])

    assert 137 == finished.returncode, finished.explain()
    failed = _failed(finished)
    assert ("killed", "SIGKILL", None) == (failed["kind"], failed["signal"], failed["exit_code"])


def test_command_not_found_fails_at_once_with_127_and_is_never_retried(launcher: Launcher) -> None:
    """A missing command ends the run with 127 after one attempt, despite --max-restarts 3."""
    finished = launcher.run(
        "--max-restarts", 3, "--nproc-per-node", 2, command=["elastic-test-no-such-command-xyz"]
    )

    assert 127 == finished.returncode, finished.explain()
    assert 1 == len(finished.events("attempt_started"))
    assert [] == finished.events("restart_scheduled")
    assert 1 == len(finished.events("restart_refused"))
    report = finished.report()
    assert 1 == len(report["attempts"])
    assert ("launch-failed", 127) == (
        report["root_cause"]["kind"],
        report["root_cause"]["exit_status"],
    )


def test_command_not_executable_fails_at_once_with_126(launcher: Launcher, tmp_path: Path) -> None:
    """A command that exists but lacks the execute bit ends the run with 126 after one attempt."""
    program = tmp_path / "not-executable.sh"
    program.write_text("#!/bin/sh\nexit 0\n")
    os.chmod(program, stat.S_IRUSR | stat.S_IWUSR)

    finished = launcher.run("--max-restarts", 3, command=[program])

    assert 126 == finished.returncode, finished.explain()
    report = finished.report()
    assert 1 == len(report["attempts"])
    assert ("launch-failed", 126) == (
        report["root_cause"]["kind"],
        report["root_cause"]["exit_status"],
    )


def test_a_working_directory_that_is_gone_is_a_launch_failure_naming_it_and_the_node(
    launcher: Launcher, tmp_path: Path
) -> None:
    """The job deletes the directory it started in: the next attempt is a launch failure (126) that
    names the directory and the node, not 'command not found' nor an internal error."""
    started_in = tmp_path / "work"
    started_in.mkdir()
    finished = launcher.run("--max-restarts", 3, command=script("remove_cwd.py"), cwd=started_in)

    assert 126 == finished.returncode, finished.explain()
    assert "Traceback" not in finished.stderr
    report = finished.report()
    assert 2 == len(report["attempts"])
    root = report["root_cause"]
    assert ("launch-failed", 126) == (root["kind"], root["exit_status"])
    assert root["message"].startswith(f"{started_in}: the working directory"), root["message"]
    assert f"on node {root['node']}: no such file or directory" in root["message"]


def test_a_rank_failing_after_the_first_failure_is_collateral_never_the_root_cause(
    launcher: Launcher, tmp_path: Path
) -> None:
    """Rank 0 exits 3, then rank 1 exits 5 on our SIGTERM: rank 0 is root cause, 1 is collateral."""
    ready = tmp_path / "rank-1-ready"
    finished = launcher.run(
        "--nproc-per-node",
        2,
        "--grace-period",
        5,
        command=per_rank(
            ["exit_with.py", 3, "--wait-for", ready],
            ["trap_sigterm.py", 5, ready],
        ),
    )

    assert 3 == finished.returncode, finished.explain()
    by_rank = {e["rank"]: e for e in finished.events("worker_failed")}
    assert ("exited", 3) == (by_rank[0]["kind"], by_rank[0]["exit_code"])
    assert ("collateral", 5) == (by_rank[1]["kind"], by_rank[1]["exit_code"])
    [finish] = finished.events("run_finished")
    assert (0, 3) == (finish["root_cause"]["rank"], finish["root_cause"]["exit_code"])
    report = finished.report()
    assert (0, 3) == (report["root_cause"]["rank"], report["root_cause"]["exit_status"])
    assert {(0, "exited"), (1, "collateral")} == {
        (f["rank"], f["kind"]) for f in report["attempts"][0]["failures"]
    }


def test_a_recorded_exception_is_shown_as_the_root_cause(launcher: Launcher) -> None:
    """An exception written to the torch-style error file appears in the summary and report."""
    finished = launcher.run(command=script("raise_recorded.py"))

    assert 1 == finished.returncode, finished.explain()
    assert "ValueError: loss went NaN at step 7" == finished.report()["root_cause"]["message"]
    assert "error: ValueError: loss went NaN at step 7" in finished.stderr
    # The recorded traceback: whole in report.json (root cause and the attempt's failure),
    # its last lines in the summary under the error, as torchrun's "Root Cause" shows it.
    traceback = finished.report()["root_cause"]["traceback"]
    assert traceback.startswith("Traceback (most recent call last):"), traceback
    assert 'raise ValueError("loss went NaN at step 7")' in traceback
    assert traceback.endswith("ValueError: loss went NaN at step 7")
    [failure] = finished.report()["attempts"][-1]["failures"]
    assert traceback == failure["traceback"]
    summary = finished.stderr[finished.stderr.index("error: ValueError"):]
    assert "last lines of rank 0's traceback:" in summary
    assert '    | ValueError: loss went NaN at step 7' in summary
    assert "in main" in summary


def test_a_last_line_longer_than_the_log_tail_is_the_root_causes_last_line(launcher: Launcher) -> None:
    """A rank whose error is one line of 21,259 characters (MaxText's misspelt key): the
    summary and report.json show the line's start and end, marked where it was cut."""
    finished = launcher.run(command=script("long_error_line.py"))

    assert 1 == finished.returncode, finished.explain()
    [line] = finished.report()["root_cause"]["log_tail"][-1:]
    assert line.startswith("ValueError: 'num_stpes' not in 'key_00001'"), line[:100]
    assert line.endswith("'key_01632', 'key_01633'."), line[-100:]
    assert "…[cut 4,364 characters]…" in line
    [failure] = finished.report()["attempts"][0]["failures"]
    assert failure["log_tail"][-1] == line
    summary = finished.stderr[finished.stderr.index("last lines of rank 0's log:"):]
    assert f"    | {line}" in summary
