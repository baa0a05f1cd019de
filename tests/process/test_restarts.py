"""Restarts with real processes: what the next attempt sees, and where the budget ends."""

from __future__ import annotations

import json
from pathlib import Path

from harness import Launcher, script


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
        # --after-ranks 2: a rank that fails at once never drains its peer before it wrote its file
        command=script("dump_env.py", envs, "--exit", 1, "--attempt", 0, "--after-ranks", 2),
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


def test_every_event_the_launcher_logs_carries_the_run_id(launcher: Launcher) -> None:
    """Failures, restarts and the end of the run are logged with the run's id, each one."""
    finished = launcher.run("--max-restarts", 1, "--run-id", "r-logged", "-v", command=script("exit_with.py", 3))

    assert 3 == finished.returncode, finished.explain()
    logged = [json.loads(line) for line in finished.stderr.splitlines() if line.startswith("{")]
    assert {"run_started", "worker_failed", "restart_scheduled", "run_finished"} <= {e["event"] for e in logged}
    assert [] == [e for e in logged if e.get("run_id") != "r-logged"], "an event without the run's id"
