"""--orphan-lease: off by default, a number of seconds, and refused where it cannot keep ranks yet."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic.core.options.config import ConfigError, RunConfig
from elastic.core.options.table import option


def _config(**fields: object) -> RunConfig:
    return RunConfig(command=("train.py",), run_id="r1", run_dir=Path("/runs/r1"), nproc_per_node=1, **fields)  # type: ignore[arg-type]


def test_ranks_die_with_their_driver_unless_a_lease_is_asked_for() -> None:
    assert (0.0, 60.0) == (_config().orphan_lease_s, _config(orphan_lease_s=60.0).orphan_lease_s)


def test_a_negative_lease_is_refused_naming_the_flag() -> None:
    with pytest.raises(ConfigError, match="^--orphan-lease: must be a number of seconds"):
        _config(orphan_lease_s=-1.0)


def test_a_lease_on_ray_is_refused_in_one_line_naming_the_flag() -> None:
    """Ray's agents die with their driver's job: the lease would keep nothing there yet."""
    with pytest.raises(ConfigError, match="^--orphan-lease: keeps ranks on the local backend only") as refused:
        _config(orphan_lease_s=5.0, backend="ray")
    assert "\n" not in str(refused.value)


def test_the_help_says_what_a_rerun_does_with_kept_ranks() -> None:
    """It takes them over when it can, else stops them with their grace."""
    said = " ".join(option("--orphan-lease").help.split())
    assert "takes them over as they run" in said and "else stops them with their grace" in said
