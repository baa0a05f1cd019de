"""--config files and ELASTIC_* variables: validated like flags, in the documented precedence."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic.arguments import apply_settings, build_parsers
from elastic.config import ConfigError


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
