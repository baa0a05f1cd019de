"""Reading a journal for `elastic status` and `elastic logs`: where ranks ran, rank lists."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from elastic.cli.subcommands import show_status
from elastic.core.journal.fold import JOURNAL_VERSION
from elastic.core.labels import rank_ranges
from elastic.views.status import RankPlace, describe_pids, rank_places


def started(attempt: int, nodes: list[str], nproc: list[int], addresses: list[str] | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {"event": "attempt_started", "attempt": attempt, "nodes": nodes,
                             "nproc_per_node": nproc}
    if addresses is not None:
        event["node_addresses"] = addresses
    return event


def test_ranks_are_placed_node_by_node_in_the_attempts_order() -> None:
    """Node 0 holds ranks 0..n-1, node 1 the next ones, as the plan assigned them."""
    events = [started(0, ["a", "b"], [2, 1], ["10.0.0.1", "10.0.0.2"]),
              started(1, ["b"], [2], ["10.0.0.2"])]
    assert {0: RankPlace("a", "10.0.0.1"), 1: RankPlace("a", "10.0.0.1"),
            2: RankPlace("b", "10.0.0.2")} == rank_places(events, 0)
    assert {0: RankPlace("b", "10.0.0.2"), 1: RankPlace("b", "10.0.0.2")} == rank_places(events, 1)
    assert {} == rank_places(events, 2)


def test_a_journal_without_addresses_still_places_ranks() -> None:
    """Journals written before addresses were recorded name the node alone."""
    [place] = rank_places([started(0, ["a"], [1])], 0).values()
    assert "node a" == place.describe()
    assert "node a (10.0.0.1)" == RankPlace("a", "10.0.0.1").describe()


def test_status_lists_each_ranks_pid_of_the_latest_attempt_by_node() -> None:
    """``rank_pids`` of the latest attempt that journaled them, grouped by the node each ran on."""
    events = [started(0, ["a"], [2]), {"event": "rank_pids", "attempt": 0, "pids": {"0": 11, "1": 12}},
              started(1, ["a", "b"], [1, 1]), {"event": "rank_pids", "attempt": 1, "pids": {"1": 22, "0": 21}}]
    assert ["pids of attempt 1: rank 0 21 (node a); rank 1 22 (node b)"] == describe_pids(events)
    assert ["pids of attempt 0: rank 0 11, rank 1 12 (node a)"] == describe_pids(events[:2])
    assert [] == describe_pids(events[:1])


def test_rank_ranges_join_runs() -> None:
    assert "0-3, 6, 8-9" == rank_ranges([9, 0, 1, 2, 3, 6, 8])
    assert "" == rank_ranges([])


def _live_run(tmp_path: Path, **state: Any) -> Path:
    """A run directory whose driver is running attempt 0, with ``state`` in its state.json."""
    run = tmp_path / "run"
    run.mkdir(parents=True)
    events = [
        {"event": "run_started", "time": "2026-12-03T09:00:00+00:00", "run_id": "r1", "attempt": 0,
         "journal_version": JOURNAL_VERSION},
        {"event": "phase_changed", "time": "2026-12-03T09:00:01+00:00", "run_id": "r1", "attempt": 0,
         "source": "pending", "dest": "launching", "trigger": "launch", "reason": "-"},
    ]
    (run / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run / "state.json").write_text(json.dumps({
        "run_id": "r1", "phase": "running", "attempt": 0, "world_size": 1, "nodes": 1, "ranks_alive": 1,
        "restarts": 0, "failures_budget_left": 0, "pid": 1, **state,
    }))
    return run


def _checkpoint_line(run: Path) -> str:
    return next(line for line in show_status(run, lambda pid: True) if "last checkpoint step" in line)


def test_a_live_status_names_the_latest_checkpoint_in_the_directory_now(tmp_path: Path) -> None:
    """The driver's state.json has the checkpoint of its last scan (the attempt's start): status
    looks in the directory it names, with the run's --checkpoint-pattern; without a directory
    named (an older state.json), or with one that cannot be read, it shows the driver's."""
    checkpoints = tmp_path / "ckpt"
    checkpoints.mkdir()
    for step in (3, 5):
        (checkpoints / f"step_{step}.pt").write_text(str(step))
    (checkpoints / "run-9.weights").write_text("9")  # no checkpoint extension: only a pattern names it
    assert _checkpoint_line(_live_run(tmp_path / "a", checkpoint_step=None, checkpoint_dir=str(checkpoints))
                            ).startswith("last checkpoint step: 5,")
    pattern = r"run-(?P<step>[0-9]+)\.weights"
    assert _checkpoint_line(_live_run(tmp_path / "b", checkpoint_step=None, checkpoint_dir=str(checkpoints),
                                      checkpoint_pattern=pattern)).startswith("last checkpoint step: 9,")
    assert _checkpoint_line(_live_run(tmp_path / "c", checkpoint_step=2)).startswith("last checkpoint step: 2,")
    not_a_directory = checkpoints / "step_3.pt"
    assert _checkpoint_line(_live_run(tmp_path / "d", checkpoint_step=2, checkpoint_dir=str(not_a_directory))
                            ).startswith("last checkpoint step: 2,")
