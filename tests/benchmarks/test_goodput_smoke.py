"""The goodput benchmark's smoke mode runs: every launcher finishes its schedule and gives its numbers.

Not a claim about speed (the benchmark measures that): one SIGKILL in a 9 s schedule under
elastic, torchrun and Ray Train v2, and the table, the truth and elastic's ledger come out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.process, pytest.mark.ray, pytest.mark.timeout(400)]

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_goodput.py"


def test_every_launcher_finishes_the_smoke_schedule_and_its_numbers_are_produced(tmp_path: Path) -> None:
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--smoke", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=360,
        env={**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((out / "results.json").read_text())["results"]
    assert [r["launcher"] for r in results] == ["elastic", "torchrun", "ray-train"]
    for result in results:
        assert result["verdict"].startswith("finished"), result
        assert len(result["injected"]) == 1, result
        assert 0 < result["goodput"] <= 1, result
        assert result["truth"]["unique_steps"] > 0, result
    assert results[0]["ledger"]["goodput"] is not None
    assert "| goodput (truth) |" in done.stdout
