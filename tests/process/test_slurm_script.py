"""examples/slurm/elastic.sbatch refuses bad settings with one line, before it starts anything."""

from __future__ import annotations

import subprocess

import pytest
from harness import REPO

SBATCH = REPO / "examples" / "slurm" / "elastic.sbatch"


def _run(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SBATCH), "--", "true"], env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True, text=True, timeout=30,
    )


def test_outside_a_job_it_says_how_to_submit_it() -> None:
    """Without SLURM_JOB_ID the script exits 2 and gives the sbatch line."""
    result = _run()
    assert 2 == result.returncode
    assert "run me with sbatch: sbatch -N NODES" in result.stderr


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"ELASTIC_RAY_PORT_BASE": "20k"}, "ELASTIC_RAY_PORT_BASE: '20k' is not a whole number"),
        ({"ELASTIC_RAY_START_TRIES": "-1"}, "ELASTIC_RAY_START_TRIES: '-1' is not a whole number"),
        ({"ELASTIC_RAY_TMPDIR": "tmp"}, "ELASTIC_RAY_TMPDIR: 'tmp' must be an absolute path"),
        ({"ELASTIC_PYTHON": "no-such-python"}, "ELASTIC_PYTHON: 'no-such-python' is not on the PATH"),
    ],
)
def test_a_bad_setting_is_one_line_naming_it(setting: dict[str, str], message: str) -> None:
    """A malformed variable is exit status 2 and one line that names it, before Slurm is asked anything."""
    result = _run(**{"SLURM_JOB_ID": "7", "ELASTIC_PYTHON": "python3", **setting})
    assert 2 == result.returncode
    [line] = result.stderr.splitlines()
    assert message in line
