"""Reading a journal for `elastic status` and `elastic logs`: where ranks ran, rank lists."""

from __future__ import annotations

from typing import Any

from elastic.run.status import RankPlace, rank_places, rank_ranges


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


def test_rank_ranges_join_runs() -> None:
    assert "0-3, 6, 8-9" == rank_ranges([9, 0, 1, 2, 3, 6, 8])
    assert "" == rank_ranges([])
