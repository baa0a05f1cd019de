"""Framework recipe tests are marked ``framework``; the harness lives in tests/harness.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).parent == here:
            item.add_marker(pytest.mark.framework)


MAXTEXT_PYTHON_VAR = "MAXTEXT_PYTHON"


@pytest.fixture(scope="session")
def maxtext_python() -> Path:
    """The Python 3.12 of a venv with MaxText (``tests/frameworks/maxtext-requirements.txt``), named by
    ``MAXTEXT_PYTHON``; .ci/run makes one. Under CI its absence fails the test: CI must run it."""
    value = os.environ.get(MAXTEXT_PYTHON_VAR)
    if not value:
        reason = (f"{MAXTEXT_PYTHON_VAR} is not set: a Python 3.12 venv with "
                  "tests/frameworks/maxtext-requirements.txt installed (.ci/run makes one)")
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    python = Path(value)
    assert python.exists(), f"{MAXTEXT_PYTHON_VAR}={value}: no such interpreter"
    return python
