"""Failure signatures end to end: real ranks fail for real, and the launcher reads why."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from harness import Finished, Launcher, elastic_command, launcher_env, script


def _diagnosis(finished: Finished, attempt: int = 0) -> dict[str, Any]:
    cause = finished.report()["attempts"][attempt]["root_cause"]
    assert cause is not None and cause["diagnosis"] is not None, finished.explain()
    diagnosis: dict[str, Any] = cause["diagnosis"]
    return diagnosis


@pytest.mark.parametrize("case, signature, status, line", [
    ("missing-module", "import-error", 1, "ModuleNotFoundError: No module named 'flash_attn_does_not_exist'"),
    ("syntax", "syntax-error", 1, "SyntaxError: invalid syntax"),
    ("usage", "usage-error", 2, "train.py: error: unrecognized arguments: --nope"),
    ("missing-file", "file-not-found", 1,
     "FileNotFoundError: [Errno 2] No such file or directory: 'configs/does-not-exist.yml'"),
])
def test_a_deterministic_failure_stops_after_one_attempt_with_its_own_status(
    launcher: Launcher, case: str, signature: str, status: int, line: str
) -> None:
    """With 3 restarts to spend, an error no restart can fix ends the run at once, and says so."""
    finished = launcher.run("--max-restarts", 3, "--nproc-per-node", 2,
                            command=script("fails_for_real.py", case))

    assert status == finished.returncode, finished.explain()
    report = finished.report()
    assert 1 == len(report["attempts"]), finished.explain()
    assert {"signature": signature, "class": "deterministic", "line": line} == report["root_cause"]["diagnosis"]
    assert f"  signature: {signature} (deterministic): {line}" in finished.stderr
    assert f"{signature} is deterministic: a restart fails the same way, so it was not retried" in finished.stderr
    [refused] = finished.events("restart_refused")
    assert "not retried" in refused["reason"]


def test_a_real_import_error_of_the_command_itself_stops_at_once(launcher: Launcher) -> None:
    """``python -c 'import x'`` as the command, as a new user types it: one attempt, exit 1."""
    finished = launcher.run("--max-restarts", 3, command=["python", "-c", "import flash_attn_does_not_exist"])

    assert 1 == finished.returncode, finished.explain()
    assert 1 == len(finished.report()["attempts"])
    assert "import-error" == _diagnosis(finished)["signature"]


@pytest.mark.parametrize("command, signature, line", [
    (script("fails_for_real.py", "full-disk", 0), "disk-full", "OSError: [Errno 28] No space left on device"),
    (script("fails_for_real.py", "port-in-use", 0), "port-in-use", "OSError: [Errno 98] Address already in use"),
    (script("prints_failure.py", "cuda-oom", 0), "cuda-oom", None),
    (script("prints_failure.py", "cuda-error", 0), "cuda-error",
     "RuntimeError: CUDA error: an illegal memory access was encountered"),
    (script("prints_failure.py", "nccl-timeout", 0), "nccl-timeout", None),
    (script("prints_failure.py", "ecc-error", 0), "ecc-error", "RuntimeError: CUDA error: uncorrectable ECC error encountered"),
])
def test_a_failure_a_restart_may_fix_restarts_and_the_report_names_it(
    launcher: Launcher, command: list[str], signature: str, line: str | None
) -> None:
    """A full disk, a taken port, a GPU out of memory, a collective's timeout: restarted, and named."""
    finished = launcher.run("--max-restarts", 3, "--backoff", "0:0", command=command)

    assert 0 == finished.returncode, finished.explain()
    report = finished.report()
    assert 2 == len(report["attempts"]) and report["attempts"][0]["restarted"]
    diagnosis = _diagnosis(finished)
    assert signature == diagnosis["signature"]
    if line is not None:
        assert line == diagnosis["line"]
    [failed] = [e for e in finished.events("worker_failed") if e["attempt"] == 0]
    assert signature == failed["diagnosis"]["signature"]


def test_the_console_names_a_failure_s_signature_as_it_happens(launcher: Launcher) -> None:
    """By default (words, no ``-v``) the failure's line on the console ends with its signature,
    as the summary's does: a full disk is said to be one while the run restarts."""
    argv = [sys.executable, "-m", "elastic", "run", "--run-dir", str(launcher.run_dir), "--max-restarts", "3",
            "--backoff", "0:0", "--", *script("fails_for_real.py", "full-disk", 0)]
    finished = launcher.run(raw_argv=argv, command=None)

    assert 0 == finished.returncode, finished.explain()
    [failed] = [e for e in finished.events("worker_failed") if e["attempt"] == 0]
    assert (f"elastic: attempt 0: rank 0 on {failed['node']} exited (exit code 1) [disk-full]"
            in finished.stderr.splitlines()), finished.stderr


RAISES_MY_DATA_ERROR = ["python", "-c", "class MyDataError(Exception): pass\nraise MyDataError('shard 12 corrupt')"]


def test_a_rule_of_your_own_stops_the_run_at_once(launcher: Launcher) -> None:
    """``--signature 'MyDataError=deterministic'``: the program's own error is not retried."""
    finished = launcher.run("--max-restarts", 3, "--signature", "MyDataError=deterministic",
                            command=RAISES_MY_DATA_ERROR)

    assert 1 == finished.returncode, finished.explain()
    assert 1 == len(finished.report()["attempts"])
    assert {"signature": "user:MyDataError", "class": "deterministic",
            "line": "MyDataError: shard 12 corrupt"} == _diagnosis(finished)


def test_a_rule_of_your_own_in_the_config_file(launcher: Launcher, tmp_path: Path) -> None:
    """The same rule as ``signature = [...]`` under ``[run]`` of a ``--config`` file."""
    config = tmp_path / "elastic.toml"
    config.write_text("[run]\nmax-restarts = 3\nsignature = ['MyDataError=deterministic']\n")
    finished = launcher.run("--config", config, command=RAISES_MY_DATA_ERROR)

    assert 1 == finished.returncode, finished.explain()
    assert 1 == len(finished.report()["attempts"])
    assert "user:MyDataError" == _diagnosis(finished)["signature"]


def test_a_rule_of_your_own_comes_before_the_built_in_ones(launcher: Launcher) -> None:
    """A full disk is transient for the built-ins; a user who knows better makes it deterministic."""
    finished = launcher.run("--max-restarts", 3, "--signature", "No space left on device=deterministic",
                            command=script("fails_for_real.py", "full-disk"))

    assert 1 == finished.returncode, finished.explain()
    assert 1 == len(finished.report()["attempts"])
    assert "user:No space left on device" == _diagnosis(finished)["signature"]


@pytest.mark.parametrize("options, env, says", [
    (["--signature", "MyDataError=fatal"], {}, "class 'fatal'"),
    (["--signature", "bad(regex=transient"], {}, "does not compile"),
    (["--signature", "(\\w)\\1=transient"], {}, "linear-time matching (RE2) lacks"),
    ([], {"ELASTIC_SIGNATURE": "(?<!x)y=node"}, "such as a backreference or a lookaround"),
])
def test_a_bad_rule_of_your_own_is_refused_at_start_in_one_line(
    launcher: Launcher, tmp_path: Path, options: list[str], env: dict[str, str], says: str
) -> None:
    """Nothing starts: one line names the flag (or variable) and what is wrong; exit status 2."""
    marker = tmp_path / "launched"
    marker.mkdir()
    finished = launcher.run(*options, command=script("dump_env.py", marker), env=launcher_env(**env))

    assert 2 == finished.returncode, finished.explain()
    [line] = finished.stderr.splitlines()
    assert ("ELASTIC_SIGNATURE" if env else "--signature") in line and says in line, line
    assert not launcher.run_dir.exists()
    assert [] == list(marker.iterdir())


def _attempt_0(finished: Finished) -> dict[str, Any]:
    row: dict[str, Any] = finished.report()["attempts"][0]
    return row


def test_a_rank_that_went_silent_is_the_root_cause_of_its_peers_collective_timeouts(launcher: Launcher) -> None:
    """Three ranks: rank 1 hangs at step 3, ranks 0 and 2 time out in NCCL's watchdog and abort.
    Rank 0's SIGABRT came first, but it is a victim: rank 1 is the root cause, hung."""
    finished = launcher.run("--max-restarts", 3, "--backoff", "0:0", "--nproc-per-node", 3,
                            "--stall-timeout", "none", command=script("collective_cascade.py", "silent"))

    assert 0 == finished.returncode, finished.explain()
    row = _attempt_0(finished)
    cause = row["root_cause"]
    assert ("hung", 1) == (cause["kind"], cause["rank"]), finished.explain()
    assert cause["message"].startswith("silent since step 3 while rank 0 reached step ")
    assert cause["message"].endswith("and ended in nccl-timeout: it was hung")
    assert [{"signature": "nccl-timeout", "count": 2, "ranks": [0, 2]}] == row["symptoms"], finished.explain()
    [revised] = finished.events("root_cause_revised")
    assert "rank 0 on" in revised["previous"] and "SIGABRT" in revised["previous"]
    assert "rank 1" in revised["revised"] and "hung" in revised["revised"]
    shown = finished.stderr.splitlines()
    under = shown.index(next(line for line in shown if line.startswith("  attempt 0: ")))
    assert "    2 ranks then failed as symptoms: nccl-timeout (ranks 0, 2)" == shown[under + 1], finished.stderr
    status = elastic_command("status", launcher.run_dir).stdout.splitlines()
    assert "failures: 1" in status, status  # rank 0's SIGABRT is no cause
    cause = status.index(next(line for line in status if line.startswith("  attempt 0: rank 1 on ")))
    assert "hung" in status[cause] and "2 ranks then failed as symptoms: nccl-timeout (ranks 0, 2)" == \
        status[cause + 1].strip(), status


@pytest.mark.parametrize("run", range(2))
def test_whichever_victim_aborts_first_the_silent_rank_is_the_root_cause(launcher: Launcher, run: int) -> None:
    """The same cascade without an order between the victims: rank 0 aborts while rank 2 may not
    have printed its timeout yet, and the drain may end rank 2 first. Never a victim as the cause:
    rank 1, silent since step 3, is (twice, to catch an order that differs)."""
    finished = launcher.run("--max-restarts", 3, "--backoff", "0:0", "--nproc-per-node", 3,
                            "--stall-timeout", "none", command=script("collective_cascade.py", "silent-unordered"))

    assert 0 == finished.returncode, finished.explain()
    cause = _attempt_0(finished)["root_cause"]
    assert ("hung", 1) == (cause["kind"], cause["rank"]), finished.explain()


def test_a_rank_s_own_error_printed_before_its_peers_timed_out_is_the_root_cause(launcher: Launcher) -> None:
    """Rank 1 prints CUDA's illegal memory access and gets stuck; ranks 0 and 2 time out later and
    abort first. The drain ends rank 1, and its own words make it the root cause."""
    finished = launcher.run("--max-restarts", 3, "--backoff", "0:0", "--nproc-per-node", 3,
                            "--stall-timeout", "none", command=script("collective_cascade.py", "culprit"))

    assert 0 == finished.returncode, finished.explain()
    row = _attempt_0(finished)
    cause = row["root_cause"]
    assert (1, "cuda-error") == (cause["rank"], cause["diagnosis"]["signature"]), finished.explain()
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" == cause["diagnosis"]["line"]
    assert "rank 1 on" in cause["description"] and "failed (cuda-error), ended by the drain" in cause["description"]
    [revised] = finished.events("root_cause_revised")
    assert ("failures", 1) == (revised["refunded"], finished.report()["restarts"])  # charged once


def test_a_failed_run_lists_its_root_cause_s_symptoms_under_it_counted(launcher: Launcher) -> None:
    """No restart to spend: rank 1's CUDA error ends the run, and the summary and ``elastic status``
    count ranks 0 and 2's collective timeouts under it, not as causes."""
    finished = launcher.run("--max-restarts", 0, "--nproc-per-node", 3, "--stall-timeout", "none",
                            command=script("collective_cascade.py", "culprit"))

    assert "failed" == finished.report()["outcome"], finished.explain()
    shown = finished.stderr.splitlines()
    cause = shown.index("  root cause: " + finished.report()["root_cause"]["description"])
    assert "rank 1 on" in shown[cause], finished.stderr
    assert "    2 ranks then failed as symptoms: nccl-timeout (ranks 0, 2)" == shown[cause + 1], finished.stderr
    status = elastic_command("status", launcher.run_dir).stdout.splitlines()
    assert "failures: 1" in status, status
    [listed] = [i for i, line in enumerate(status) if line.startswith("  attempt 0: ")]
    assert "rank 1 on" in status[listed] and "[cuda-error]" in status[listed], status
    assert "    2 ranks then failed as symptoms: nccl-timeout (ranks 0, 2)" == status[listed + 1], status
    assert "  2 ranks then failed as symptoms: nccl-timeout (ranks 0, 2)" in status, status  # under "root cause:"


def test_the_same_out_of_memory_at_the_same_step_twice_stops_with_budget_left(launcher: Launcher) -> None:
    """Rank 1 runs out of GPU memory at step 5 on every attempt: two attempts, not four, and the
    summary says why it stopped."""
    finished = launcher.run("--max-restarts", 3, "--backoff", "0:0", "--nproc-per-node", 2,
                            command=script("oom_at_step.py", 5))

    assert 1 == finished.returncode, finished.explain()
    report = finished.report()
    assert 2 == len(report["attempts"]), finished.explain()
    assert [(1, 5, "cuda-oom")] * 2 == [(a["root_cause"]["rank"], a["root_cause"]["step"],
                                         a["root_cause"]["diagnosis"]["signature"]) for a in report["attempts"]]
    why = ("identical to attempt 0's failure (cuda-oom, rank 1, at step 5): twice in a row is no fluke, so it was "
           "not retried")
    assert why in report["reason"]
    assert f"  why it stopped: {why}" in finished.stderr.splitlines(), finished.stderr


def test_the_same_error_at_a_later_step_is_restarted(launcher: Launcher) -> None:
    """Step 5, then step 7: the run moved between them, so the budget decides, as before."""
    finished = launcher.run("--max-restarts", 1, "--backoff", "0:0", "--nproc-per-node", 2,
                            command=script("oom_at_step.py", 5, 2))

    assert 1 == finished.returncode, finished.explain()
    report = finished.report()
    assert [5, 7] == [a["root_cause"]["step"] for a in report["attempts"]]
    [exhausted] = finished.events("budget_exhausted")
    assert "failures" == exhausted["budget"]


def test_a_rank_that_said_done_then_crashed_in_teardown_is_finished(launcher: Launcher) -> None:
    """heartbeat(done=True), then a C++ terminate() on the way out: the run succeeds, first time."""
    finished = launcher.run("--max-restarts", 1, "--nproc-per-node", 2,
                            command=script("crash_on_the_way_out.py", "done"))

    assert 0 == finished.returncode, finished.explain()
    report = finished.report()
    assert ("succeeded", 1) == (report["outcome"], len(report["attempts"]))
    why = "it said it was done (elastic.heartbeat(done=True)), then ended by SIGABRT on its way out"
    assert [{"rank": 1, "why": why}] == report["attempts"][0]["finished_in_teardown"]
    assert f"rank 1 finished: {why}" in finished.stderr
    [exited] = [e for e in finished.events("worker_exited") if e["rank"] == 1]
    assert ("SIGABRT", why) == (exited["signal"], exited["finished"])


def test_with_exit_hang_succeed_a_crash_after_a_peer_s_exit_0_is_finished(launcher: Launcher) -> None:
    """--exit-hang succeed: rank 0 exited 0, rank 1 aborted on its way out a second later: success."""
    finished = launcher.run("--max-restarts", 1, "--nproc-per-node", 2, "--exit-hang", "succeed",
                            command=script("crash_on_the_way_out.py", "peer"))

    assert 0 == finished.returncode, finished.explain()
    report = finished.report()
    assert ("succeeded", 1) == (report["outcome"], len(report["attempts"]))
    [ended] = report["attempts"][0]["finished_in_teardown"]
    assert 1 == ended["rank"] and "after a peer's exit 0 (--exit-hang succeed)" in ended["why"]


@pytest.mark.parametrize("mode, line", [
    ("peer", "terminate called without an active exception"),
    ("peer-segv", "Fatal Python error: Segmentation fault"),
])
def test_by_default_a_crash_after_a_peer_s_exit_0_is_the_teardown_signature_and_restarted(
    launcher: Launcher, mode: str, line: str
) -> None:
    """Without a word from the rank that it finished: a failure named teardown, restarted, whether it
    printed C++'s terminate line or only segfaulted (the interpreter's fault handler's line shown)."""
    finished = launcher.run("--max-restarts", 1, "--backoff", "0:0", "--nproc-per-node", 2,
                            command=script("crash_on_the_way_out.py", mode))

    assert 0 == finished.returncode, finished.explain()
    assert 2 == len(finished.report()["attempts"])
    assert {"signature": "teardown", "class": "transient", "line": line} == _diagnosis(finished)


def test_a_rerun_after_the_driver_died_keeps_the_repeat_history(launcher: Launcher) -> None:
    """Attempt 0 exits 3; attempt 1 runs out of memory at step 5, and its driver is SIGKILLed while
    it backs off. The rerun with the same --run-id starts attempt 2, which fails as attempt 1 did:
    stopped, the dead driver's failure counted as the first of the two."""
    options = ("--run-id", "repeats", "--max-restarts", 5, "--nproc-per-node", 2)
    command = script("oom_at_step.py", 5, "--from-attempt", 1)
    first = launcher.start(*options, "--backoff", "60:60", command=command)
    launcher.wait_for_event("backoff_started", timeout_s=30)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)

    finished = launcher.run(*options, "--backoff", "0:0", command=command)

    assert 1 == finished.returncode, finished.explain()
    assert [0, 1, 2] == [e["attempt"] for e in finished.events("attempt_started")]
    [refused] = finished.events("restart_refused")
    assert refused["reason"].startswith("identical to attempt 1's failure (cuda-oom, rank 1, at step 5)")


def test_a_chained_dot_star_rule_against_a_100_kb_line_does_not_hold_the_driver(launcher: Launcher) -> None:
    """``E.*r.*r.*o.*r.*!`` passed the old safety check and held the driver's loop for minutes on a
    long failing line (Python's ``re`` backtracks through every split); searched by RE2 the rank's
    100 KB line of ``Error Error ...`` (no ``!``) is judged at once: no signature, the run ends
    well inside this test's timeout."""
    line = "Error " * 17_000  # 102,000 characters
    fails = f"import sys\nprint({line!r}, flush=True)\nsys.exit(1)\n"
    finished = launcher.run("--signature", "E.*r.*r.*o.*r.*!=deterministic", command=[sys.executable, "-c", fails])

    assert 1 == finished.returncode, finished.explain()
    [failed] = finished.events("worker_failed")
    assert failed.get("diagnosis") is None, failed
