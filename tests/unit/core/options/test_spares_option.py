"""--spares: off by default, a count, and refused before anything starts where it cannot serve."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic.core.options.config import ConfigError, RunConfig


def _config(command: tuple[str, ...] = ("python", "train.py"), **fields: object) -> RunConfig:
    return RunConfig(command=command, run_id="r1", run_dir=Path("/runs/r1"), nproc_per_node=2, **fields)  # type: ignore[arg-type]


def test_no_spares_unless_asked_for() -> None:
    assert (0, 2) == (_config().spares, _config(spares=2).spares)


def test_a_negative_count_is_refused_naming_the_flag() -> None:
    with pytest.raises(ConfigError, match="^--spares: "):
        _config(spares=-1)


@pytest.mark.parametrize(
    ("command", "fields", "said"),
    [
        (("sh", "-c", "train"), {}, "^--spares: in-place restarts need a python command .* not 'sh'$"),
        (("python", "train.py"), {"backend": "ray"}, "^--spares: in-place restarts run on the local backend only"),
        (("python", "train.py"), {"orphan_lease_s": 30.0}, "^--spares: not with --orphan-lease yet"),
    ],
    ids=["not-python", "ray", "orphan-lease"],
)
def test_what_spares_cannot_serve_is_refused_in_one_line(
    command: tuple[str, ...], fields: dict[str, object], said: str
) -> None:
    with pytest.raises(ConfigError, match=said) as refused:
        _config(command, spares=1, **fields)
    assert "\n" not in str(refused.value)
