"""One spelling for signals, nodes and ranks, whichever layer shows them."""

from __future__ import annotations

import signal

import pytest

from elastic.core.labels import node_label, rank_list, rank_ranges, short_node, signal_name, signal_number


@pytest.mark.parametrize(("name", "number"), [("SIGTERM", 15), ("TERM", 15), ("usr1", int(signal.SIGUSR1)),
                                              ("SIGNOPE", None), ("9", None)])
def test_a_signal_is_found_by_any_spelling_of_its_name(name: str, number: int | None) -> None:
    assert number == signal_number(name)


def test_a_signal_number_has_a_name_even_without_one_in_python() -> None:
    assert ("SIGKILL", "SIG250") == (signal_name(9), signal_name(250))


def test_a_ray_node_id_is_cut_for_people_and_a_host_name_is_not() -> None:
    ray_id = "a1" * 28
    assert (ray_id[:12], "gpu-node-17.cluster.local") == (node_label(ray_id), node_label("gpu-node-17.cluster.local"))
    assert ("gpu-node-17", "10.0.0.12") == (short_node("gpu-node-17.cluster.local"), short_node("10.0.0.12"))


def test_ranks_read_as_a_sentence_or_as_runs() -> None:
    assert ("rank 1", "ranks 1, 3") == (rank_list([1]), rank_list([3, 1, 3]))
    assert "0-3, 6" == rank_ranges([6, 0, 1, 2, 3])
