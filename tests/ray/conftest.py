"""A real Ray cluster on loopback, started once per module: a head and GPU-less-but-faked nodes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import allow_process_trees, descendants

OBJECT_STORE_BYTES = 80 * 1024 * 1024
WORKER_NODES = 3


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).parent == here:
            item.add_marker(pytest.mark.ray)


class TestCluster:
    """``ray.cluster_utils.Cluster`` with elastic's test conventions (fake GPUs, loopback)."""

    def __init__(self, workers: int = WORKER_NODES) -> None:
        from ray.cluster_utils import Cluster

        before = descendants()
        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 1,
                "object_store_memory": OBJECT_STORE_BYTES,
                "include_dashboard": False,
                # Notice a removed node within about a second, not fifteen.
                "_system_config": {
                    "health_check_period_ms": 200,
                    "health_check_failure_threshold": 3,
                },
            },
        )
        self.size = workers
        self.workers = [self.add_node() for _ in range(workers)]
        self.cluster.wait_for_nodes()
        allow_process_trees(descendants() - before)

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def add_node(self):  # type: ignore[no-untyped-def]
        before = descendants()
        node = self.cluster.add_node(num_cpus=1, num_gpus=2, object_store_memory=OBJECT_STORE_BYTES)
        allow_process_trees(descendants() - before)
        return node

    def remove_node(self, node) -> None:  # type: ignore[no-untyped-def]
        self.workers.remove(node)
        self.cluster.remove_node(node)

    def restore(self) -> None:
        """Back to the module's node count after a test removed some."""
        while len(self.workers) < self.size:
            self.workers.append(self.add_node())
        self.cluster.wait_for_nodes()

    def shutdown(self) -> None:
        self.cluster.shutdown()


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[TestCluster]:
    cluster = TestCluster()
    yield cluster
    cluster.shutdown()


@pytest.fixture(scope="module")
def two_node_cluster() -> Iterator[TestCluster]:
    """A head and exactly two worker nodes: losing one leaves one."""
    cluster = TestCluster(workers=2)
    yield cluster
    cluster.shutdown()
