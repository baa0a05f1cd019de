"""Every flag of torchrun has a row, docs/reference/torchrun.md shows the rows, and each row parses."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic.cli.grammar import build_parsers, parse
from elastic.cli.torchrun import FLAGS, Fate, TorchrunFlag, markdown_table, notes, refusal

PAGE = (Path(__file__).resolve().parents[3] / "docs" / "reference" / "torchrun.md").read_text()


def test_the_docs_torchrun_table_is_the_one_the_rows_generate() -> None:
    """docs/reference/torchrun.md's table of torchrun's flags is exactly `python -m elastic.cli.torchrun`'s."""
    start = PAGE.index("| torchrun | elastic |")
    assert markdown_table() == PAGE[start : PAGE.index("\n\n", start) + 1]


def test_every_flag_of_torchrun_has_a_row() -> None:
    """The rows name every flag torch 2.13's torchrun takes, in each of its spellings."""
    torchrun = pytest.importorskip("torch.distributed.run")
    theirs = {s for action in torchrun.get_args_parser()._actions for s in action.option_strings}
    ours = {spelling for flag in FLAGS for spelling in flag.spellings}
    assert theirs - {"-h", "--help"} == ours


@pytest.mark.parametrize("flag", FLAGS, ids=[flag.name for flag in FLAGS])
def test_each_spelling_parses_and_meets_its_fate(flag: TorchrunFlag) -> None:
    """Every spelling parses; an ignored flag yields a note naming it, a refused one an error."""
    parser, _ = build_parsers()
    for spelling in flag.spellings:
        value = [] if flag.switch else ["1" if flag.fate is Fate.HONOURED or flag.option else "x"]
        args = parse(parser, ["run", spelling, *value, "train.py"])
        if flag.fate is Fate.IGNORED:
            assert any(flag.name in note.partition(": ignored")[0].split(", ") for note in notes(args))
        if flag.fate is Fate.REFUSED:
            error = refusal(args)
            assert error is not None and flag.name == error.flag
