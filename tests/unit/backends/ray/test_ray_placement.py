"""Placement on a Ray cluster, decided from the node table as values (no Ray here)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from elastic.backends.ray.placement import NodeNames, Quarantine, eligible_nodes, resource_wanted
from elastic.core.launch.plan import NodeSlot


def _node(node_id: str, *, alive: bool = True, **resources: float) -> dict[str, Any]:
    return {"NodeID": node_id, "NodeManagerAddress": f"10.0.0.{node_id}", "Alive": alive,
            "Resources": {"CPU": 4.0, **resources}}


def test_dead_nodes_are_never_eligible() -> None:
    table = [_node("1"), _node("2", alive=False)]
    eligible = eligible_nodes(table, resource=None, nproc_per_node=2, quarantine=Quarantine(), now=0.0)
    assert (NodeSlot("1", "10.0.0.1", 2),) == eligible.slots


def test_a_cluster_with_gpus_places_only_on_gpu_nodes_one_rank_per_gpu() -> None:
    table = [_node("1"), _node("2", GPU=4.0), _node("3", alive=False, GPU=8.0)]
    assert "GPU" == resource_wanted([n for n in table if n["Alive"]], None)
    eligible = eligible_nodes(table, resource=None, nproc_per_node=None, quarantine=Quarantine(), now=0.0)
    assert (NodeSlot("2", "10.0.0.2", 4),) == eligible.slots
    assert {"2": 4} == dict(eligible.gpus)


def test_a_resource_asked_for_filters_the_nodes_and_cpu_nodes_run_one_rank() -> None:
    table = [_node("1", trainer=1.0), _node("2"), _node("3", GPU=2.0)]
    eligible = eligible_nodes(table, resource="trainer", nproc_per_node=None, quarantine=Quarantine(), now=0.0)
    assert (NodeSlot("1", "10.0.0.1", 1),) == eligible.slots
    assert {"1": 0} == dict(eligible.gpus)


def test_a_node_being_drained_is_never_eligible_and_does_not_make_cpu_nodes_so() -> None:
    """Ray is taking it away (a preemption notice); the GPU it had still decides the resource."""
    table = [_node("1"), _node("2", GPU=2.0), _node("3", GPU=2.0)]
    eligible = eligible_nodes(table, resource=None, nproc_per_node=None, quarantine=Quarantine(), now=0.0,
                              draining={"3": 0})
    assert (NodeSlot("2", "10.0.0.2", 2),) == eligible.slots
    everything_drained = eligible_nodes(table, resource=None, nproc_per_node=None, quarantine=Quarantine(),
                                        now=0.0, draining={"2": 0, "3": 0})
    assert () == everything_drained.slots


def test_a_quarantined_node_comes_back_when_its_time_is_up() -> None:
    quarantine = Quarantine()
    quarantine.add("1", now=100.0, for_s=60.0)
    table = [_node("1"), _node("2")]

    def ids(now: float) -> list[str]:
        slots = eligible_nodes(table, resource=None, nproc_per_node=1, quarantine=quarantine, now=now).slots
        return [s.node_id for s in slots]

    assert ["2"] == ids(159.0)
    assert ["1", "2"] == ids(160.0)


def test_placement_loads_no_ray() -> None:
    code = "import sys, elastic.backends.ray.placement\nprint('ray' in sys.modules)\n"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "False" == loaded.stdout.strip()


def test_a_node_quarantined_for_ever_stays_out_after_a_shorter_quarantine() -> None:
    """A straggler's node is out for the run; an unreachable agent there later does not shorten it."""
    from elastic.backends.ray.placement import Quarantine

    quarantine = Quarantine()
    quarantine.add("n1", 10.0, for_s=float("inf"))
    quarantine.add("n1", 20.0)
    assert quarantine.holds("n1", 1e9)


def test_nodes_are_named_for_people_and_found_again_by_name() -> None:
    """Two raylets of one machine get the host and a short id, a node alone on its host the host;
    the driver sees the names, Ray's ids stay the backend's, and a later driver keeps the names."""
    first, second, third = "a1" * 28, "b2" * 28, "c3" * 28
    table = [{**_node("1", GPU=1.0), "NodeID": node_id, "NodeManagerHostname": host}
             for node_id, host in ((first, "box"), (second, "box"), (third, "gpu-7"))]
    eligible = eligible_nodes(table, resource=None, nproc_per_node=None, quarantine=Quarantine(), now=0.0)
    names = NodeNames()
    names.name(eligible.hosts)
    assert ["box·a1a1a1", "box·b2b2b2", "gpu-7"] == [names.named(s).node_id for s in eligible.slots]
    assert (second, second) == (names.id_of("box·b2b2b2"), names.named(eligible.slots[1]).backend_id)
    assert (first, "gone" * 14) == (names.id_of(first), names.of("gone" * 14))  # a bare id stays itself
    later = NodeNames({second: "box"})  # journaled by the run's earlier driver
    later.name(eligible.hosts)
    assert ["box·a1a1a1", "box", "gpu-7"] == [later.of(s.node_id) for s in eligible.slots]
