"""Fixtures of the process tests; the harness itself lives in process_harness.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from process_harness import Launcher


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).parent == here:
            item.add_marker(pytest.mark.process)


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    """Run the launcher in tmp_path; whatever it started is killed by pid at the end."""
    runner = Launcher(tmp_path)
    yield runner
    runner.close()


@pytest.fixture
def pid_dir(tmp_path: Path) -> Path:
    """A directory where rank scripts write their pid files."""
    directory = tmp_path / "pids"
    directory.mkdir()
    return directory
