"""The README and the docs stay true: CI runs the README's test command, the README stays short,
and the command-line page documents every flag with the table the option table generates."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from elastic.cli.grammar import build_parser
from elastic.core.options.table import DOC_PAGES, OPTIONS, TABLE_PAGE, markdown_table

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
COMMAND_LINE = (DOCS / TABLE_PAGE).read_text()


def test_ci_runs_exactly_the_readme_test_command() -> None:
    """The command under 'Run the tests' is the last line of .ci/run."""
    command = re.search(r"\*\*Run the tests\*\*.*?```\n(.*?)\n```", README, flags=re.S)
    assert command is not None
    ci_lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip()]
    assert command.group(1) == ci_lines[-1]


def test_the_readme_is_short() -> None:
    """The README is the first page a newcomer reads: at most 200 lines, the rest is in docs/."""
    assert len(README.splitlines()) <= 200


def test_the_readme_links_only_to_files_that_exist() -> None:
    """Each relative link of the README names a file or folder of the repository."""
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README)
    assert [] == [target for target in targets if not (ROOT / target).exists()]


def test_the_readme_commands_are_run_by_the_tests() -> None:
    """Each command line of the README that runs the toy is in a runnable block of the docs (run by
    tests/process/test_docs_commands.py); the demo's, after its `pip install -e . &&`, too."""
    runnable = "\n".join(
        match[1] for page in sorted(DOCS.rglob("*.md"))
        for match in re.finditer(r"<!-- runs-in-test: exit \d+ -->\n```[a-z]*\n(.*?)\n```", page.read_text(), re.S)
    )
    lines = [line for line in README.splitlines() if line.startswith(("python -m elastic run", "rm -rf"))
             and "examples/toy_train.py" in line]
    demo = [line for line in README.splitlines() if line.startswith("python -m pip install -e . && ")]
    assert lines and 1 == len(demo)
    assert [] == [line for line in lines + [demo[0].split(" && ", 1)[1]] if line not in runnable]


def test_the_command_line_page_documents_every_run_flag() -> None:
    """Each option of `elastic run --help` appears in docs/reference/command-line.md (the spellings
    --help hides, `--max_restarts`, are the rule the page states once)."""
    run = build_parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    flags = [
        opt for action in run._actions for opt in action.option_strings
        if opt.startswith("--") and action.help != argparse.SUPPRESS
    ]
    missing = [flag for flag in flags if flag != "--help" and f"`{flag}" not in COMMAND_LINE]
    assert [] == missing


def test_the_options_table_is_the_one_the_option_table_generates() -> None:
    """The command-line page's options table is exactly elastic.core.options.table's
    (paste `python -m elastic.core.options.table`)."""
    start = COMMAND_LINE.index("| option | meaning | default |")
    assert markdown_table() == COMMAND_LINE[start : COMMAND_LINE.index("\n\n", start) + 1]


def test_each_section_an_option_links_to_has_its_page() -> None:
    """A help text's `[text](#anchor)` names a section DOC_PAGES places on a page that exists
    (the docs' build, tests/unit/test_docs_site.py, checks the anchor is on it)."""
    anchors = {anchor for row in OPTIONS for anchor in re.findall(r"\]\(#([^)]+)\)", row.help)}
    assert [] == sorted(anchors - DOC_PAGES.keys())
    assert [] == [page for page in DOC_PAGES.values() if not (DOCS / page).is_file()]


def test_install_hints_name_the_distribution_in_pyproject() -> None:
    """`pip install 'X[debug]'` hints name pyproject's distribution, not `elastic` (another project's)."""
    import tomllib

    from elastic.node.probes.stacks import PY_SPY_MISSING

    name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    assert name == "elastic-launch"
    assert f"pip install '{name}[debug]'" in PY_SPY_MISSING
    docs = "\n".join(page.read_text() for page in sorted(DOCS.rglob("*.md")))
    for text in (README, docs):
        assert f"pip install {name}" in text
        assert "pip install 'elastic[" not in text


def test_the_readme_output_samples_are_the_one_machine_page_s_checked_ones() -> None:
    """The README's sample output lines are lines of docs/getting-started/one-machine.md, whose
    output blocks tests/process/test_docs_commands.py compares with real runs."""
    page = (DOCS / "getting-started" / "one-machine.md").read_text().splitlines()
    shown = [line for line in README.splitlines()
             if line.startswith(("elastic: run ", "elastic: attempt ", "  attempt ", "  relaunch latency: ",
                                 "  where the time went: ", "  root cause: ", "  why it stopped: ", "    | "))]
    assert len(shown) >= 10
    assert [] == [line for line in shown if line not in page]


def test_the_journal_table_names_every_event_the_journal_can_hold() -> None:
    """docs/reference/run-directory.md's table of journal events is EventName, no more, no less."""
    from elastic.core.events import EventName

    page = (DOCS / "reference" / "run-directory.md").read_text()
    start = page.index("| event | when |")
    rows = page[start : page.index("\n\n", start)].splitlines()[2:]
    documented = {name for row in rows for name in re.findall(r"`([a-z_]+)`", row.split("|")[1])}
    assert {event.value for event in EventName} == documented


def test_the_run_directory_page_names_every_path_of_the_run_layout() -> None:
    """Each file and folder RunLayout places in a run directory is in the page's listing."""
    import inspect

    from elastic.core.run_layout import RunLayout
    from run_directory_page import documented_run_files, kind_of

    layout = RunLayout(Path("/run"))
    paths = []
    for name, member in inspect.getmembers(RunLayout):
        if name.startswith("_") or name == "root":
            continue
        if isinstance(member, property):
            paths.append(getattr(layout, name))
        elif callable(member):
            arguments = [3, 1, 0][: len(inspect.signature(member).parameters) - 1]
            paths.append(getattr(layout, name)(*arguments))
    assert len(paths) >= 12
    named = {kind_of(str(path.relative_to("/run"))) for path in paths}
    documented = documented_run_files()
    documented_dirs = {str(Path(name).parent) for name in documented}
    assert [] == sorted(name for name in named if name not in documented and name not in documented_dirs)
