"""Runs are found where they are kept: the runs folder, by id, by path, or the latest."""

from __future__ import annotations

import sys
from pathlib import Path

from harness import Launcher, launcher_env, script


def _run_argv(*options: object) -> list[str]:
    """`python -m elastic run OPTIONS -- exit_with.py 0`, with no --run-dir."""
    return [sys.executable, "-m", "elastic", "run", "--log-format", "json", *map(str, options),
            "--", *script("exit_with.py", 0)]


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
