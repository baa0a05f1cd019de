"""Ranks that finish and then hang at exit, for real: --exit-timeout, the stacks, the kill, the outcome."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from harness import Finished, Launcher, launcher_env, per_rank, script

from elastic.node.probes.stacks import PY_SPY_MISSING, find_py_spy

EXIT_TIMEOUT_S = 2
STEPS = 5


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    checkpoints, out = tmp_path / "ckpt", tmp_path / "out"
    checkpoints.mkdir()
    out.mkdir()
    return checkpoints, out


def hangs_at_exit(dirs: tuple[Path, Path], mode: str, hang_attempt: int = 0) -> list[str]:
    checkpoints, out = dirs
    return script("hangs_at_exit.py", checkpoints, out, STEPS, hang_attempt, mode)


def run(launcher: Launcher, dirs: tuple[Path, Path], *options: object, mode: str) -> Finished:
    return launcher.run(
        "--nproc-per-node", 2,
        "--checkpoint-dir", dirs[0],
        "--exit-timeout", EXIT_TIMEOUT_S,
        *options,
        command=hangs_at_exit(dirs, mode),
    )


def exit_hung(finished: Finished) -> dict[str, Any]:
    failed = [e for e in finished.events("worker_failed") if e["kind"] != "collateral"]
    assert ["exit-hung"] == [e["kind"] for e in failed], finished.explain()
    return failed[0]


def assert_stacks_dumped(finished: Finished, event: dict[str, Any], frame: str = "stuck_at_exit") -> None:
    dump = (finished.run_dir / "attempt-0" / "stacks" / "rank-1.txt").read_text()
    assert dump.startswith("# rank 1, pid ")
    if find_py_spy() is None:
        assert PY_SPY_MISSING in dump and PY_SPY_MISSING in event["message"]
    else:
        assert frame in dump, dump
        assert "stacks in" in event["message"]


def test_an_exit_hang_before_the_work_is_done_restarts_and_the_finished_job_ends_at_once(
    launcher: Launcher, dirs: tuple[Path, Path]
) -> None:
    """Default --exit-hang restart: rank 1, stuck in its main module after printing past rank 0's
    last checkpoint (no evidence it finished), is dumped and killed 2 s after rank 0's exit 0, the
    failure is charged, attempt 1 resumes at the last step and ends at once, and the summary warns
    that the checkpoint it restarted from holds the last step reached."""
    finished = run(launcher, dirs, "--max-restarts", 1, mode="working")

    assert 0 == finished.returncode, finished.explain()
    hung = exit_hung(finished)
    assert (1, 0, "SIGKILL") == (hung["rank"], hung["attempt"], hung["signal"])
    # It printed half a second after rank 0's exit 0: spared at the first check, killed at the next.
    assert re.match(rf"still running [\d.]+ s after rank 0 exited 0 and silent for {EXIT_TIMEOUT_S} s", hung["message"])
    assert_stacks_dumped(finished, hung, "evaluate")
    [scheduled] = finished.events("restart_scheduled")
    assert "failures" == scheduled["budget"]
    report = finished.report()
    assert ("succeeded", 2, True) == (report["outcome"], len(report["attempts"]), report["attempts"][0]["restarted"])
    assert "exit-hung" == report["attempts"][0]["root_cause"]["kind"]
    out = dirs[1]
    assert [str(STEPS)] * 2 == [(out / f"attempt-1-rank-{r}").read_text().strip() for r in (0, 1)]
    assert re.search(r"rank 1 still running [\d.]+ s after rank 0 exited 0", finished.stderr)
    [killed] = finished.events("exit_hung_killed")
    judged = killed["judged"]["1"]
    assert (False, None) == (judged["finished"], judged["evidence"]), killed
    if find_py_spy() is not None:
        assert "evaluate (" in judged["frame"], judged
    warning = report["attempts"][0]["rerun_warning"]
    assert f"restarted from checkpoint step {STEPS - 1}, which holds the last step attempt 0 reached" in warning
    assert f"warning: {warning}" in finished.stderr
    assert "rank 1 hung at exit, no evidence it had finished" in finished.stderr


def test_an_exit_hang_without_done_or_budget_fails_with_137(
    launcher: Launcher, dirs: tuple[Path, Path]
) -> None:
    """No evidence the rank finished and no restarts left: the run fails, never 'succeeds'."""
    finished = run(launcher, dirs, mode="working")

    assert 137 == finished.returncode, finished.explain()
    exit_hung(finished)
    report = finished.report()
    assert ("failed", "exit-hung", 1) == (
        report["outcome"], report["root_cause"]["kind"], report["root_cause"]["rank"]
    )


def test_a_rank_that_said_it_finished_and_hung_at_exit_is_a_success(
    launcher: Launcher, dirs: tuple[Path, Path]
) -> None:
    """done=True is the evidence: one attempt, exit status 0, and the summary says what happened."""
    finished = run(launcher, dirs, mode="done")

    assert 0 == finished.returncode, finished.explain()
    hung = exit_hung(finished)
    assert_stacks_dumped(finished, hung)
    [killed] = finished.events("exit_hung_killed")
    assert ([1], [1]) == (killed["ranks"], killed["declared_finished"])
    report = finished.report()
    assert ("succeeded", 1, 0) == (report["outcome"], len(report["attempts"]), report["restarts"])
    assert "finished; rank 1 hung at exit and was killed, judged finished: it said so (elastic.heartbeat(done=True))" == report["reason"]
    assert "finished; rank 1 hung at exit and was killed, judged finished: it said so (elastic.heartbeat(done=True))" in finished.stderr
    status = subprocess.run(
        [sys.executable, "-m", "elastic", "status", str(finished.run_dir)],
        capture_output=True, text=True, timeout=60, env=launcher_env(),
    )
    assert re.search(r"rank 1 still running [\d.]+ s after rank 0 exited 0", status.stdout), status.stdout


@pytest.mark.skipif(find_py_spy() is None, reason="the evidence is the stack py-spy dumps")
def test_a_rank_hung_in_interpreter_finalization_after_its_work_is_a_success(
    launcher: Launcher, dirs: tuple[Path, Path]
) -> None:
    """Rank 1 finished its loop and waits at exit for a non-daemon thread, silently, without saying
    it was done: its stack dump shows its main thread in interpreter finalization, so the run
    succeeds in its one attempt, no restart, and the summary says which rank, where and why."""
    finished = run(launcher, dirs, "--max-restarts", 1, mode="silent")

    assert 0 == finished.returncode, finished.explain()
    hung = exit_hung(finished)
    assert_stacks_dumped(finished, hung)
    [killed] = finished.events("exit_hung_killed")
    assert ([1], []) == (killed["ranks"], killed["declared_finished"])
    judged = killed["judged"]["1"]
    assert (True, "at_exit") == (judged["finished"], judged["evidence"]), killed
    report = finished.report()
    assert ("succeeded", 1, 0) == (report["outcome"], len(report["attempts"]), report["restarts"])
    why = "its main thread was at interpreter exit (waiting for non-daemon threads to end: stuck-at-exit)"
    assert f"finished; rank 1 hung at exit and was killed, judged finished: {why}" == report["reason"]
    assert report["reason"] in finished.stderr
    assert "rank 1's main thread is at interpreter exit" in finished.stderr  # where: the attempt's line
    assert [{"rank": 1, **judged}] == report["attempts"][0]["exit_hung"]


def _quiet_rank(printed_after_checkpoint: bool) -> list[str]:
    """Rank 0 writes a checkpoint and exits 0; rank 1, a shell whose stack py-spy cannot read,
    never exits, and prints after that checkpoint or not."""
    save = 'sleep 0.5; mkdir "$ELASTIC_CHECKPOINT_DIR/step_3"; touch "$ELASTIC_CHECKPOINT_DIR/step_3/COMMITTED"'
    working = "sleep 1.5; echo evaluating; " if printed_after_checkpoint else ""
    return per_rank(["sh", "-c", save], ["sh", "-c", f"{working}exec sleep 300"])


def test_a_rank_silent_since_the_checkpoint_its_peers_exited_0_after_is_finished(
    launcher: Launcher, dirs: tuple[Path, Path]
) -> None:
    """The weakest evidence, for a rank whose stack cannot be read: its peer exited 0 after the
    last checkpoint write and it printed nothing since. The run succeeds, saying so."""
    finished = launcher.run(
        "--nproc-per-node", 2, "--checkpoint-dir", dirs[0], "--exit-timeout", EXIT_TIMEOUT_S,
        command=_quiet_rank(printed_after_checkpoint=False),
    )

    assert 0 == finished.returncode, finished.explain()
    [killed] = finished.events("exit_hung_killed")
    assert (True, "quiet") == (killed["judged"]["1"]["finished"], killed["judged"]["1"]["evidence"]), killed
    assert "judged finished: its peers exited 0 after the last checkpoint write" in finished.report()["reason"]


def test_a_rank_that_printed_after_the_last_checkpoint_has_no_evidence_and_fails(
    launcher: Launcher, dirs: tuple[Path, Path]
) -> None:
    """The same, but the rank printed after the checkpoint: no evidence it finished, so no restarts
    left means the run fails with the kill's status, as before."""
    finished = launcher.run(
        "--nproc-per-node", 2, "--checkpoint-dir", dirs[0], "--exit-timeout", EXIT_TIMEOUT_S,
        command=_quiet_rank(printed_after_checkpoint=True),
    )

    assert 137 == finished.returncode, finished.explain()
    [killed] = finished.events("exit_hung_killed")
    assert (False, None) == (killed["judged"]["1"]["finished"], killed["judged"]["1"]["evidence"]), killed


def test_exit_hang_succeed_takes_a_peers_exit_as_the_evidence(
    launcher: Launcher, dirs: tuple[Path, Path]
) -> None:
    """--exit-hang succeed: no code change needed; the rank is still dumped and killed."""
    finished = run(launcher, dirs, "--exit-hang", "succeed", mode="working")

    assert 0 == finished.returncode, finished.explain()
    exit_hung(finished)
    assert 1 == len(finished.report()["attempts"])
    assert "--exit-hang succeed" in finished.report()["reason"]


def test_a_program_in_another_language_says_it_finished_through_the_heartbeat_file(
    launcher: Launcher,
) -> None:
    """A shell rank writes {"done": true} to $ELASTIC_HEARTBEAT_FILE, then hangs: a success."""
    finished = launcher.run(
        "--nproc-per-node", 2, "--exit-timeout", 1,
        command=per_rank(
            ["exit_with.py", 0],
            ["sh", "-c", "echo '{\"done\": true}' > \"$ELASTIC_HEARTBEAT_FILE\"; exec sleep 300"],
        ),
    )

    assert 0 == finished.returncode, finished.explain()
    assert "exit-hung" == exit_hung(finished)["kind"]
    assert "finished; rank 1 hung at exit and was killed, judged finished: it said so (elastic.heartbeat(done=True))" == finished.report()["reason"]


def test_status_lists_ranks_by_state_while_the_driver_waits(
    launcher: Launcher, dirs: tuple[Path, Path]
) -> None:
    """During the wait, `elastic status` shows who exited 0 and who is still running."""
    process = launcher.start(
        "--nproc-per-node", 2, "--exit-timeout", 120, command=hangs_at_exit(dirs, "silent")
    )
    launcher.wait_for_event("exit_timer_started")
    status = subprocess.run(
        [sys.executable, "-m", "elastic", "status", str(launcher.run_dir)],
        capture_output=True, text=True, timeout=60, env=launcher_env(),
    )
    process.send_signal(signal.SIGTERM)
    assert 143 == launcher.finished(process).returncode
    assert 0 == status.returncode, status.stderr
    assert "ranks of attempt 0: exited 0: 0; still running: 1" in status.stdout, status.stdout
    assert "are exit-hung (--exit-timeout)" in status.stdout


def test_exit_timeout_none_keeps_a_hung_rank_running(launcher: Launcher, dirs: tuple[Path, Path]) -> None:
    """ELASTIC_EXIT_TIMEOUT=none: no timer, nothing called exit-hung, as before this option."""
    process = launcher.start(
        "--nproc-per-node", 2, command=hangs_at_exit(dirs, "silent"),
        env=launcher_env(ELASTIC_EXIT_TIMEOUT="none"),
    )
    launcher.wait_for_event("worker_exited")
    time.sleep(EXIT_TIMEOUT_S + 1)  # longer than the other tests' timeout: nothing happens
    assert process.poll() is None
    process.send_signal(signal.SIGTERM)
    finished = launcher.finished(process)
    assert 143 == finished.returncode
    assert [] == finished.events("exit_timer_started")
    assert [] == [e for e in finished.events("worker_failed") if e["kind"] == "exit-hung"]


# -- a rank still working after a peer's exit 0 ------------------------------------------------


def works_after_peer(count: int, *options: object) -> list[str]:
    return script("works_after_peer.py", count, WORK_INTERVAL_S, *options)


WORK_INTERVAL_S = 0.6
WORKING_TIMEOUT_S = 3


@pytest.mark.parametrize("sign", ["output", "heartbeat", "checkpoint"])
def test_a_rank_still_working_after_a_peers_exit_0_is_left_to_finish(
    launcher: Launcher, dirs: tuple[Path, Path], sign: str
) -> None:
    """Rank 1 exits 0; rank 0 uploads for 6 s past it (twice --exit-timeout 3), a sign of life
    every 0.6 s: its output, its heartbeat, or a write in the checkpoint directory. Nothing is
    killed, each check says why, and the run succeeds (it was killed with 137 before)."""
    finished = launcher.run(
        "--nproc-per-node", 2, "--exit-timeout", WORKING_TIMEOUT_S, "--checkpoint-dir", dirs[0],
        command=works_after_peer(10, "--sign", sign),
    )

    assert 0 == finished.returncode, finished.explain()
    assert [] == finished.events("worker_failed")
    assert [] == finished.events("exit_hang_detected")
    spared = finished.events("exit_hang_spared")
    assert spared, finished.explain()
    wanted = "checkpoint write" if sign == "checkpoint" else sign
    for record in spared:
        assert [0] == record["ranks"]
        assert record["reason"].startswith(f"rank 0 still working "), record
        assert f"after rank 1 exited 0: {wanted} " in record["reason"], record
        assert wanted == record["signs"]["0"]["sign"]
        assert record["signs"]["0"]["silent_s"] < WORKING_TIMEOUT_S
    report = finished.report()
    assert ("succeeded", "every worker exited 0") == (report["outcome"], report["reason"])
    assert report["attempts"][0]["exit_hang_spared"] == spared[-1]["reason"]
    assert f"left running (--exit-timeout): {spared[-1]['reason']}" in finished.stderr
    if sign == "output":
        assert "upload complete" in finished.rank_log(0, 0)


def test_a_spared_rank_that_then_goes_silent_is_killed_a_timeout_after_its_last_sign(
    launcher: Launcher, dirs: tuple[Path, Path]
) -> None:
    """Rank 0 prints for 3 s past rank 1's exit 0, then hangs silently: spared at the first
    check, killed at a later one (its last line + 3 s), naming the whole wait since the exit 0."""
    finished = launcher.run(
        "--nproc-per-node", 2, "--exit-timeout", WORKING_TIMEOUT_S,
        command=works_after_peer(5, "--then-hang"),
    )

    assert 137 == finished.returncode, finished.explain()
    assert finished.events("exit_hang_spared"), finished.explain()
    hung = exit_hung(finished)
    assert 0 == hung["rank"]
    match = re.match(r"still running (\d+(?:\.\d)?) s after rank 1 exited 0 and silent for 3 s", hung["message"])
    assert match is not None, hung["message"]
    assert float(match.group(1)) > WORKING_TIMEOUT_S  # not at the first check: it was working then


def test_a_launcher_stopped_while_a_rank_runs_past_a_peers_exit_0_says_so(
    launcher: Launcher, dirs: tuple[Path, Path]
) -> None:
    """SIGTERM to the launcher while rank 0 still runs after rank 1's exit 0: the summary and
    report.json name rank 0 and how long after the exit 0 it was still running, not 'no failure'."""
    process = launcher.start(
        "--nproc-per-node", 2, "--exit-timeout", 120, command=works_after_peer(200)
    )
    launcher.wait_for_event("exit_timer_started")
    time.sleep(1.0)  # some time after the exit 0: the summary says how long
    process.send_signal(signal.SIGTERM)
    finished = launcher.finished(process)

    assert 143 == finished.returncode, finished.explain()
    line = next(line for line in finished.stderr.splitlines() if line.startswith("  attempt 0:"))
    assert "no failure" not in line, line
    assert re.search(r"rank 0 still running \d+\.\d s after rank 1 exited 0 \(launcher received SIGTERM\)$", line), line
    [attempt] = finished.report()["attempts"]
    waited = attempt["still_running_after_exit_0"]
    assert ([0], 1) == (waited["ranks"], waited["after_rank"]), waited
    assert waited["seconds"] >= 1.0
    assert 0.0 == finished.report()["ledger"]["detection"]  # nothing was found hung


def test_a_wait_for_a_rank_silent_after_a_peers_exit_0_is_said_once_and_is_not_productive(
    launcher: Launcher, tmp_path: Path
) -> None:
    """Rank 0 trains 5 steps and exits 0; rank 1 sleeps silently: at the default verbosity the
    console says once, while it waits, that it is waiting for rank 1 (--exit-timeout 3), and
    report.json's ledger counts the wait as a wait (found hung: detection), not training."""
    pids = tmp_path / "pids"
    pids.mkdir()
    command = per_rank(["prints_steps.py", "plain", "steps", STEPS], ["sleep_forever.py", pids])
    argv = [sys.executable, "-m", "elastic", "run", "--run-dir", str(launcher.run_dir), "--nproc-per-node", "2",
            "--exit-timeout", "3", "--", *command]  # the console as a user sees it: words, default verbosity
    finished = launcher.run(raw_argv=argv, command=None)

    assert 137 == finished.returncode, finished.explain()
    lines = finished.stderr.splitlines()
    said = [i for i, line in enumerate(lines) if "waiting up to 3 s (--exit-timeout) for rank 1 to exit" in line]
    assert 1 == len(said), finished.stderr
    assert lines[said[0]].startswith("elastic: attempt 0: rank 0 exited 0 2 s ago"), lines[said[0]]
    hung = next(i for i, line in enumerate(lines) if "hung at exit" in line)
    assert said[0] < hung, finished.stderr  # said while waiting, before the verdict
    ledger = finished.report()["ledger"]
    assert ledger["productive"] < 1.0, ledger  # 5 steps of 0.05 s
    assert ledger["detection"] + ledger["exit_wait"] >= 2.5, ledger


def test_a_rank_that_fails_after_a_peer_exited_0_early_names_that_exit(launcher: Launcher) -> None:
    """Rank 0 trains 5 steps and exits 0; rank 1 then fails (as a collective with no one left to
    talk to does): the root cause names rank 0's early exit beside rank 1's failure."""
    command = per_rank(["prints_steps.py", "plain", "steps", STEPS], ["exit_with.py", 1, "--sleep", 3])
    finished = launcher.run("--nproc-per-node", 2, "--max-restarts", 0, command=command)

    assert 1 == finished.returncode, finished.explain()
    [attempt] = finished.report()["attempts"]
    assert (1, 0) == (attempt["root_cause"]["rank"], attempt["after_exit_0"]["rank"]), attempt
    assert 1.0 <= attempt["after_exit_0"]["seconds"] < 10, attempt
    root = next(line for line in finished.stderr.splitlines() if line.startswith("  root cause: "))
    assert re.search(r"rank 1 on \S+ exited \(exit code 1\), after rank 0 had exited 0 \(\d+\.\d s before\)$", root), root
    head = next(line for line in finished.stderr.splitlines() if line.startswith("  attempt 0: "))
    assert "after rank 0 had exited 0" in head, head
