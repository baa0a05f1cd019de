"""`elastic --help`, each subcommand's help and the errors that need more than one line name the
docs page that explains (a relative name, `docs/...md`), and every page they name exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from elastic.cli.grammar import build_parsers
from elastic.cli.torchrun import refusal
from elastic.core.diagnosis.signatures import parse_signature

ROOT = Path(__file__).resolve().parents[3]
PAGE = re.compile(r"docs/[\w./-]+?\.md")


def test_the_top_level_help_lists_the_pages_to_start_from() -> None:
    parser, _ = build_parsers()
    text = parser.format_help()
    for page in ("docs/getting-started/one-machine.md", "docs/failures/index.md",
                 "docs/reference/command-line.md", "docs/operating/troubleshooting.md"):
        assert page in text, text


def test_run_help_names_the_pages_of_its_options_exit_statuses_and_torchrun_flags() -> None:
    _, run = build_parsers()
    text = run.format_help()
    for page in ("docs/reference/command-line.md", "docs/reference/exit-status.md",
                 "docs/reference/torchrun.md", "docs/reference/config-file.md", "docs/failures/index.md"):
        assert page in text, text
    assert "README" not in text


@pytest.mark.parametrize("command, page", [
    ("status", "docs/reference/run-directory.md"),
    ("report", "docs/operating/goodput.md"),
    ("stack", "docs/failures/hangs.md"),
    ("logs", "docs/reference/run-directory.md"),
    ("runs", "docs/reference/command-line.md"),
])
def test_each_reading_command_names_its_page(command: str, page: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole, on terminals of any usual width (argparse wraps an epilog, and breaks at hyphens)."""
    for columns in range(50, 121):
        monkeypatch.setenv("COLUMNS", str(columns))
        parser, _ = build_parsers()
        text = parser.commands[command].format_help()
        assert page in text
        named = re.findall(r"docs/[^\s),;]*", text)
        assert [] == [name for name in named if not (ROOT / name.rstrip(".")).is_file()], columns


def test_a_torchrun_flag_elastic_refuses_names_the_torchrun_page() -> None:
    _, run = build_parsers()
    refused = refusal(run.parse_known_args(["--numa-binding", "node", "x.py"])[0])
    assert refused is not None and "see docs/reference/torchrun.md" in str(refused)


def test_a_refused_signature_rule_names_the_signatures_page() -> None:
    with pytest.raises(ValueError) as refused:
        parse_signature("bad(regex=transient")
    assert "see docs/failures/signatures.md" in str(refused.value)


def test_every_page_the_code_names_exists() -> None:
    """A `docs/...md` named anywhere in elastic/ (help, errors, docstrings) is a page of the site."""
    named = {page for path in (ROOT / "elastic").rglob("*.py") for page in PAGE.findall(path.read_text())}
    assert named, "the code names no page"
    assert [] == sorted(page for page in named if not (ROOT / page).is_file())
