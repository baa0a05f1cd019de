"""The README stays true: CI runs its test command, and it documents every flag."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from elastic.cli.grammar import build_parser
from elastic.core.options.table import markdown_table

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_ci_runs_exactly_the_readme_test_command() -> None:
    """The command under 'Run the tests' is the last line of .ci/run."""
    command = re.search(r"\*\*Run the tests\*\*.*?```\n(.*?)\n```", README, flags=re.S)
    assert command is not None
    ci_lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip()]
    assert command.group(1) == ci_lines[-1]


def test_readme_documents_every_run_flag() -> None:
    """Each option of `elastic run --help` appears in the README's table (the spellings --help
    hides, `--max_restarts`, are the rule the README states once)."""
    run = build_parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    flags = [
        opt for action in run._actions for opt in action.option_strings
        if opt.startswith("--") and action.help != argparse.SUPPRESS
    ]
    missing = [flag for flag in flags if flag != "--help" and f"`{flag}" not in README]
    assert [] == missing


def test_readme_options_table_is_the_one_the_option_table_generates() -> None:
    """The README's options table is exactly elastic.core.options.table' (paste `python -m elastic.core.options.table`)."""
    start = README.index("| option | meaning | default |")
    assert markdown_table() == README[start : README.index("\n\n", start) + 1]


def test_install_hints_name_the_distribution_in_pyproject() -> None:
    """`pip install 'X[debug]'` hints name pyproject's distribution, not `elastic` (another project's)."""
    import tomllib

    from elastic.node.probes.stacks import PY_SPY_MISSING

    name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    assert name == "elastic-launch"
    assert f"pip install '{name}[debug]'" in PY_SPY_MISSING
    assert f"pip install {name}" in README
    assert "pip install 'elastic[" not in README
