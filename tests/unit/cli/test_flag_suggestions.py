"""The run parser takes whole flag names in either spelling, and names the nearest for a miss."""

from __future__ import annotations

import argparse

import pytest

from elastic.cli.grammar import build_parsers, parse, underscored
from elastic.cli.suggest import nearest
from elastic.core.options.table import OPTIONS


@pytest.mark.parametrize(
    ("word", "known", "near"),
    [
        ("--max-restart", ["--max-restarts", "--max_restarts", "--max-preemptions"], "--max-restarts"),
        ("--max_restart", ["--max-restarts", "--max_restarts"], "--max-restarts"),
        ("--nproc", ["--nproc-per-node", "--nnodes"], "--nproc-per-node"),
        ("--frobnicate", ["--max-restarts", "--nnodes"], None),
        ("checkpoint_dirr", ["checkpoint-dir", "cache-dir"], "checkpoint-dir"),
    ],
)
def test_nearest_is_the_dashed_spelling_of_a_near_name(word: str, known: list[str], near: str | None) -> None:
    """`_` and `-` count as one letter, and the dashed spelling is the one suggested."""
    assert near == nearest(word, known)


def test_every_option_has_a_hidden_underscored_spelling() -> None:
    """Each flag with a `-` in its name also parses as torchrun spells it, and --help shows one."""
    parser, run = build_parsers()
    hidden = {flag for action in run._actions if action.help == argparse.SUPPRESS for flag in action.option_strings}
    expected = {underscored(row.flag) for row in OPTIONS if "-" in row.flag[2:]}
    assert expected <= hidden
    assert "--max_restarts" not in run.format_help()


def test_a_prefix_is_no_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse's prefix matching is off: `--max-restart` is refused, with the flag it is near."""
    parser, _ = build_parsers()
    with pytest.raises(SystemExit) as stopped:
        parse(parser, ["run", "--max-restart", "3", "x.py"])
    assert 2 == stopped.value.code
    assert "unknown option --max-restart; did you mean --max-restarts?" in capsys.readouterr().err


def test_both_spellings_fill_one_value() -> None:
    """The two spellings are one option: the last given wins, and a repeatable one collects both."""
    parser, _ = build_parsers()
    assert 4 == parse(parser, ["run", "--max_restarts", "3", "--max-restarts", "4"]).max_restarts
    rules = parse(parser, ["run", "--on_exit", "2=fail", "--on-exit", "3=fail"]).on_exit
    assert ["2=fail", "3=fail"] == [rule.spec for rule in rules]


def test_a_name_the_word_begins_is_preferred_to_a_nearer_spelling() -> None:
    """`--nproc` abbreviates `--nproc-per-node`, though `--role` differs from it by fewer letters."""
    assert "--nproc-per-node" == nearest("--nproc", ["--nproc-per-node", "--role", "--node-rank"])
