"""The last training step an attempt's rank logs show: what a takeover reads of a dead driver's ranks."""

from __future__ import annotations

import os
from pathlib import Path

from elastic.core.training.stall import ProgressPolicy
from elastic.node.logs.last_step import last_step_logged


def test_the_highest_last_step_over_the_ranks_and_when_its_log_was_written(tmp_path: Path) -> None:
    (tmp_path / "rank-0.log").write_text("step 1 loss 2.3\nstep 12 loss 2.1\n")
    (tmp_path / "rank-1.log").write_text("step 14 loss 2.0\nsaving\nNCCL WARN retrying\n")
    os.utime(tmp_path / "rank-1.log", (1_000_000.0, 1_000_000.0))
    assert (14, 1_000_000.0) == last_step_logged(tmp_path, ProgressPolicy())


def test_the_users_pattern_reads_the_steps_and_no_step_or_no_output_reading_is_none(tmp_path: Path) -> None:
    (tmp_path / "rank-0.log").write_text("it=7 done\nstarting\n")
    assert 7 == (last_step_logged(tmp_path, ProgressPolicy(pattern=r"it=(\d+)")) or (0, 0.0))[0]
    assert None is last_step_logged(tmp_path, ProgressPolicy(read_output=False))
    assert None is last_step_logged(tmp_path / "attempt-9", ProgressPolicy())
