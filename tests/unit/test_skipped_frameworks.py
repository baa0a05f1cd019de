"""The suite's summary counts the tests skipped for want of torch and gives the commands that run them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_tests_skipped_for_want_of_torch_are_counted_at_the_end_with_the_commands_that_run_them(tmp_path: Path) -> None:
    (tmp_path / "test_wants.py").write_text(
        "import pytest\n"
        "def test_importorskip():\n    pytest.importorskip('torch_nowhere_to_be_found.sub', reason=None)\n"
        "def test_framework():\n    pytest.skip('not installed: lightning, torch')\n"
        "def test_unrelated():\n    pytest.skip('needs Slurm')\n"
    )
    (tmp_path / "conftest.py").write_text("")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "skipped_frameworks", "-p", "no:cacheprovider", "-n", "0", "-q",
         str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert "3 skipped" in result.stdout, result.stdout + result.stderr
    # torch_nowhere_to_be_found is no torch framework: only the test naming torch and lightning counts.
    assert "1 skipped (a module or a test each): torch and the frameworks built on it are not installed" in result.stdout
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu && pip install -e '.[frameworks]'" in result.stdout
