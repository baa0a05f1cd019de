"""Restarts with real processes: what the next attempt sees, and where the budget ends."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness import REPO, Launcher, script


def _env(directory: Path, attempt: int, rank: int) -> dict[str, str]:
    env: dict[str, str] = json.loads(
        (directory / f"attempt-{attempt}-rank-{rank}.json").read_text()
    )
    return env


def test_a_rank_failing_on_attempt_0_only_is_restarted_with_new_attempt_variables(
    launcher: Launcher, tmp_path: Path
) -> None:
    """After one restart the run succeeds; restart count and attempt go up, MASTER_PORT changes."""
    envs = tmp_path / "envs"
    envs.mkdir()
    finished = launcher.run(
        "--max-restarts",
        1,
        "--nproc-per-node",
        2,
        command=script("dump_env.py", envs, "--exit", 1, "--attempt", 0),
    )

    assert 0 == finished.returncode, finished.explain()
    report = finished.report()
    assert ("succeeded", [0, 1]) == (report["outcome"], [a["attempt"] for a in report["attempts"]])
    assert 2 == len(finished.events("attempt_started"))
    first, second = _env(envs, 0, 0), _env(envs, 1, 0)
    assert ("0", "1") == (first["TORCHELASTIC_RESTART_COUNT"], second["TORCHELASTIC_RESTART_COUNT"])
    assert ("0", "1") == (first["ELASTIC_ATTEMPT"], second["ELASTIC_ATTEMPT"])
    assert first["MASTER_PORT"] != second["MASTER_PORT"]
    assert second["MASTER_PORT"] == _env(envs, 1, 1)["MASTER_PORT"]
    assert str(launcher.run_dir / "attempt-1") == str(
        Path(second["TORCHELASTIC_ERROR_FILE"]).parent
    )


def test_an_always_failing_rank_exhausts_the_budget_after_max_restarts_plus_one_attempts(
    launcher: Launcher,
) -> None:
    """With --max-restarts 2 a rank always exiting 4 gets 3 attempts, then the launcher exits 4."""
    finished = launcher.run("--max-restarts", 2, command=script("exit_with.py", 4))

    assert 4 == finished.returncode, finished.explain()
    assert 3 == len(finished.events("attempt_started"))
    assert 2 == len(finished.events("restart_scheduled"))
    [exhausted] = finished.events("budget_exhausted")
    assert ("failures", 2) == (exhausted["budget"], exhausted["attempt"])
    report = finished.report()
    assert ("failed", 4, 3) == (report["outcome"], report["exit_status"], len(report["attempts"]))
    assert [True, True, False] == [a["restarted"] for a in report["attempts"]]


def test_readme_demo_recovers_from_a_sigkilled_rank_and_resumes_from_checkpoints(
    launcher: Launcher, tmp_path: Path
) -> None:
    """The README's demo exits 0 after 2 attempts; rank 1 was SIGKILLed and both ranks resumed."""
    toy = REPO / "examples" / "toy_train.py"
    finished = launcher.run(
        "--max-restarts",
        3,
        "--nproc-per-node",
        2,
        command=[sys.executable, toy, "--fail-at-step", 5, "--step-time", 0.02],
    )

    assert 0 == finished.returncode, finished.explain()
    report = finished.report()
    assert 2 == len(report["attempts"])
    assert list((tmp_path / "toy-checkpoints").iterdir()), (
        "toy checkpoints land in the launcher's cwd"
    )
    cause = report["attempts"][0]["root_cause"]
    assert ("killed", 1, "SIGKILL") == (cause["kind"], cause["rank"], cause["signal"])
    for rank in (0, 1):
        log = finished.rank_log(1, rank)
        assert f"rank={rank} resuming from step" in log, log
        assert f"rank={rank} done: step=20" in log, log
