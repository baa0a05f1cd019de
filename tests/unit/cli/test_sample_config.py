"""examples/elastic.toml, the commented sample, says only what is true: it loads, and every
option it shows commented out loads too once uncommented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from elastic.cli.layering import SETTINGS, file_settings

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "elastic.toml"
_COMMENTED = re.compile(r"^# ([a-z][a-z_-]*) = (.+)$")
COMMENTED = [m.groups() for line in SAMPLE.read_text().splitlines() if (m := _COMMENTED.match(line))]


def test_the_sample_loads_with_its_paths_in_its_folder() -> None:
    """Its relative checkpoint directory is examples/toy-checkpoints, from wherever it is read."""
    settings = file_settings(SAMPLE)

    assert SAMPLE.parent / "toy-checkpoints" == settings["checkpoint_dir"]
    assert ["python", "examples/toy_train.py", "--fail-at-step", "5"] == settings["config_command"]
    assert (2, 3) == (settings["nproc_per_node"], settings["max_restarts"])


@pytest.mark.parametrize(("key", "value"), COMMENTED, ids=[key for key, _ in COMMENTED])
def test_each_commented_option_is_one_that_loads(tmp_path: Path, key: str, value: str) -> None:
    """Uncommented, each `# key = value` line of the sample is a valid option of the file."""
    uncommented = tmp_path / "elastic.toml"
    uncommented.write_text(f"[run]\n{key} = {value}\n")

    assert key.replace("-", "_") in SETTINGS
    assert key.replace("-", "_") in file_settings(uncommented)


def test_the_sample_shows_options_commented_out() -> None:
    assert len(COMMENTED) >= 10
