"""The suite's last words on tests skipped for want of torch: how many, and the two commands that run them.

The README's test command installs the ``test`` extra, which leaves torch out (pip's default torch on
Linux is the CUDA build); the tests of the torch-based frameworks then skip, each saying what it
could not import, and pytest's summary counts them here (a plugin: tests/conftest.py registers it).
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

__all__ = ["TORCH_FRAMEWORKS", "TORCH_INSTALL", "pytest_terminal_summary", "skipped_for_torch", "summary_line"]

TORCH_FRAMEWORKS = ("torch", "transformers", "accelerate", "lightning", "trl")
TORCH_INSTALL = (
    "pip install torch --index-url https://download.pytorch.org/whl/cpu && pip install -e '.[frameworks]'"
)


def _wants_torch(report: pytest.TestReport) -> bool:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if "not installed: " in reason:
        missing = reason.split("not installed: ", 1)[1].split(", ")
    elif "could not import '" in reason:
        missing = [reason.split("could not import '", 1)[1].split("'", 1)[0].split(".")[0]]
    else:
        return False
    return any(name.strip() in TORCH_FRAMEWORKS for name in missing)


def skipped_for_torch(skipped: Iterable[pytest.TestReport]) -> int:
    """How many of the skipped reports (a module or a test each) wanted torch or a framework on it."""
    return sum(1 for report in skipped if _wants_torch(report))


def summary_line(count: int) -> str:
    """What the summary says of ``count`` such skips."""
    return (f"{count} skipped (a module or a test each): torch and the frameworks built on it are not "
            f"installed. On a machine without a GPU: {TORCH_INSTALL}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say, at the end, how many tests were skipped for want of torch and how to run them."""
    if count := skipped_for_torch(terminalreporter.stats.get("skipped", [])):
        terminalreporter.write_line(summary_line(count), yellow=True)
