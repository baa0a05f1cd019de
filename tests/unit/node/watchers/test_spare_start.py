"""The warm spares start once every rank of the node carries the in-place mark, and never otherwise."""

from __future__ import annotations

import json
from pathlib import Path

from elastic.core.launch.spec import WorkerSpec
from elastic.node.watchers.spares import SpareStart
from elastic.node.watchers.watcher import Look
from elastic.worker.bootstrap.startup_marks import INPLACE_MARK, STARTUP_FILE_VAR


def _rank(tmp_path: Path, rank: int) -> WorkerSpec:
    return WorkerSpec(attempt=0, rank=rank, local_rank=rank, node_id="n", argv=("python", "t.py"),
                      env={STARTUP_FILE_VAR: str(tmp_path / f"rank-{rank}.startup")}, log_path=str(tmp_path / "log"))


def _mark(spec: WorkerSpec, name: str, pid: int = 7) -> None:
    with open(spec.env[STARTUP_FILE_VAR], "a", encoding="utf-8") as marks:
        marks.write(json.dumps({"mark": name, "time": 1.0, "pid": pid}) + "\n")


def test_the_spares_start_once_when_the_last_rank_is_marked(tmp_path: Path) -> None:
    ranks = [_rank(tmp_path, 0), _rank(tmp_path, 1)]
    started: list[int] = []
    job = SpareStart(ranks, lambda: started.append(1))
    assert job.start(0.0) > 0
    _mark(ranks[0], "interpreter")
    _mark(ranks[0], INPLACE_MARK)
    assert job.tick(0.1, Look()) is not None and [] == started  # rank 1 not yet
    _mark(ranks[1], INPLACE_MARK)
    assert job.tick(0.2, Look()) is None and [1] == started  # done: once


def test_ranks_that_never_run_in_place_get_no_spares_and_are_looked_at_less_often(tmp_path: Path) -> None:
    ranks = [_rank(tmp_path, 0)]
    started: list[int] = []
    job = SpareStart(ranks, lambda: started.append(1))
    job.start(0.0)
    _mark(ranks[0], "init_begin")
    soon, later = job.tick(1.0, Look()), job.tick(120.0, Look())
    assert soon is not None and later is not None and later > soon and [] == started


def test_a_drain_starts_no_spare(tmp_path: Path) -> None:
    ranks = [_rank(tmp_path, 0)]
    started: list[int] = []
    job = SpareStart(ranks, lambda: started.append(1))
    job.start(0.0)
    _mark(ranks[0], INPLACE_MARK)
    job.stop()
    assert job.tick(0.1, Look()) is None and [] == started


def test_a_mark_of_a_child_process_of_the_rank_does_not_count(tmp_path: Path) -> None:
    """Only the file's first process is the rank (a child inherits the variable)."""
    ranks = [_rank(tmp_path, 0)]
    started: list[int] = []
    job = SpareStart(ranks, lambda: started.append(1))
    job.start(0.0)
    _mark(ranks[0], "interpreter", pid=7)
    _mark(ranks[0], INPLACE_MARK, pid=8)
    assert job.tick(0.1, Look()) is not None and [] == started
