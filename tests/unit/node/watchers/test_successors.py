"""The successor watch: each rank handed on once past its start-up, from its own files."""

from __future__ import annotations

import json
import time
from pathlib import Path

from elastic.core.launch.spec import WorkerSpec
from elastic.core.training.startup import RankImports
from elastic.node.supervisor import RunningWorker
from elastic.node.watchers.successors import SuccessorWatch
from elastic.node.watchers.watcher import Look


def _rank(tmp_path: Path, rank: int) -> WorkerSpec:
    env = {"ELASTIC_STARTUP_FILE": str(tmp_path / f"rank-{rank}.startup"),
           "ELASTIC_HEARTBEAT_FILE": str(tmp_path / f"rank-{rank}.heartbeat")}
    return WorkerSpec(attempt=0, rank=rank, local_rank=rank, node_id="n", argv=("python",), env=env,
                      log_path=str(tmp_path / f"rank-{rank}.log"))


def _mark(spec: WorkerSpec, name: str, **extra: object) -> None:
    with open(spec.env["ELASTIC_STARTUP_FILE"], "a") as marks:
        marks.write(json.dumps({"mark": name, "time": time.time(), "pid": 7, **extra}) + "\n")


def _watch(specs: list[WorkerSpec]) -> tuple[SuccessorWatch, list[tuple[int, RankImports]], Look]:
    handed: list[tuple[int, RankImports]] = []
    watch = SuccessorWatch(specs, lambda spec, imports: handed.append((spec.rank, imports)), time.monotonic)
    watch.start(time.monotonic())
    running = [RunningWorker(s, pid=100 + s.rank, started_at=time.monotonic()) for s in specs]
    return watch, handed, Look(lambda: running, 0)


def test_a_rank_is_handed_on_once_its_distributed_init_returned_with_what_it_had_imported(tmp_path: Path) -> None:
    specs = [_rank(tmp_path, 0), _rank(tmp_path, 1)]
    watch, handed, look = _watch(specs)
    for spec in specs:
        _mark(spec, "interpreter")
        _mark(spec, "init_begin")
        _mark(spec, "imports", modules=["torch"], resident_kb=2048)
    assert watch.tick(time.monotonic(), look) is not None
    assert [] == handed  # both still in their init

    _mark(specs[1], "init_end")
    assert watch.tick(time.monotonic(), look) is not None
    assert [(1, RankImports(("torch",), 2048))] == handed

    _mark(specs[0], "init_end")
    assert watch.tick(time.monotonic(), look) is None  # every rank handed on: done
    assert [1, 0] == [rank for rank, _ in handed]


def test_a_rank_that_beats_its_heartbeat_is_handed_on_without_distributed_init(tmp_path: Path) -> None:
    spec = _rank(tmp_path, 0)
    watch, handed, look = _watch([spec])
    _mark(spec, "interpreter")
    _mark(spec, "restore_begin")
    _mark(spec, "imports", modules=["numpy"], resident_kb=1024)
    assert watch.tick(time.monotonic(), look) is not None
    Path(spec.env["ELASTIC_HEARTBEAT_FILE"]).write_text('{"step": null}\n')

    assert watch.tick(time.monotonic(), Look(look.workers, 0)) is None
    assert [(0, RankImports(("numpy",), 1024))] == handed


def test_a_drain_hands_on_nothing(tmp_path: Path) -> None:
    spec = _rank(tmp_path, 0)
    watch, handed, look = _watch([spec])
    _mark(spec, "init_begin")
    _mark(spec, "imports", modules=["torch"], resident_kb=1)
    _mark(spec, "init_end")
    watch.stop()
    assert watch.tick(time.monotonic(), look) is None
    assert [] == handed
