"""A driver taking a run over reads how long its ranks' distributed initialisations took from their start-up marks."""

from __future__ import annotations

import json
from pathlib import Path

from elastic.core.run_layout import RunLayout
from elastic.run.records.journal import longest_init_marked


def _marks(layout: RunLayout, attempt: int, rank: int, *marks: tuple[str, float]) -> None:
    path = layout.attempt_dir(attempt) / f"rank-{rank}.startup"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"mark": name, "time": at, "pid": 7}) + "\n" for name, at in marks))


def test_the_longest_completed_init_of_the_dead_drivers_attempts_is_read_from_the_ranks_marks(tmp_path: Path) -> None:
    """Its journal had no start-up profile (the driver died before every rank stepped): the marks say 2.5 s."""
    layout = RunLayout(tmp_path)
    _marks(layout, 0, 0, ("interpreter", 100.0), ("init_begin", 101.0), ("init_end", 103.5))
    _marks(layout, 0, 1, ("interpreter", 100.0), ("init_begin", 101.0), ("init_end", 102.0))
    _marks(layout, 1, 0, ("interpreter", 200.0), ("init_begin", 201.0))  # stopped in its init: no end
    _marks(layout, 2, 0, ("interpreter", 300.0), ("init_begin", 301.0), ("init_end", 399.0))  # not yet counted

    assert 2.5 == longest_init_marked(layout, attempts=2)
    assert 98.0 == longest_init_marked(layout, attempts=3)


def test_no_completed_init_reads_as_none(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path)
    _marks(layout, 0, 0, ("interpreter", 100.0), ("init_begin", 101.0))
    assert longest_init_marked(layout, attempts=1) is None
    assert longest_init_marked(RunLayout(tmp_path / "never"), attempts=3) is None
