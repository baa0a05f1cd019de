"""Restart policy end to end: --on-exit rules, crash loops, backoff, checkpoint resume."""

from __future__ import annotations

import json
from pathlib import Path

from harness import Launcher, script


def test_on_exit_fail_ends_the_run_at_once_despite_budget(launcher: Launcher) -> None:
    """--on-exit 2=fail: exit code 2 is not retried even with --max-restarts 3."""
    finished = launcher.run("--max-restarts", 3, "--on-exit", "2=fail", command=script("exit_with.py", 2))

    assert 2 == finished.returncode, finished.explain()
    assert 1 == len(finished.report()["attempts"])
    assert "--on-exit 2=fail" in finished.report()["reason"]


def test_on_exit_restart_free_does_not_charge_max_restarts(launcher: Launcher) -> None:
    """--on-exit 75=restart-free: a rank exiting 75 is restarted with --max-restarts 0."""
    finished = launcher.run("--on-exit", "75=restart-free", command=script("exit_with.py", 75, "--attempt", 0))

    assert 0 == finished.returncode, finished.explain()
    assert 2 == len(finished.report()["attempts"])


def test_a_bad_on_exit_rule_is_a_usage_error(launcher: Launcher) -> None:
    """A rule with an unknown action fails before launch, naming the flag and the bad part."""
    finished = launcher.run("--on-exit", "2=retry", command=script("exit_with.py", 0))

    assert 2 == finished.returncode
    assert "--on-exit" in finished.stderr and "'retry'" in finished.stderr
    assert not finished.run_dir.exists()


def test_a_crash_loop_stops_with_its_own_status(launcher: Launcher, tmp_path: Path) -> None:
    """Two attempts in a row without a newer checkpoint end the run with 76, not budget exhaustion."""
    checkpoints = tmp_path / "ckpt"
    checkpoints.mkdir()
    (checkpoints / "step_5.pt").write_text("weights")
    finished = launcher.run("--max-restarts", 10, "--backoff", "0:0", "--checkpoint-dir", checkpoints,
                            "--max-no-progress", 2, command=script("exit_with.py", 1))

    assert 76 == finished.returncode, finished.explain()
    assert 2 == len(finished.report()["attempts"])
    assert ["crash_loop_detected"] == [e["event"] for e in finished.events("crash_loop_detected")]


def test_backoff_waits_between_restarts_without_progress(launcher: Launcher) -> None:
    """The second restart in a row without progress waits; the journal records the wait."""
    finished = launcher.run("--max-restarts", 2, "--backoff", "0.2:0.2", command=script("exit_with.py", 1))

    assert 1 == finished.returncode, finished.explain()
    assert [0.2] == [e["delay_s"] for e in finished.events("backoff_started")]


def test_resume_picks_the_latest_complete_checkpoint(launcher: Launcher, tmp_path: Path) -> None:
    """A newer directory without a commit marker and a temporary file are skipped."""
    checkpoints, envs = tmp_path / "ckpt", tmp_path / "envs"
    envs.mkdir()
    for name, marker in (("step_10", "COMMITTED"), ("step_20", None)):
        (checkpoints / name).mkdir(parents=True)
        if marker:
            (checkpoints / name / marker).write_text("")
    (checkpoints / "step_30.tmp").write_text("half")
    finished = launcher.run("--checkpoint-dir", checkpoints,
                            command=[*script("dump_env.py", envs), "--resume={resume_from}"])

    assert 0 == finished.returncode, finished.explain()
    env = json.loads((envs / "attempt-0-rank-0.json").read_text())
    expected = str(checkpoints / "step_10")
    assert (expected, "10", str(checkpoints)) == (
        env["ELASTIC_RESUME_FROM"], env["ELASTIC_RESUME_STEP"], env["ELASTIC_CHECKPOINT_DIR"])
    assert f"--resume={expected}" == env["ARGV_EXTRA"]
    assert 10 == finished.events("attempt_started")[0]["resume_step"]


def test_an_optional_resume_flag_is_passed_only_with_a_checkpoint(launcher: Launcher, tmp_path: Path) -> None:
    """``{resume_from?FLAG}``: no argument on a fresh start, ``FLAG=PATH`` once there is a checkpoint."""
    checkpoints, fresh, resumed = tmp_path / "ckpt", tmp_path / "fresh", tmp_path / "resumed"
    for directory in (checkpoints, fresh, resumed):
        directory.mkdir()
    first = launcher.run("--checkpoint-dir", checkpoints, command=[
        *script("dump_env.py", fresh), "{resume_from?--resume_from_checkpoint}", "--lr=1"])
    (checkpoints / "step_10").mkdir()
    (checkpoints / "step_10" / "COMMITTED").write_text("")
    second = launcher.run("--run-dir", tmp_path / "second", "--checkpoint-dir", checkpoints, command=[
        *script("dump_env.py", resumed), "{resume_from?--resume_from_checkpoint}", "--lr=1"])

    assert 0 == first.returncode, first.explain()
    assert 0 == second.returncode, second.explain()
    assert "--lr=1" == json.loads((fresh / "attempt-0-rank-0.json").read_text())["ARGV_EXTRA"]
    assert f"--resume_from_checkpoint={checkpoints / 'step_10'} --lr=1" == json.loads(
        (resumed / "attempt-0-rank-0.json").read_text())["ARGV_EXTRA"]


def test_an_optional_resume_flag_inside_an_argument_is_a_usage_error(launcher: Launcher) -> None:
    """``--x={resume_from?--y}`` fails before launch, naming COMMAND and the form allowed."""
    finished = launcher.run(command=[*script("exit_with.py", 0), "--x={resume_from?--y}"])

    assert 2 == finished.returncode
    assert "COMMAND" in finished.stderr and "whole argument" in finished.stderr
    assert not finished.run_dir.exists()
