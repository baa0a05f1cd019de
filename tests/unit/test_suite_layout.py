"""The suite's scheduling stays true: a test module that shares something started once a module
runs in one worker (``SHARING_MODULES`` in tests/xdist_scopes.py), or says here why not."""

from __future__ import annotations

import re
from pathlib import Path

from xdist_scopes import SHARING_MODULES

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent

# Shares a module fixture, yet its tests are spread over the workers on purpose.
SPREAD_ON_PURPOSE = {
    # Every test but one embeds a Ray of its own (about 10 minutes in all): grouped, the module
    # would end the run alone. The one joined-cluster test starts the shared cluster for itself.
    "tests/ray/test_embedded_ray_faults.py",
    # MaxText's module-wide jax_cache_dir only saves rank 0's compilation where two of its tests
    # share a worker; grouped, its tests (about 6 minutes) would end the run alone.
    "tests/frameworks/test_maxtext.py",
    # Its module fixture writes a few thousand small files: seconds, repeated in any worker.
    "tests/unit/node/watchers/test_latest_write.py",
}

_SHARES = re.compile(r'scope="module"|\b(ray_cluster|two_node_cluster|subreaper_cluster)\b')


def test_every_module_sharing_a_module_fixture_runs_in_one_worker_or_says_why_not() -> None:
    sharing = {
        str(path.relative_to(REPO))
        for path in TESTS.rglob("test_*.py")
        if _SHARES.search(path.read_text(encoding="utf-8"))
    }
    sharing.discard(str(Path(__file__).resolve().relative_to(REPO)))  # this file names them
    assert sorted(sharing - SPREAD_ON_PURPOSE) == sorted(SHARING_MODULES)
