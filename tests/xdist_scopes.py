"""Which tests pytest-xdist keeps together: a module whose tests share something started once a
module runs in one worker; every other test goes to whichever worker is free."""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

__all__ = ["SHARING_MODULES", "ModulesWithSharedFixtures"]

# Test modules whose tests share something started once a module: a Ray cluster
# (tests/ray/conftest.py's shared cluster, the subreaper's), the Slurm cluster, a framework's
# uninterrupted baseline run or its tiny model. Each runs in one worker, so that starts once;
# every other test goes to whichever worker is free (MaxText's and the embedded Ray's tests
# each start their own: grouped, one module would end the run alone). A test module that
# adds a module-scoped fixture belongs here (tests/unit/test_suite_layout.py checks).
SHARING_MODULES = frozenset({
    "tests/frameworks/test_jax_orbax.py",
    "tests/frameworks/test_lightning.py",
    "tests/frameworks/test_trl_sft.py",
    "tests/process/test_inplace_restart.py",
    "tests/ray/test_ray_backend.py",
    "tests/ray/test_ray_drain.py",
    "tests/ray/test_ray_drains.py",
    "tests/ray/test_ray_edge.py",
    "tests/ray/test_ray_exit_hangs.py",
    "tests/ray/test_ray_jax.py",
    "tests/ray/test_ray_node_health.py",
    "tests/ray/test_ray_steps.py",
    "tests/ray/test_ray_subreaper.py",
    "tests/slurm/test_sbatch.py",
})


class ModulesWithSharedFixtures(LoadScopeScheduling):
    """pytest-xdist's scope scheduling with two sizes of scope: a module of
    :data:`SHARING_MODULES`, a single test everywhere else. Larger scopes are handed out first
    (``--loadscope-reorder``, xdist's default), so the long modules do not end the run alone."""

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return module if module in SHARING_MODULES else nodeid
