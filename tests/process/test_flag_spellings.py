"""Flags are taken by their whole name only, in either spelling, and a near miss is named."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from harness import Launcher, script


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--max-restart", "3"], "unknown option --max-restart; did you mean --max-restarts?"),
        (["--nproc", "2"], "unknown option --nproc; did you mean --nproc-per-node?"),
        (["--max_restart=3"], "unknown option --max_restart; did you mean --max-restarts?"),
        (["--frobnicate"], "unknown option --frobnicate (elastic run --help lists them)"),
    ],
    ids=["prefix-of-max-restarts", "prefix-of-nproc-per-node", "underscored-prefix", "far-from-any"],
)
def test_a_prefix_or_unknown_flag_is_refused_naming_the_nearest_and_nothing_starts(
    launcher: Launcher, tmp_path: Path, options: list[str], said: str
) -> None:
    """A flag is never taken by a prefix of its name (argparse's default took `--max-restart 3`
    as `--max-restarts 3`): exit 2, one line naming it and the nearest flag; nothing starts."""
    marker = tmp_path / "launched"
    marker.mkdir()

    finished = launcher.run(*options, command=script("dump_env.py", marker))

    assert 2 == finished.returncode, finished.explain()
    assert [f"elastic run: error: {said}"] == finished.stderr.splitlines()
    assert not launcher.run_dir.exists()
    assert [] == list(marker.iterdir())


def test_every_flag_may_be_spelled_with_underscores(launcher: Launcher, tmp_path: Path) -> None:
    """`--max_restarts 2 --nproc_per_node=2 --grace_period 7` mean what the dashed flags mean."""
    marker = tmp_path / "launched"
    marker.mkdir()

    finished = launcher.run(
        "--max_restarts", 2, "--nproc_per_node=2", "--grace_period", 7, command=script("dump_env.py", marker)
    )

    assert 0 == finished.returncode, finished.explain()
    [started] = finished.events("run_started")
    assert (2, 2, 7.0) == (started["max_restarts"], started["nproc_per_node"], started["grace_period_s"])
    assert {"attempt-0-rank-0.json", "attempt-0-rank-1.json"} == {p.name for p in marker.iterdir()}


def test_a_config_key_near_an_option_is_named(launcher: Launcher, tmp_path: Path) -> None:
    """An unknown key of a --config file that is near an option's is answered with that option's
    key, one line naming the file; nothing starts."""
    marker = tmp_path / "launched"
    marker.mkdir()
    config = tmp_path / "elastic.toml"
    config.write_text("[run]\nmax-restart = 3\n")

    finished = launcher.run("--config", config, command=script("dump_env.py", marker))

    assert 2 == finished.returncode, finished.explain()
    said = f"elastic: error: {config}: max-restart: is not an option; did you mean max-restarts?"
    assert [said] == finished.stderr.splitlines()
    assert [] == list(marker.iterdir())


def test_a_scripts_own_config_flag_is_the_scripts(launcher: Launcher, tmp_path: Path) -> None:
    """`elastic run train.py --config c.yml`: `--config` after the script is the script's argument,
    never read by elastic as its TOML file."""
    out = tmp_path / "argv.json"
    recorder = script("record_argv.py")[1]
    script_argv = [recorder, str(out), "--config", "c.yml"]  # no c.yml: elastic must not look

    finished = launcher.run(raw_argv=launcher.argv([], None) + script_argv, command=None)

    assert 0 == finished.returncode, finished.explain()
    assert [sys.executable, *script_argv] == json.loads(out.read_text())
