"""Configuration through the real CLI: precedence, rank variables kept apart, rules, absolute paths."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from harness import Launcher, launcher_env, script


def test_command_line_rule_beats_the_environments_for_a_repeatable_option(launcher: Launcher) -> None:
    """ELASTIC_ON_EXIT=5=fail is replaced by --on-exit 5=restart-free: the exit 5 is restarted, free."""
    finished = launcher.run(
        "--on-exit", "5=restart-free",
        command=script("exit_with.py", 5, "--attempt", 0),
        env=launcher_env(ELASTIC_ON_EXIT="5=fail"),
    )  # fmt: skip

    assert 0 == finished.returncode, finished.explain()
    assert [0, 1] == [e["attempt"] for e in finished.events("attempt_started")]


def test_environment_rule_applies_without_a_command_line_rule(launcher: Launcher) -> None:
    """The same run without --on-exit: ELASTIC_ON_EXIT=5=fail ends it at the first exit 5."""
    finished = launcher.run(
        "--max-restarts", 3,
        command=script("exit_with.py", 5, "--attempt", 0),
        env=launcher_env(ELASTIC_ON_EXIT="5=fail"),
    )  # fmt: skip

    assert 5 == finished.returncode, finished.explain()
    assert [0] == [e["attempt"] for e in finished.events("attempt_started")]


def test_a_rule_that_can_never_match_is_a_usage_error_and_nothing_starts(
    launcher: Launcher, tmp_path: Path
) -> None:
    """--on-exit 137=fail (137 is read as SIGKILL) exits 2 with one line saying SIGKILL=fail."""
    marker = tmp_path / "launched"
    marker.mkdir()
    for options, env, flag in (
        (["--on-exit", "137=fail"], launcher_env(), "--on-exit"),
        ([], launcher_env(ELASTIC_ON_EXIT="137=fail"), "ELASTIC_ON_EXIT"),
    ):
        finished = launcher.run(*options, command=script("dump_env.py", marker), env=env)

        assert 2 == finished.returncode, finished.explain()
        [line] = finished.stderr.splitlines()
        assert flag in line and "use SIGKILL=fail" in line, line
        assert not launcher.run_dir.exists()
        assert [] == list(marker.iterdir())


def test_an_elastic_run_inside_a_rank_gets_its_own_run_id_and_no_checkpoint_dir(
    launcher: Launcher, tmp_path: Path
) -> None:
    """A nested `elastic run` reads none of the outer rank's ELASTIC_RUN_ID / ELASTIC_CHECKPOINT_DIR."""
    envs = tmp_path / "envs"
    envs.mkdir()
    checkpoints = tmp_path / "ckpt"
    checkpoints.mkdir()
    nested = [sys.executable, "-m", "elastic", "run", "--log-format", "json", "--",
              *script("dump_env.py", envs)]  # fmt: skip
    finished = launcher.run("--run-id", "outer", "--checkpoint-dir", checkpoints, command=nested,
                            timeout_s=120)

    assert 0 == finished.returncode, finished.explain()
    inner = json.loads((envs / "attempt-0-rank-0.json").read_text())
    assert "outer" not in (inner["ELASTIC_RUN_ID"], inner["TORCHELASTIC_RUN_ID"])
    assert "ELASTIC_CHECKPOINT_DIR" not in inner
    assert [inner["ELASTIC_RUN_ID"]] == [p.name for p in (tmp_path / "elastic-runs").iterdir()]
    assert not (launcher.run_dir / "attempt-1").exists()  # the outer run ran once


def test_paths_handed_to_ranks_are_absolute_when_given_relative(launcher: Launcher, tmp_path: Path) -> None:
    """Relative --run-dir and --checkpoint-dir: the rank sees absolute paths under the launcher's cwd."""
    envs = tmp_path / "envs"
    envs.mkdir()
    (tmp_path / "ckpt").mkdir()
    argv = [sys.executable, "-m", "elastic", "run", "--log-format", "json",
            "--run-dir", "rel-run", "--checkpoint-dir", "ckpt", "--", *script("dump_env.py", envs)]  # fmt: skip
    finished = launcher.run(raw_argv=argv, command=None)

    assert 0 == finished.returncode, finished.explain()
    env = json.loads((envs / "attempt-0-rank-0.json").read_text())
    names = ("ELASTIC_CHECKPOINT_DIR", "TORCHELASTIC_ERROR_FILE", "ELASTIC_HEARTBEAT_FILE")
    paths = {name: env[name] for name in names}
    assert {name: True for name in names} == {name: os.path.isabs(p) for name, p in paths.items()}
    assert str(tmp_path / "ckpt") == paths["ELASTIC_CHECKPOINT_DIR"]
    assert paths["TORCHELASTIC_ERROR_FILE"].startswith(str(tmp_path / "rel-run") + os.sep)
    assert (tmp_path / "rel-run" / "attempt-0" / "rank-0.log").is_file()


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"\xff\xfe = 1\n", "not UTF-8 text"),
        (b"run = 3\n", "run: must be a table of options ([run]), got 3"),
        (b'run = "fast"\n', "run: must be a table of options ([run]), got 'fast'"),
        (b'master-addr = ["a", "b"]\n', "master-addr: must be one value, not a list"),
        (b"[run]\nmetrics-host = { a = 1 }\n", "metrics-host: must be one value, not a table"),
        (b'[run]\non-exit = [["2=fail"]]\n', "on-exit: must be a list of values, not of lists"),
        (b"max-restarts = 9\n[run]\nbackoff = 1\n", "max-restarts: is outside [run], beside it"),
    ],
    ids=["not-utf8", "run-a-number", "run-a-string", "list-for-one-value", "table-for-a-value",
         "nested-list", "a-key-beside-run"],
)
def test_a_config_file_of_the_wrong_shape_is_a_one_line_usage_error_naming_it(
    launcher: Launcher, tmp_path: Path, content: bytes, says: str
) -> None:
    """A --config file that is not UTF-8, or holds a non-table `run` or a table or list where
    one value belongs, exits 2 with one line naming the file (and the key); nothing starts."""
    marker = tmp_path / "launched"
    marker.mkdir()
    config = tmp_path / "bad.toml"
    config.write_bytes(content)

    finished = launcher.run("--config", config, command=script("dump_env.py", marker))

    assert 2 == finished.returncode, finished.explain()
    [line] = finished.stderr.splitlines()
    assert line.startswith("elastic: error: ") and str(config) in line and says in line, line
    assert not launcher.run_dir.exists()
    assert [] == list(marker.iterdir())
