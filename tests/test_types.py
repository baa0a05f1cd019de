"""The package type-checks under mypy --strict (STYLE: type hints everywhere)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_package_passes_mypy_strict() -> None:
    """`mypy --strict elastic` reports no errors."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "elastic"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert 0 == result.returncode, result.stdout + result.stderr
