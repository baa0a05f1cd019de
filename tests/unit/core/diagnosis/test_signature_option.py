"""--signature REGEX=CLASS: a flag, a --config key and an ELASTIC_SIGNATURE variable, refused in one line when bad."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic.cli.grammar import apply_settings, build_parsers
from elastic.cli.layering import file_settings
from elastic.core.options.config import ConfigError
from elastic.core.policy.restarts import RestartPolicy
from elastic.core.diagnosis.signatures import BUILTIN_SIGNATURES, parse_signature


def _parse(tmp_path: Path, toml: str, argv: list[str]):  # type: ignore[no-untyped-def]
    path = tmp_path / "c.toml"
    path.write_text(toml)
    parser, run = build_parsers()
    options = ["run", "--config", str(path), *argv]
    apply_settings(run, options[1:])
    return parser.parse_args(options)


def test_the_flag_and_the_file_key_give_rules_in_order(tmp_path: Path) -> None:
    """``signature = [...]`` in the file, ``--signature`` repeated on the command line (which replaces it)."""
    from_file = _parse(tmp_path, "[run]\nsignature = ['MyDataError=deterministic', 'shard \\d+ gone=node']\n", [])
    assert ["MyDataError=deterministic", "shard \\d+ gone=node"] == [s.spec for s in from_file.signature]
    flagged = _parse(tmp_path, "[run]\nsignature = ['MyDataError=deterministic']\n",
                     ["--signature", "BadBatch=transient"])
    assert ["BadBatch=transient"] == [s.spec for s in flagged.signature]


def test_a_bad_rule_in_the_file_names_the_file_and_the_key(tmp_path: Path) -> None:
    """The error names where the rule came from and what is wrong, in one line."""
    path = tmp_path / "c.toml"
    path.write_text("[run]\nsignature = ['(a)\\1=transient']\n")
    with pytest.raises(ConfigError) as refused:
        file_settings(path)
    text = str(refused.value)
    assert f"{path}: signature" in text and "linear-time matching (RE2) lacks" in text and "\n" not in text


def test_the_user_s_rules_come_before_the_built_in_ones() -> None:
    """The policy holds the table the controller reads with: the user's rules first."""
    mine = parse_signature("MyDataError=deterministic")
    assert (mine, *BUILTIN_SIGNATURES) == RestartPolicy.create(max_restarts=0, signatures=[mine]).signatures
