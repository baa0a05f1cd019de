"""One spelling for signals, nodes and ranks, whichever layer shows them."""

from __future__ import annotations

import signal

import pytest

from elastic.core.labels import (
    name_nodes,
    node_label,
    rank_list,
    rank_ranges,
    short_node,
    signal_name,
    signal_number,
    without_own_prefix,
)


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


def test_nodes_on_distinct_hosts_are_named_by_their_hosts() -> None:
    """Each node of its own host is named by the host, and its Ray id shows nowhere."""
    hosts = {"a1" * 28: "gpu-node-1", "b2" * 28: "gpu-node-2"}
    assert {"a1" * 28: "gpu-node-1", "b2" * 28: "gpu-node-2"} == name_nodes({}, hosts)


def test_nodes_sharing_a_host_are_told_apart_by_a_short_id() -> None:
    """Raylets of one machine (a test cluster) each get the host and six digits of their id;
    a node alone on its host keeps the bare host name."""
    hosts = {"a1" * 28: "box", "b2" * 28: "box", "c3" * 28: "other"}
    assert {"a1" * 28: "box·a1a1a1", "b2" * 28: "box·b2b2b2", "c3" * 28: "other"} == name_nodes({}, hosts)


def test_a_name_once_given_is_kept_and_a_newcomer_on_its_host_gets_a_short_id() -> None:
    """The names a run journaled stay; a node joining a named node's host is told apart from it."""
    named = {"a1" * 28: "box"}
    assert {"b2" * 28: "box·b2b2b2"} == name_nodes(named, {"a1" * 28: "box", "b2" * 28: "box"})
    assert {} == name_nodes({"a1" * 28: "box·a1a1a1"}, {"a1" * 28: "box"})


def test_short_ids_grow_until_the_names_are_unique_and_a_node_without_host_is_its_id() -> None:
    first, second = "abcdef01" + "0" * 48, "abcdef02" + "0" * 48
    assert {first: "box·abcdef01", second: "box·abcdef02"} == name_nodes({}, {first: "box", second: "box"})
    assert {first: first} == name_nodes({}, {first: ""})


def test_a_node_name_reads_whole_and_its_lane_keeps_the_short_id() -> None:
    """People see the name as given; a lane shortens the host, never the id that tells nodes apart."""
    assert ("box·a1a1a1", "box·a1a1a1") == (node_label("box·a1a1a1"), short_node("box·a1a1a1"))
    assert "gpu-node-17·a1a1a1" == short_node("gpu-node-17.cluster.local·a1a1a1")
    assert "a-very-lon…·a1a1a1" == short_node("a-very-long-host-name·a1a1a1")


def test_ranks_read_as_a_sentence_or_as_runs() -> None:
    assert ("rank 1", "ranks 1, 3") == (rank_list([1]), rank_list([3, 1, 3]))
    assert "0-3, 6" == rank_ranges([6, 0, 1, 2, 3])


@pytest.mark.parametrize(("line", "shown"), [
    ("[rank1]: Traceback (most recent call last):", "Traceback (most recent call last):"),
    ("[rank1]:   File \"train.py\", line 3, in <module>", "  File \"train.py\", line 3, in <module>"),
    ("[rank1]:", ""),
    ("[rank12]: x", "[rank12]: x"),  # another rank's prefix is the line's own
    ("[rank0]: x", "[rank0]: x"),
    ("step 3 [rank1]: x", "step 3 [rank1]: x"),
])
def test_a_rank_s_own_torch_prefix_gives_way_to_the_launcher_s(line: str, shown: str) -> None:
    """torch's excepthook prefixes rank 1's lines ``[rank1]: ``; the launcher's ``[rank 1]`` stands in for it."""
    assert shown == without_own_prefix(1, line)
