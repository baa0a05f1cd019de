"""A real Ray cluster on loopback, a head and GPU-less-but-faked nodes, started once for every
module here that uses it: starting one costs 10-30 s, as much as the tests of a module."""

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

    def resize(self, workers: int) -> None:
        """Exactly ``workers`` worker nodes from now on (``restore`` keeps to that count)."""
        self.size = workers
        while len(self.workers) > workers:
            self.remove_node(self.workers[-1])
        self.restore()

    def healthy(self) -> bool:
        """Every process Ray started for the head and the workers still runs (a test that
        crashed a raylet or the GCS without removing its node leaves one dead)."""
        nodes = [self.cluster.head_node, *self.workers]
        return all(node.remaining_processes_alive() for node in nodes)

    def shutdown(self) -> None:
        self.cluster.shutdown()


class SharedCluster:
    """The one cluster of the modules here: started by the first that asks, shut down after the last."""

    def __init__(self) -> None:
        self.cluster: TestCluster | None = None

    def get(self) -> TestCluster:
        """The cluster, started anew when an earlier module left it broken: one module's
        damage fails that module, never the ones after it."""
        if self.cluster is not None and not self.cluster.healthy():
            self.shutdown()
        if self.cluster is None:
            self.cluster = TestCluster()
        return self.cluster

    def shutdown(self) -> None:
        if self.cluster is not None:
            self.cluster.shutdown()
            self.cluster = None


_USES_THE_SHARED_CLUSTER = ("ray_cluster", "two_node_cluster")


def _wanted_after(module: pytest.FixtureRequest) -> bool:
    """Whether a test after the last of this module asks for the shared cluster."""
    items = module.session.items
    mine = [index for index, item in enumerate(items) if item.path == module.path]
    return any(
        name in getattr(item, "fixturenames", ())
        for item in items[max(mine, default=len(items)) + 1 :]
        for name in _USES_THE_SHARED_CLUSTER
    )


@pytest.fixture(scope="session")
def shared_cluster() -> Iterator[SharedCluster]:
    shared = SharedCluster()
    yield shared
    shared.shutdown()  # a session that ended before the last module using it (-x, a timeout)


@pytest.fixture(scope="module")
def ray_cluster(shared_cluster: SharedCluster, request: pytest.FixtureRequest) -> Iterator[TestCluster]:
    """A head and WORKER_NODES worker nodes."""
    cluster = shared_cluster.get()
    cluster.resize(WORKER_NODES)
    yield cluster
    if not _wanted_after(request):
        shared_cluster.shutdown()


@pytest.fixture(scope="module")
def two_node_cluster(shared_cluster: SharedCluster, request: pytest.FixtureRequest) -> Iterator[TestCluster]:
    """A head and exactly two worker nodes: losing one leaves one."""
    cluster = shared_cluster.get()
    cluster.resize(2)
    yield cluster
    if not _wanted_after(request):
        shared_cluster.shutdown()


@pytest.fixture
def no_live_cluster(shared_cluster: SharedCluster) -> None:
    """No test cluster of this worker is running: its record in this worker's temporary folder
    (``ray_current_cluster``) is stale. ``--backend ray`` with no address joins a live recorded
    cluster, as it should, so each test of the embedded Ray shuts the shared one down first (the
    tests of these modules are spread over the workers, between other modules' tests; the next
    module that wants the cluster starts it again)."""
    shared_cluster.shutdown()
