"""The option table: one row per option makes its flag, its variable, its file key and its check."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from elastic.cli.grammar import build_parsers
from elastic.core.options.config import RunConfig
from elastic.core.options.table import OPTIONS, option, plain
from elastic.core.options.values import ConfigError

VALID: dict[str, Any] = dict(command=("train",), run_id="r1", run_dir=Path("/tmp/r1"), nproc_per_node=2)


@pytest.mark.parametrize("row", [row for row in OPTIONS if row.field], ids=lambda row: row.flag)
def test_run_config_refuses_a_bad_value_of_every_option_naming_the_flag(row) -> None:  # type: ignore[no-untyped-def]
    """RunConfig built in code checks each field as the flag does: one line naming the flag."""
    with pytest.raises(ConfigError, match=rf"^{re.escape(row.flag)}: must be .*, got "):
        RunConfig(**VALID, **{row.field: object()})


_SECONDS_ROWS = [row for row in OPTIONS if row.metavar and ("SECONDS" in row.metavar or row.metavar == "INITIAL:MAX")]


@pytest.mark.parametrize("row", _SECONDS_ROWS, ids=lambda row: row.flag)
def test_every_seconds_option_refuses_more_than_the_maximum(row) -> None:  # type: ignore[no-untyped-def]
    """Each option in seconds refuses 1e300 with its range, from text and from code, and takes 1e9."""
    pair = row.metavar == "INITIAL:MAX"
    for text in ("1e300", "1:1e300") if pair else ("1e300",):
        with pytest.raises(ValueError, match=r"1e9"):
            row.read(text)
    assert row.read("1e9") is not None
    if row.field:
        too_long = (1.0, 1e300) if pair else 1e300
        with pytest.raises(ConfigError, match=rf"^{re.escape(row.flag)}: must be .*1e9"):
            RunConfig(**VALID, **{row.field: too_long})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"command": ()}, "COMMAND: missing"),
        ({"command": ("python", 3)}, "COMMAND: must be a tuple of strings"),
        ({"run_id": "../x"}, "--run-id: must be 1-64 letters"),
        ({"run_dir": "/tmp/r1"}, "--run-dir: must be a path"),
        ({"nproc_per_node": 0}, r"--nproc-per-node: must be a positive integer or 'auto', got 0"),
        ({"backend": "auto"}, "--backend: must be one of local, ray, got 'auto'"),
        ({"min_nodes": 3, "max_nodes": 2}, r"--nnodes: must be N or MIN:MAX with 1 <= MIN <= MAX, got '3:2'"),
        ({"max_restarts": -1}, r"--max-restarts: must be an integer >= 0, got -1"),
        ({"grace_period_s": float("nan")}, r"--grace-period: must be a number of seconds from 0 to 1e9, got nan"),
        ({"scale_up": 1}, r"--scale-up: must be one of never, checkpoint, got 1"),
        ({"master_port": 70000}, r"--master-port: must be a port number 1-65535, got 70000"),
        ({"checkpoint_dir": "ckpt"}, "--checkpoint-dir: must be a path"),
        ({"hang": 30}, "--heartbeat-timeout: must be a HangPolicy or None"),
        ({"max_no_progress": 2}, "--max-no-progress: needs --checkpoint-dir"),
        ({"checkpoint_pattern": re.compile("w-(?P<step>[0-9]+)")}, "--checkpoint-pattern: needs --checkpoint-dir"),
    ],
)
def test_run_config_names_the_flag_of_a_bad_field(fields: dict[str, Any], message: str) -> None:
    """Fields composed by the CLI (command, run id, nodes, hang) are checked too."""
    with pytest.raises(ConfigError, match=f"^{message}"):
        RunConfig(**{**VALID, **fields})


def test_run_config_defaults_are_the_tables() -> None:
    """A RunConfig given only the required fields has the defaults the flags have."""
    config = RunConfig(**VALID)
    for row in OPTIONS:
        if row.field:
            assert row.to_field(row.default) == getattr(config, row.field), row.flag


def test_every_option_is_a_flag_with_its_help_and_default() -> None:
    """`elastic run --help` shows each row, with its default, and keeps the exit-status epilog."""
    _, run = build_parsers()
    text = run.format_help()
    for row in OPTIONS:
        assert row.flag in text
    assert "exit status of 'elastic run'" in text
    assert "(default: 30)" in " ".join(text.split())
    assert option("--backend").choices == ("auto", "local", "ray")


def test_help_text_reads_as_plain_text_on_a_terminal() -> None:
    """Markdown code spans become quoted words or bare flags; links name their docs page."""
    assert "'auto' is --max-restarts, see 'Hangs' in docs/failures/hangs.md" == plain(
        "`auto` is `--max-restarts`, see [Hangs](#hangs)"
    )


def test_each_option_has_its_own_variable_and_file_key() -> None:
    """Variables and keys come from the flag: ELASTIC_MAX_RESTARTS and max-restarts."""
    row = option("--max-restarts")
    assert ("ELASTIC_MAX_RESTARTS", "max-restarts", "max_restarts") == (row.env, row.key, row.dest)
    assert len(OPTIONS) == len({row.env for row in OPTIONS}) == len({row.key for row in OPTIONS})


def test_every_run_config_field_is_an_option_or_composed_from_options() -> None:
    """No field escapes the table: each is set by one row, or composed by the CLI and checked by hand."""
    composed = {"command", "run_id", "run_dir", "nproc_per_node", "backend", "min_nodes", "max_nodes",
                "checkpoint_dir", "cache_dir", "hang", "progress", "torchelastic_run_id"}
    assert {f.name for f in fields(RunConfig)} == composed | {row.field for row in OPTIONS if row.field}


@pytest.mark.parametrize(
    ("text", "modules"),
    [("none", ()), ("torch", ("torch",)), ("torch,jax", ("torch", "jax")), (" torch , orbax.checkpoint", ("torch", "orbax.checkpoint"))],
)
def test_prewarm_reads_module_names(text: str, modules: tuple[str, ...]) -> None:
    assert modules == option("--prewarm").value.parse(text)


@pytest.mark.parametrize("text", ["", "torch,", "torch,,jax", "1torch", "torch.", "torch jax", "-m"])
def test_prewarm_refuses_what_is_not_a_module_name(text: str) -> None:
    with pytest.raises(ValueError, match=r"must be module names separated by commas"):
        option("--prewarm").value.parse(text)
