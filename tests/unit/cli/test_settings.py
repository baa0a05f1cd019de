"""--config files and ELASTIC_* variables: validated like flags, in the documented precedence."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic.cli.grammar import apply_settings, build_parsers
from elastic.core.options.config import ConfigError
from elastic.core.launch.spec import RANK_VARIABLES
from elastic.cli.layering import SETTINGS


def parse(tmp_path: Path, toml: str, env: dict[str, str], argv: list[str], monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    path = tmp_path / "c.toml"
    path.write_text(toml)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    parser, run = build_parsers()
    options = ["run", "--config", str(path), *argv]
    apply_settings(run, options[1:])
    return parser.parse_args(options)


def test_command_line_beats_environment_beats_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each source overrides the ones below it, option by option."""
    args = parse(tmp_path, "max-restarts = 1\ngrace_period = 7\nnnodes = '1:2'\n",
                 {"ELASTIC_MAX_RESTARTS": "4", "ELASTIC_GRACE_PERIOD": "9"}, ["--grace-period", "3"], monkeypatch)
    assert (4, 3.0, (1, 2)) == (args.max_restarts, args.grace_period, args.nnodes)


def test_file_gives_lists_flags_and_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Repeatable options take lists, switches take booleans, and command a list of strings."""
    args = parse(tmp_path, "[run]\non-exit = ['2=fail', 'SIGKILL=restart']\nisolate-gpus = true\n"
                 "command = ['python', 'train.py']\n", {}, [], monkeypatch)
    assert (["2=fail", "SIGKILL=restart"], True) == ([r.spec for r in args.on_exit], args.isolate_gpus)
    assert ["python", "train.py"] == args.config_command


@pytest.mark.parametrize(
    ("toml", "env", "message"),
    [
        ("max-restarts = -1\n", {}, r"c.toml: max-restarts: must be an integer >= 0, got '-1' \(same as --max-restarts\)"),
        ("retries = 3\n", {}, r"c.toml: retries: is not an option; allowed: command, address"),
        ("backend = 'k8s'\n", {}, r"c.toml: backend: must be one of auto, local, ray"),
        ("max-restarts = \n", {}, r"not valid TOML"),
        ("", {"ELASTIC_NNODES": "3:1"}, r"ELASTIC_NNODES: must be N or MIN:MAX"),
    ],
)
def test_bad_settings_name_file_key_and_what_is_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, toml: str, env: dict[str, str], message: str
) -> None:
    """A bad value names where it came from and what the option allows."""
    with pytest.raises(ConfigError, match=message):
        parse(tmp_path, toml, env, [], monkeypatch)


def test_command_line_items_of_a_repeatable_option_replace_the_environments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--on-exit on the command line replaces ELASTIC_ON_EXIT's rules, which replace the file's."""
    toml = "on-exit = ['3=fail']\n"
    env = {"ELASTIC_ON_EXIT": "5=fail,7=fail"}
    assert ["5=restart"] == [r.spec for r in parse(tmp_path, toml, env, ["--on-exit", "5=restart"], monkeypatch).on_exit]
    assert ["5=fail", "7=fail"] == [r.spec for r in parse(tmp_path, toml, env, [], monkeypatch).on_exit]
    monkeypatch.delenv("ELASTIC_ON_EXIT")
    assert ["3=fail"] == [r.spec for r in parse(tmp_path, toml, {}, [], monkeypatch).on_exit]


def test_no_option_is_read_from_a_variable_elastic_sets_in_ranks() -> None:
    """ELASTIC_RUN_ID and ELASTIC_CHECKPOINT_DIR are rank variables; their options read ELASTIC_OPTION_*."""
    names = {dest: row.env for dest, row in SETTINGS.items()}
    assert set() == set(names.values()) & RANK_VARIABLES
    assert ("ELASTIC_OPTION_RUN_ID", "ELASTIC_OPTION_CHECKPOINT_DIR", "ELASTIC_MAX_RESTARTS") == (
        names["run_id"], names["checkpoint_dir"], names["max_restarts"])


def test_rank_variables_in_the_environment_are_not_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside a rank, the outer run's ELASTIC_RUN_ID is ignored; ELASTIC_OPTION_RUN_ID is read."""
    rank_env = {"ELASTIC_RUN_ID": "outer", "ELASTIC_CHECKPOINT_DIR": "/outer/ckpt"}
    args = parse(tmp_path, "", rank_env, [], monkeypatch)
    assert (None, None) == (args.run_id, args.checkpoint_dir)
    args = parse(tmp_path, "", {"ELASTIC_OPTION_RUN_ID": "inner"}, [], monkeypatch)
    assert "inner" == args.run_id
