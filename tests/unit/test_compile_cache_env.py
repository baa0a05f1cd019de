"""The compilation cache variables of a rank: under --cache-dir, never over what the user set."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic.core.compile_caches import CacheDirs, cache_dirs, cache_env
from elastic.core.launch_spec import worker_specs
from elastic.core.plan import NodeSlot, plan_attempt
from elastic.core.run_layout import RunLayout

LAYOUT = RunLayout(Path("/runs/r1"))
OURS = {
    "JAX_COMPILATION_CACHE_DIR": "/shared/cache/jax",
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    "TORCHINDUCTOR_CACHE_DIR": "/shared/cache/torchinductor",
    "TRITON_CACHE_DIR": "/shared/cache/triton",
    "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS": "0",
}


def _plan(cache_dir: str | None):  # type: ignore[no-untyped-def]
    return plan_attempt(run_id="r1", attempt=1, max_restarts=3, nodes=[NodeSlot("a", "10.0.0.1", 2)],
                        master_addr=None, master_port=29500, coordinator_port=29600, cache_dir=cache_dir)


def test_every_framework_gets_its_own_folder_under_the_cache_dir() -> None:
    """JAX's persistent cache (every program, however quick to compile), inductor's and Triton's."""
    assert OURS == cache_env({"PATH": "/bin"}, cache_dirs("/shared/cache/"))


def test_cache_dir_none_sets_nothing() -> None:
    """--cache-dir none: the frameworks' own defaults."""
    assert {} == cache_env({}, cache_dirs(None))
    spec = worker_specs(_plan(None), ["python", "train.py"], {}, LAYOUT)[0]
    assert set(OURS).isdisjoint(spec.env)
    assert () == spec.private_dirs


@pytest.mark.parametrize("name", sorted(OURS))
def test_a_variable_the_user_set_is_kept(name: str) -> None:
    """Each of the variables, set by the user, reaches the rank unchanged; the others are still set."""
    spec = worker_specs(_plan("/shared/cache"), ["python", "train.py"], {name: "mine"}, LAYOUT)[0]
    assert "mine" == spec.env[name]
    others = {k: v for k, v in OURS.items() if k != name}
    if name == "TORCHINDUCTOR_CACHE_DIR":  # Triton's kernels stay under the user's inductor folder
        for follows in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"):
            del others[follows]
            assert follows not in spec.env
    assert others == {k: spec.env[k] for k in others}
    assert "mine" not in spec.private_dirs


def test_the_folders_the_ranks_use_are_made_before_they_start() -> None:
    """Every rank's spec names the cache folders it was pointed at, to be made private on its node."""
    specs = worker_specs(_plan("/shared/cache"), ["python", "train.py"], {"TRITON_CACHE_DIR": "/t"}, LAYOUT)
    dirs = CacheDirs("/shared/cache")
    assert [(dirs.jax, dirs.inductor)] * 2 == [spec.private_dirs for spec in specs]
